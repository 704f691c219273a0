import BelfryCore
import BelfryMail
import Fluent
import Foundation
import SQLKit
import Vapor

/// Server-side user management: `/v1/users/{user_id}` (API key).
struct UsersController: RouteCollection {
    /// The server's settings and shared parts (the clock, the workspace, the database).
    let context: BelfryContext
    let auditLog: AuditLog

    func boot(routes: any RoutesBuilder) throws {
        let users = routes.grouped("v1", "users", ":user_id")
        users.put(use: upsert)
        users.get(use: show)
        users.delete(use: erase)
        users.post("tokens", use: mintToken)
        users.delete("sessions", use: signOutEverywhere)
    }

    @Sendable func upsert(req: Request) async throws -> Response {
        try await req.requireServer(context.auth)
        let externalID = try req.userIDParameter()
        // A field left out keeps its value; one sent as null clears it.
        let (body, cleared) = try req.decodeBodyAndNulls(UserUpsert.self)
        try Self.validate(body, workspace: context.workspace)
        let now = context.now()
        let (user, created, tenants) = try await upsert(externalID, body, clearing: cleared, now: now, req: req)
        req.logger.info("user saved", metadata: ["belfry.user": "\(externalID)", "belfry.created": "\(created)"])
        return try Response.json(user.record(tenants: tenants), status: created ? .created : .ok)
    }

    /// Creates or updates the user. Two first requests for one user can race to insert it;
    /// the loser sees the unique constraint fail and goes again as an update.
    private func upsert(
        _ externalID: String, _ body: UserUpsert, clearing cleared: Set<String>, now: Date, req: Request
    ) async throws
        -> (UserModel, Bool, [String])
    {
        for attempt in 1...2 {
            do {
                return try await context.database.write(req.db) { db in
                    let existing = try await UserModel.query(on: db).filter(\.$externalID == externalID).first()
                    let user = existing ?? UserModel(externalID: externalID, now: now)
                    if let email = body.email {
                        user.email = email
                    } else if cleared.contains("email") {
                        user.email = nil
                    }
                    if let timeZone = body.timeZone {
                        user.timeZone = timeZone
                    } else if cleared.contains("time_zone") {
                        user.timeZone = nil
                    }
                    if let locale = body.locale {
                        user.locale = locale
                    } else if cleared.contains("locale") {
                        user.locale = nil
                    }
                    user.updatedAt = now
                    try await user.save(on: db)
                    let userID = try user.requireID()
                    if body.tenants != nil || cleared.contains("tenants") {
                        try await UserTenantModel.query(on: db).filter(\.$user.$id == userID).delete()
                        for tenant in Set(body.tenants ?? []).sorted() {
                            try await UserTenantModel(userID: userID, tenant: tenant).create(on: db)
                        }
                    }
                    return (user, existing == nil, try await user.tenantIDs(on: db))
                }
            } catch  where error.isConstraintFailure && attempt == 1 {
                continue
            }
        }
        preconditionFailure("the second attempt returns or throws")
    }

    @Sendable func show(req: Request) async throws -> Response {
        try await req.requireServer(context.auth)
        let user = try await UserModel.find(externalID: try req.userIDParameter(), on: req.db)
        return try Response.json(user.record(tenants: try await user.tenantIDs(on: req.db)))
    }

    /// Erases the user and everything stored about them.
    @Sendable func erase(req: Request) async throws -> HTTPStatus {
        let grant = try await req.requireServer(context.auth)
        let externalID = try req.userIDParameter()
        try await UserErasure.erase(externalID, storage: context.database, on: req.db)
        req.logger.info("user erased", metadata: ["belfry.user": "\(externalID)"])
        try await self.auditLog.record(.userErased, by: grant.actor, subject: externalID, on: req.db)
        return .noContent
    }

