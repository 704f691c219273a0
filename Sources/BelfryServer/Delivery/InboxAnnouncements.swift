import BelfryCore
import Fluent
import Foundation
import SQLKit

/// A notification due in the inbox later (a calendar schedule) is in the inbox from its
/// `available_at`, as every query of the inbox reads it; what waits for that time is telling
/// the user's open streams, counting it delivered and reporting `message.sent`. Fan-out marks
/// such a notification with `announce_at` instead of queueing a delivery row for it, and the
/// delivery queue announces the due ones as it goes round (at most every quarter second).
extension DeliveryQueue {
    /// Notifications announced in one transaction.
    static let announcementsPerStep = 500

    /// Announces the notifications whose time has come: clears their `announce_at` and queues
    /// their `message.sent` in one transaction, then counts them and tells the streams.
    /// - Returns: how many were announced.
    @discardableResult
    func announceDueInbox() async throws -> Int {
        guard let inbox = workspace.channels.first(where: { $0.kind == .inbox }) else { return 0 }
        let now = self.now()
        // A read on the partial index first: the queue asks four times a second, and most of the
        // time nothing is due, which then costs no write transaction (on SQLite, the one writer's).
        let due = try await database().sql.select().column("id").from(Tables.notifications)
            .where("announce_at", .lessThanOrEqual, now).limit(1).first()
        guard due != nil else { return 0 }
        let locking = storage.kind == .postgres ? " FOR UPDATE SKIP LOCKED" : ""
        let limit = String(Self.announcementsPerStep)
        let statement: SQLQueryString = """
            UPDATE notifications SET announce_at = NULL
            WHERE id IN (SELECT id FROM (
              SELECT id FROM notifications WHERE announce_at IS NOT NULL AND announce_at <= \(bind: now)
              ORDER BY announce_at LIMIT \(unsafeRaw: limit)\(unsafeRaw: locking)) AS due)
            RETURNING id, event_id, user_id, category, tenant
            """
        let statusEvents = self.statusEvents
        let announced = try await storage.write(database()) { tx in
            let rows = try await tx.sql.raw(statement).all().map { row in
                (
                    id: try row.decode(column: "id", as: UUID.self),
                    event: try row.decode(column: "event_id", as: UUID.self),
                    user: try row.decode(column: "user_id", as: UUID.self),
                    category: try row.decode(column: "category", as: String.self),
                    tenant: try row.decode(column: "tenant", as: String.self)
                )
            }
            if let statusEvents, statusEvents.wants(.messageSent), !rows.isEmpty {
                let externalIDs = try await StatusEvents.externalIDs(of: rows.map(\.user), on: tx)
                try await statusEvents.queue(
                    rows.map { row in
                        .message(
                            .messageSent, message: row.id, notification: row.id, user: externalIDs[row.user],
                            event: row.event, category: row.category, tenant: row.tenant, channel: inbox.id)
                    }, on: tx)
            }
            return rows
        }
        guard !announced.isEmpty else { return 0 }
        metrics.delivered(channel: inbox.id, outcome: DeliveryStatus.sent.rawValue, count: announced.count)
        if let provider = providers[.inbox] as? InboxProvider {
            for row in announced { await provider.becameAvailable(row.event, row.user) }
        }
        return announced.count
    }

    /// `announceDueInbox` for the pipeline: within the storage deadline, a failure logged and
    /// reported (the next round tries again).
    func announceDueInbox(clock: any ServiceClock) async {
        do {
            try await withDeadline(Self.storageDeadline, "announcing due inbox notifications", clock: clock) {
                try await self.announceDueInbox()
            }
        } catch {
            onStorageFailure(error)
            logger.error(
                "the delivery queue could not announce due inbox notifications",
                metadata: ["belfry.error": "\(String(reflecting: error))"])
        }
    }
}
