import BelfryCore
import Fluent
import Foundation
import SQLKit

/// What operators and keys did, kept for the retention period: keys created and revoked, users
/// erased, console sign-ins (refused ones too), retries from the console or the command line,
/// devices moved between users, "sign out everywhere", and the configuration each start ran
/// with. `GET /v1/audit`, `belfry audit` and the console's audit page read it.
struct AuditLog: Sendable {
    enum Action: String, Sendable {
        case keyCreated = "key.created"
        case keyRevoked = "key.revoked"
        case userErased = "user.erased"
        case userSignedOut = "user.signed_out_everywhere"
        case consoleSignIn = "console.sign_in"
        case consoleSignInFailed = "console.sign_in_failed"
        case consoleSignOut = "console.sign_out"
        case deliveriesRetried = "deliveries.retried"
        case testNotificationSent = "test_notification.sent"
        case deviceMoved = "device.moved"
        case serverStarted = "server.started"
    }

    let storage: BelfryDatabase
    let now: @Sendable () -> Date

    func record(
        _ action: Action, by actor: String, subject: String? = nil, detail: String? = nil, on db: any Database
    ) async throws {
        let at = now()
        let id = UUID.timeOrdered(at: at)
        try await storage.write(db) { tx in
            try await tx.sql.insert(into: Tables.auditLog)
                .columns("id", "at", "actor", "action", "subject", "detail")
                .values(
                    SQLBind(id), SQLBind(at), SQLBind(actor), SQLBind(action.rawValue), SQLBind(subject),
                    SQLBind(detail)
                )
                .run()
        }
    }

    /// Entries newest first, older than `before` (an entry's id) when given. Ids are
    /// time-ordered, so they page in time order.
    func entries(limit: Int, before: UUID?, on db: any Database) async throws -> AuditPage {
        let query = db.sql.select().columns("id", "at", "actor", "action", "subject", "detail").from(Tables.auditLog)
            .orderBy("id", .descending).limit(limit + 1)
        if let before { query.where("id", .lessThan, before) }
        let rows = try await query.all()
        let entries = try rows.prefix(limit).map { row in
            AuditEntry(
                id: try row.decode(column: "id", as: UUID.self), at: try row.decode(column: "at", as: Date.self),
                actor: try row.decode(column: "actor", as: String.self),
                action: try row.decode(column: "action", as: String.self),
                subject: try row.decode(column: "subject", as: String?.self),
                detail: try row.decode(column: "detail", as: String?.self))
        }
        let next = rows.count > limit ? entries.last?.id.uuidString.lowercased() : nil
        return AuditPage(entries: Array(entries), nextBefore: next)
    }

    /// Drops entries older than `days`.
    @discardableResult
    func purge(olderThan days: Int, on db: any Database) async throws -> Int {
        let cutoff = now().addingTimeInterval(-TimeInterval(days) * 86_400)
        return try await storage.write(db) { tx in
            try await tx.sql.raw("DELETE FROM audit_log WHERE at < \(bind: cutoff) RETURNING id").all().count
        }
    }
}
