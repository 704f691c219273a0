import BelfryCore
import Fluent
import Foundation
import SQLKit

/// Deliveries that ended without being sent: `dead` (every attempt failed) or `failed` (one
/// that trying again could not help, such as a channel with no provider configured). An
/// operator lists them and puts them back in the queue once the cause is fixed (a receiver
/// back up, a key renewed, the provider configured).
struct DeadLetters: Sendable {
    let storage: BelfryDatabase
    let now: @Sendable () -> Date

    /// What an operator may retry.
    static let retryable: [DeliveryStatus] = [.dead, .failed]

    /// One delivery that ended unsent, as the console and `belfry deliveries list` show it.
    struct Ended: Sendable {
        var id: UUID
        var eventID: UUID
        var channel: String
        var user: String
        var status: DeliveryStatus
        var attempts: Int
        var lastError: String?
        var updatedAt: Date
    }

    /// Ended deliveries, the latest first: of `statuses`, on `channel` when given, ended since
    /// `since` when given.
    func list(
        statuses: [DeliveryStatus] = retryable, channel: String? = nil, since: Date? = nil, limit: Int,
        on db: any Database
    ) async throws -> [Ended] {
        let select = db.sql.select()
            .columns(
                SQLColumn("id", table: Tables.deliveries), SQLColumn("event_id"), SQLColumn("channel"),
                SQLColumn("external_id"), SQLColumn("status"), SQLColumn("attempts"), SQLColumn("last_error"),
                SQLColumn("updated_at", table: Tables.deliveries)
            )
            .from(Tables.deliveries)
            .join(
                UserModel.schema, on: SQLColumn("user_id", table: Tables.deliveries), .equal,
                SQLColumn("id", table: UserModel.schema)
            )
            .where("status", .in, statuses.map(\.rawValue))
        if let channel { select.where("channel", .equal, channel) }
        if let since {
            select.where(SQLColumn("updated_at", table: Tables.deliveries), .greaterThanOrEqual, SQLBind(since))
        }
        return
            try await select
            .orderBy(
                SQLOrderBy(
                    expression: SQLColumn("updated_at", table: Tables.deliveries), direction: SQLDirection.descending)
            )
            .limit(limit)
            .all()
            .map { row in
                Ended(
                    id: try row.decode(column: "id", as: UUID.self),
                    eventID: try row.decode(column: "event_id", as: UUID.self),
                    channel: try row.decode(column: "channel", as: String.self),
                    user: try row.decode(column: "external_id", as: String.self),
                    status: DeliveryStatus(rawValue: try row.decode(column: "status", as: String.self)) ?? .failed,
                    attempts: try row.decode(column: "attempts", as: Int.self),
                    lastError: try row.decode(column: "last_error", as: String?.self),
                    updatedAt: try row.decode(column: "updated_at", as: Date.self))
            }
    }

    /// Queues the event's failed and dead deliveries again, each with a fresh set of attempts, due now.
    /// - Returns: how many were queued.
    func retry(event: UUID, on db: any Database) async throws -> Int {
        try await requeue(on: db) { $0.where("event_id", .equal, event) }
    }

    /// Queues one failed or dead delivery again; `false` when there is no such delivery to retry.
    func retry(delivery: UUID, on db: any Database) async throws -> Bool {
        try await requeue(on: db) { $0.where("id", .equal, delivery) } == 1
    }

    /// Queues every failed and dead delivery of `channel` again.
    func retry(channel: String, on db: any Database) async throws -> Int {
        try await requeue(on: db) { $0.where("channel", .equal, channel) }
    }

    private func requeue(
        on db: any Database, _ narrow: @escaping @Sendable (SQLUpdateBuilder) -> SQLUpdateBuilder
    ) async throws -> Int {
        let now = now()
        return try await storage.write(db) { tx in
            let update = tx.sql.update(Tables.deliveries)
                .set("status", to: DeliveryStatus.queued.rawValue)
                .set("attempts", to: 0)
                .set("next_attempt_at", to: now)
                .set("lease_expires_at", to: Date?.none)
                .set("updated_at", to: now)
                .where("status", .in, Self.retryable.map(\.rawValue))
            return try await narrow(update).returning("id").all().count
        }
    }
}
