import Foundation

/// What a request's credentials are checked against: the configured API keys, the stored ones,
/// and the user tokens this server signs. Made once by `configure`, handed to the routes.
struct Authenticator: Sendable {
    let apiKeys: APIKeys
    let keyStore: KeyStore
    let tokens: UserTokens
    let now: @Sendable () -> Date
}
