import BelfryJSON
import Crypto
import Foundation

/// The provider token: an ES256 JWT with the key id and team id, kept and reused between 20
/// and 60 minutes as Apple asks (signed anew after 50), and replaced at once when refused.
public final class APNsProviderTokens: @unchecked Sendable {
    /// The key could not sign a provider token.
    public struct SigningFailed: Error {
        public var underlying: any Error
    }

    public static let lifetime: TimeInterval = 50 * 60

    private let key: P256.Signing.PrivateKey
    private let keyID: String
    private let teamID: String
    private let now: @Sendable () -> Date
    // Guarded by `lock`, which makes the class `Sendable`. The key is immutable; some
    // swift-crypto versions do not mark it `Sendable`.
    private var cached: (token: String, issuedAt: Date)?
    private let lock = NSLock()

    /// - Parameters:
    ///   - key: the `.p8` key from the developer account.
    ///   - now: the clock that dates each token and says when it is due for renewal.
    public init(key: P256.Signing.PrivateKey, keyID: String, teamID: String, now: @escaping @Sendable () -> Date) {
        self.key = key
        self.keyID = keyID
        self.teamID = teamID
        self.now = now
    }

    /// The token requests carry now.
    /// - Throws: `SigningFailed` when the key cannot sign; a request never goes out with an
    ///   empty signature.
    public func current() throws -> String {
        let now = self.now()
        return try lock.withLock {
            if let cached, now.timeIntervalSince(cached.issuedAt) < Self.lifetime, now >= cached.issuedAt {
                return cached.token
            }
            let token = try sign(issuedAt: now)
            cached = (token, now)
            return token
        }
    }

    /// A new token in place of `refused`, unless another request already replaced it.
    public func replace(_ refused: String) throws -> String {
        let now = self.now()
        return try lock.withLock {
            if let cached, cached.token != refused { return cached.token }
            let token = try sign(issuedAt: now)
            cached = (token, now)
            return token
        }
    }

    private func sign(issuedAt: Date) throws -> String {
        let header = #"{"alg":"ES256","kid":"\#(keyID)"}"#
        let claims = #"{"iss":"\#(teamID)","iat":\#(Int(issuedAt.timeIntervalSince1970))}"#
        let input = "\(JOSE.base64URL(Data(header.utf8))).\(JOSE.base64URL(Data(claims.utf8)))"
        // Apple checks a JOSE signature: r and s, 32 bytes each.
        let signature: Data
        do {
            signature = try key.signature(for: Data(input.utf8)).rawRepresentation
        } catch {
            throw SigningFailed(underlying: error)
        }
        return "\(input).\(JOSE.base64URL(signature))"
    }
}
