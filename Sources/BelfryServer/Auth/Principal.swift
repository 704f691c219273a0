import Foundation

/// Who made a request.
enum Principal: Sendable {
    /// A backend holding an API key, with what the key may do.
    case server(KeyGrant)
    /// A client holding a user token.
    case user(UserTokens.Subject)
}
