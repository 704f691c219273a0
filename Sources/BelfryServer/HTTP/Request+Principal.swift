import Foundation
import Vapor

extension Request {
    /// The caller, from `Authorization: Bearer …`: an API key or a user token.
    func principal(_ auth: Authenticator) async throws -> Principal {
        guard let bearer = headers.bearerAuthorization?.token else {
            throw BelfryError(
                .unauthorized, "send an API key or a user token as \"Authorization: Bearer <token>\"",
                .challenge("Bearer"))
        }
        return try await principal(auth, for: bearer)
    }

    func principal(_ auth: Authenticator, for bearer: String) async throws -> Principal {
        // Read once per request: the rate limit reads it before the route does.
        if let known = storage[KnownPrincipal.self], known.bearer == bearer { return known.principal }
        let principal = try await verifiedPrincipal(auth, for: bearer)
        storage[KnownPrincipal.self] = KnownPrincipal(bearer: bearer, principal: principal)
        return principal
    }

    /// The principal of `bearer` if it is a key of the configuration, found without leaving the
    /// event loop (the rate limit's fast path), and kept for the route as `principal(for:)` keeps
    /// what it finds.
    func configuredKeyPrincipal(_ auth: Authenticator, for bearer: String) -> Principal? {
        guard let fingerprint = auth.apiKeys.fingerprint(ifAccepting: bearer) else { return nil }
        let principal = Principal.server(.environment(fingerprint: fingerprint))
        storage[KnownPrincipal.self] = KnownPrincipal(bearer: bearer, principal: principal)
        return principal
    }

    /// The grant of `key` if it is an API key: one of the configuration's, or an active stored one.
    func apiKeyGrant(_ auth: Authenticator, for key: String) async throws -> KeyGrant? {
        if let fingerprint = auth.apiKeys.fingerprint(ifAccepting: key) {
            return .environment(fingerprint: fingerprint)
        }
        return try await auth.keyStore.grant(for: key, on: db)
    }

    /// The connection's address: never a forwarded-for header, which a client can write.
    var clientAddress: String {
        remoteAddress?.ipAddress ?? "unknown"
    }

    private struct KnownPrincipal: StorageKey, Sendable {
        typealias Value = KnownPrincipal
        var bearer: String
        var principal: Principal
    }

    private func verifiedPrincipal(_ auth: Authenticator, for bearer: String) async throws -> Principal {
        if let grant = try await apiKeyGrant(auth, for: bearer) { return .server(grant) }
        do {
            return .user(try await auth.tokens.verify(bearer, now: auth.now()))
        } catch .expired {
            throw BelfryError(
                .tokenExpired, "the user token has expired; mint a new one",
                .challenge("Bearer error=\"invalid_token\""))
        } catch {
            throw BelfryError(
                .invalidToken, "the token is neither an API key nor a valid user token",
                .challenge("Bearer error=\"invalid_token\""))
        }
    }

    /// Requires an API key whose scope is `admin` or one of `scopes` (`admin` alone when none
    /// are given).
    @discardableResult
    func requireServer(_ auth: Authenticator, _ scopes: KeyScope...) async throws -> KeyGrant {
        guard case .server(let grant) = try await principal(auth) else {
            throw BelfryError(.forbidden, "this endpoint needs an API key, not a user token")
        }
        try Self.check(grant, allows: scopes.isEmpty ? [.admin] : scopes)
        return grant
    }

    /// Refuses a key whose scope is not `admin` or one of `allowed`, naming both.
    private static func check(_ grant: KeyGrant, allows allowed: [KeyScope]) throws {
        guard !allowed.contains(where: grant.scope.permits) else { return }
        throw BelfryError(
            .forbidden,
            "the key \"\(grant.name)\" has the \(grant.scope.rawValue) scope; this endpoint needs "
                + (allowed + (allowed.contains(.admin) ? [] : [.admin])).map(\.rawValue).joined(separator: " or "))
    }

    /// Requires a user token for a user that still exists. A page's token passes only where
    /// `page` names its page: the routes that page's scripts call.
    func requireUser(_ auth: Authenticator, page: WebLayout.Page? = nil) async throws -> UserModel {
        try await user(for: try await requireUserSubject(auth, page: page))
    }

    /// Requires a user token, without reading its user: the caller checks that the user still
    /// exists (a stream does so in the query for its first counts).
    ///
    /// - Parameter allowingQueryToken: also accept the token as a `token` query parameter, for
    ///   browsers' EventSource, which cannot send headers. Request logs show paths only, not queries.
    func requireUserSubject(
        _ auth: Authenticator, allowingQueryToken: Bool = false, page: WebLayout.Page? = nil
    ) async throws -> UserTokens.Subject {
        let principal: Principal
        if allowingQueryToken, headers.bearerAuthorization == nil, let token = queryValue(named: "token") {
            principal = try await self.principal(auth, for: token)
        } else {
            principal = try await self.principal(auth)
        }
        guard case .user(let subject) = principal else {
            throw BelfryError(
                .forbidden,
                "this endpoint acts as one user: send a user token (POST /v1/users/{user_id}/tokens), not an API key")
        }
        try Self.check(subject, reaches: page)
        return subject
    }

    /// A page's token reaches its page's routes only: one taken from a page (or a link's session)
    /// cannot read the user's devices or act as the user elsewhere.
    private static func check(_ subject: UserTokens.Subject, reaches page: WebLayout.Page?) throws {
        guard let scoped = subject.page, scoped != page else { return }
        throw BelfryError(
            .forbidden,
            "this token belongs to the \(scoped.rawValue) page and reaches only the routes its scripts call; "
                + "a backend mints user tokens with POST /v1/users/{user_id}/tokens")
    }

    /// The value of the query parameter `name` (the last of repeated values), read with the
    /// query check's own decoder: Vapor's query decoder took a tenth of a stream's opening to
    /// find one value. `QueryCheckMiddleware` has refused a query that does not decode.
    func queryValue(named name: String) -> String? {
        guard let query = url.query, let pairs = try? URLEncoded.pairs(Substring(query)) else { return nil }
        return pairs.last { $0.name == name }?.value
    }

    /// Requires an API key, or a user token of the user named in the path (`user_id`). The
    /// caller is authenticated before the id is checked, so a malformed id without credentials
    /// is a 401, not a 422.
    func requireServerOrPathUser(_ auth: Authenticator) async throws -> UserModel {
        let principal = try await principal(auth)
        let externalID = try userIDParameter()
        switch principal {
        case .server(let grant):
            try Self.check(grant, allows: [.admin])
            return try await UserModel.find(externalID: externalID, on: db)
        case .user(let subject):
            guard subject.externalID == externalID else {
                throw BelfryError(.forbidden, "a user token only reaches its own user's data")
            }
            try Self.check(subject, reaches: nil)
            return try await user(for: subject)
        }
    }

    /// The user of a verified token, if it still exists and the token's session has not ended.
    func user(for subject: UserTokens.Subject) async throws -> UserModel {
        guard let user = try await UserModel.find(subject.userID, on: db) else { throw Self.userGone }
        if let epoch = subject.epoch, epoch != user.sessionEpoch { throw Self.signedOut }
        return user
    }

    /// A page token from before the user signed out everywhere.
    static let signedOut = BelfryError(
        .invalidToken, "this page's session has ended; open the page from your app or email again",
        .challenge("Bearer error=\"invalid_token\""))

    /// A valid token whose user was erased.
    static let userGone = BelfryError(.invalidToken, "the user of this token no longer exists")
}
