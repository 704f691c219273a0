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

extension BelfryContext {
    var deadLetters: DeadLetters { DeadLetters(storage: database, now: now) }
}
