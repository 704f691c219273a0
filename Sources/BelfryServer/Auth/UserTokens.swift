import BelfryWebPush
import Foundation
import JWTKit

/// Short-lived signed user tokens (HS256 JWTs) that let a client act as one user.
struct UserTokens: Sendable {
    struct Payload: JWTPayload {
        /// The user's external id.
        var sub: SubjectClaim
        /// The user's internal id, so a token stops working once the user is erased,
        /// even if the same external id is used again.
        var uid: String
        var iss: IssuerClaim
        var aud: AudienceClaim
        var iat: IssuedAtClaim
        var exp: ExpirationClaim
        /// A page token's page: such a token reaches only the routes that page's scripts call.
        var scope: String?
        /// A page token's session epoch: "sign out everywhere" ends it with its session.
        var ep: Int?

        // Expiry is checked by `UserTokens.verify` against the server's clock, which tests control.
        func verify(using algorithm: some JWTAlgorithm) async throws {
            guard iss.value == UserTokens.issuer else {
                throw JWTError.claimVerificationFailure(failedClaim: iss, reason: "wrong issuer")
            }
            try aud.verifyIntendedAudience(includes: UserTokens.audience)
        }
    }

    struct Minted: Sendable {
        var token: String
        var expiresAt: Date
    }

    /// Who a verified token speaks for.
    struct Subject: Sendable, Hashable {
        var userID: UUID
        var externalID: String
        /// When the token stops being valid: a stream it opened ends then.
        var expiresAt: Date
        /// For a page's token, the page whose routes it reaches; `nil` for a token the backend minted.
        var page: WebLayout.Page?
        /// For a page's token, the user's session epoch when it was minted.
        var epoch: Int?
    }

    enum Failure: Error {
        case malformed
        case expired
    }

    static let issuer = "belfry"
    static let audience = "belfry:user"

    private let keys: JWTKeyCollection
    let lifetime: Int

    init(secret: String, lifetime: Int) async {
        keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
        self.lifetime = lifetime
    }

    /// A token for `userID`. With `page`, a page token: it reaches only the routes of that page
    /// and ends when the user's session epoch moves past `epoch`.
    func mint(
        userID: UUID, externalID: String, now: Date, lifetime: Int? = nil, page: WebLayout.Page? = nil,
        epoch: Int? = nil
    ) async throws -> Minted {
        // JWT times are whole seconds; round so `expires_at` matches the token's `exp` exactly.
        let issued = Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down))
        let expiresAt = issued.addingTimeInterval(TimeInterval(lifetime ?? self.lifetime))
        let payload = Payload(
            sub: .init(value: externalID), uid: userID.uuidString, iss: .init(value: Self.issuer),
            aud: .init(value: Self.audience), iat: .init(value: issued), exp: .init(value: expiresAt),
            scope: page?.rawValue, ep: page == nil ? nil : epoch)
        return Minted(token: try await keys.sign(payload), expiresAt: expiresAt)
    }

    func verify(_ token: String, now: Date) async throws(Failure) -> Subject {
        // One spelling per token: JWTKit's decoder also takes a signature whose last character
        // carries stray low bits.
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, parts.allSatisfy({ Base64URL.decodeCanonical(String($0)) != nil }) else {
            throw .malformed
        }
        let payload: Payload
        do {
            payload = try await keys.verify(token, as: Payload.self)
        } catch {
            throw .malformed
        }
        do {
            try payload.exp.verifyNotExpired(currentDate: now)
        } catch {
            throw .expired
        }
        guard let userID = UUID(uuidString: payload.uid) else { throw .malformed }
        var page: WebLayout.Page?
        if let scope = payload.scope {
            guard let named = WebLayout.Page(rawValue: scope) else { throw .malformed }
            page = named
        }
        return Subject(
            userID: userID, externalID: payload.sub.value, expiresAt: payload.exp.value, page: page,
            epoch: page == nil ? nil : payload.ep ?? 0)
    }
}
