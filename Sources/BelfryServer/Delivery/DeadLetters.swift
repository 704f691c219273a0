import BelfryCore
import Fluent
import Foundation
import SQLKit

/// Deliveries that failed on every attempt (`dead`), put back in the queue by an operator once
/// the cause is fixed (a receiver back up, a key renewed).
struct DeadLetters: Sendable {
    let storage: BelfryDatabase
    let now: @Sendable () -> Date

    /// Queues the event's dead deliveries again, each with a fresh set of attempts, due now.
    /// - Returns: how many were queued.
    func retry(event: UUID, on db: any Database) async throws -> Int {
        let now = now()
        return try await storage.write(db) { tx in
            try await tx.sql.update("deliveries")
                .set("status", to: DeliveryStatus.queued.rawValue)
                .set("attempts", to: 0)
                .set("next_attempt_at", to: now)
                .set("lease_expires_at", to: Date?.none)
                .set("updated_at", to: now)
                .where("event_id", .equal, event)
                .where("status", .equal, DeliveryStatus.dead.rawValue)
                .returning("id")
                .all().count
        }
    }
}

/// An event as `belfry events list` shows it.
struct EventSummary: Sendable {
    var id: UUID
    var state: String
    var category: String
    var tenant: String
    var createdAt: Date
    var recipients: Int
    var processed: Int
}

extension EventIntake {
    /// The newest events first, optionally in one fan-out state.
    func recent(state: EventStatus.FanoutState?, limit: Int, on db: any Database) async throws -> [EventSummary] {
        let select = db.sql.select()
            .columns("id", "state", "category", "tenant", "created_at", "recipients", "processed")
            .from("events")
        if let state { select.where("state", .equal, state.rawValue) }
        return try await select.orderBy("created_at", .descending).limit(limit).all().map { row in
            EventSummary(
                id: try row.decode(column: "id", as: UUID.self),
                state: try row.decode(column: "state", as: String.self),
                category: try row.decode(column: "category", as: String.self),
                tenant: try row.decode(column: "tenant", as: String.self),
                createdAt: try row.decode(column: "created_at", as: Date.self),
                recipients: try row.decode(column: "recipients", as: Int.self),
                processed: try row.decode(column: "processed", as: Int.self))
        }
    }
}

extension BelfryContext {
    var deadLetters: DeadLetters { DeadLetters(storage: database, now: now) }
}