    /// `DELETE /v1/users/{user_id}/sessions` (an API key, or the user's own token): signs the
    /// user out of every browser. Their page sessions and the page tokens minted from them stop
    /// working at their next request, on every instance; tokens the backend minted are not touched.
    @Sendable func signOutEverywhere(req: Request) async throws -> HTTPStatus {
        let user = try await req.requireServerOrPathUser(context.auth)
        let userID = try user.requireID()
        let actor: String =
            switch try await req.principal(context.auth) {
            case .server(let grant): grant.actor
            case .user: "user:\(user.externalID)"
            }
        try await context.database.write(req.db) { db in
            try await db.sql.raw(
                "UPDATE users SET session_epoch = session_epoch + 1 WHERE id = \(bind: userID)"
            ).run()
        }
        req.logger.info("signed out everywhere", metadata: ["belfry.user": "\(user.externalID)"])
        try await self.auditLog.record(.userSignedOut, by: actor, subject: user.externalID, on: req.db)
        return .noContent
    }

    struct TokenRequest: Decodable, RequestFields {
        var ttlSeconds: Int?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case ttlSeconds = "ttl_seconds"
        }

        static var fields: Set<String> { CodingKeys.names }
    }

    @Sendable func mintToken(req: Request) async throws -> Response {
        try await req.requireServer(context.auth)
        let user = try await UserModel.find(externalID: try req.userIDParameter(), on: req.db)
        let hasBody = (req.body.data?.readableBytes ?? 0) > 0
        let lifetime = hasBody ? try req.decodeBody(TokenRequest.self).ttlSeconds : nil
        if let lifetime, !(60...context.settings.tokenLifetime).contains(lifetime) {
            throw BelfryError.invalid(
                "field \"ttl_seconds\" must be from 60 to \(context.settings.tokenLifetime), got \(lifetime)")
        }
        let minted = try await context.tokens.mint(
            userID: try user.requireID(), externalID: user.externalID, now: context.now(), lifetime: lifetime)
        return try Response.json(TokenGrant(token: minted.token, expiresAt: minted.expiresAt), status: .created)
    }

    static func validate(_ body: UserUpsert, workspace: WorkspaceConfig) throws {
        var problems: [String] = []
        if let email = body.email {
            // The same check the email channel's SMTP client makes: an accepted address is one it can send to.
            if !MailAddress.isValid(email) {
                problems.append(
                    "field \"email\" must be an email address such as ada@example.org (ASCII, no spaces or "
                        + "<>()[],;:\"\\), got \"\(email.prefix(80))\"")
            }
        }
        if let timeZone = body.timeZone, TimeZone(identifier: timeZone) == nil {
            problems.append("field \"time_zone\" must be an IANA time zone such as Europe/Berlin, got \"\(timeZone)\"")
        }
        if let locale = body.locale,
            locale.range(of: #"^[A-Za-z]{2,3}([_-][A-Za-z0-9]{2,8})*$"#, options: .regularExpression) == nil
        {
            problems.append("field \"locale\" must be a language tag such as de or pt-BR, got \"\(locale)\"")
        }
        // Named up to a few: the answer to a list of thousands stays short.
        let unknown = (body.tenants ?? []).enumerated().filter { workspace.tenant($0.element) == nil }
        for (index, tenant) in unknown.prefix(3) {
            problems.append("field \"tenants[\(index)]\": no tenant \"\(tenant.prefix(80))\" in this workspace")
        }
        if unknown.count > 3 { problems.append("\(unknown.count - 3) more tenants are unknown") }
        if !problems.isEmpty {
            throw BelfryError.invalid(problems.joined(separator: "; "))
        }
    }
}

/// The shape of an external user id.
enum UserID {
    static let rule = "1 to 128 letters, digits or any of _ . @ : + -"
    private static let allowed = CharacterSet(
        charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.@:+-")

    static func isValid(_ id: String) -> Bool {
        (1...128).contains(id.count) && id.unicodeScalars.allSatisfy(allowed.contains)
    }
}

extension Request {
    /// The `{user_id}` path parameter.
    func userIDParameter() throws -> String {
        let id = parameters.get("user_id") ?? ""
        guard UserID.isValid(id) else {
            throw BelfryError.invalid("the user id must be \(UserID.rule), got \"\(id)\"")
        }
        return id
    }
}
