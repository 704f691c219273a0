import Foundation

/// What JSON Web Tokens are written with (RFC 7515).
public enum JOSE {
    /// Base64url (RFC 7515 §2): the URL-safe alphabet, without padding.
    public static func base64URL(_ data: Data) -> String {
        String(
            data.base64EncodedString().compactMap { character -> Character? in
                switch character {
                case "+": "-"
                case "/": "_"
                case "=": nil
                default: character
                }
            })
    }
}
