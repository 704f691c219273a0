import BelfryWebPush
import Crypto
import Foundation

/// A JWT whose ES256 signature (raw r‖s, as JOSE writes it) checks out with a public key, and
/// whose header says `ES256`: what APNs and push services verify before they read the claims.
struct SignedJWT {
    let header: [String: Any]
    let claims: [String: Any]

    /// `nil` when the token is malformed, not ES256, or not signed by `publicKey`.
    init?(_ token: String, publicKey: P256.Signing.PublicKey) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 3, let signature = Base64URL.decode(parts[2]),
            let ecdsa = try? P256.Signing.ECDSASignature(rawRepresentation: signature),
            publicKey.isValidSignature(ecdsa, for: Data("\(parts[0]).\(parts[1])".utf8)),
            let header = Self.json(parts[0]), header["alg"] as? String == "ES256",
            let claims = Self.json(parts[1])
        else { return nil }
        self.header = header
        self.claims = claims
    }

    private static func json(_ part: String) -> [String: Any]? {
        Base64URL.decode(part).flatMap { try? JSONSerialization.jsonObject(with: $0) as? [String: Any] }
    }
}
