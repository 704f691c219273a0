import BelfryCore
import Crypto
import Fluent
import Foundation
import SQLKit

/// Stores accepted events and reports on them.
struct EventIntake: Sendable {
    let context: BelfryContext

    /// Stores the event, its recipients and its idempotency key in one transaction; only
    /// after that commits does the caller answer 202. A key seen within 24 hours returns
    /// the first event instead.
    ///
    /// - Returns: the event id, and whether it is an earlier event replayed for its key.
    func accept(_ event: EventsController.Accepted, on db: any Database) async throws -> (UUID, Bool) {
        for attempt in 1...2 {
            do {
                return try await context.database.write(db) { tx in try await self.insert(event, on: tx) }
            } catch  where error.isConstraintFailure && attempt == 1 {
                // Another request stored the same idempotency key first: the second try replays it.
                continue
            }
        }
        preconditionFailure("the second attempt returns or throws")
    }

    private func insert(_ event: EventsController.Accepted, on db: any Database) async throws -> (UUID, Bool) {
        let sql = db.sql
        let now = context.now()
        if let key = event.idempotencyKey {
            let rows = try await sql.select().columns("event_id", "created_at", "request_hash").from("idempotency_keys")
                .where("key", .equal, key).all()
            if let row = rows.first {
                let created = try row.decode(column: "created_at", as: Date.self)
                if now.timeIntervalSince(created) < EventsController.idempotencyWindow {
                    guard try row.decode(column: "request_hash", as: String.self) == Self.fingerprint(event) else {
                        throw BelfryError(
                            .unprocessableEntity, "idempotency_key_reused",
                            "the idempotency key \"\(key)\" was used in the last 24 hours for a different event; use a new key"
                        )
                    }
                    return (try row.decode(column: "event_id", as: UUID.self), true)
                }
                try await sql.delete(from: "idempotency_keys").where("key", .equal, key).run()
            }
        }
        let id = UUID()
        try await sql.insert(into: "events")
            .columns(
                "id", "category", "tenant", "title", "body", "url", "data", "calendar_rule", "state", "not_before",
                "recipients", "processed", "failures", "lease_expires_at", "created_at", "image_url", "ttl_seconds"
            )
            .values(
                id, event.category.id, event.tenant, event.content.title, event.content.body, event.content.url,
                event.data, try event.calendar.map { String(decoding: try JSONEncoder().encode($0), as: UTF8.self) },
                EventStatus.FanoutState.pending.rawValue, event.notBefore, event.recipients.count, 0, 0, Date?.none,
                now,
                event.content.imageURL, event.ttlSeconds
            )
            .run()
        for (batchIndex, batch) in event.recipients.chunked(EventsController.insertBatch).enumerated() {
            let insert = sql.insert(into: "event_recipients").columns("event_id", "position", "external_id")
            for (offset, recipient) in batch.enumerated() {
                insert.values(id, batchIndex * EventsController.insertBatch + offset, recipient)
            }
            try await insert.run()
        }
        if let key = event.idempotencyKey {
            try await sql.insert(into: "idempotency_keys").columns("key", "event_id", "request_hash", "created_at")
                .values(key, id, Self.fingerprint(event), now).run()
        }
        return (id, false)
    }

    /// A digest of what the event asks for, to tell a retry of the same event from a different
    /// event that reuses its key.
    static func fingerprint(_ event: EventsController.Accepted) -> String {
        var text = [event.category.id, event.tenant, event.content.title, event.content.body, event.content.url ?? ""]
        text += [event.data ?? "", "\(String(describing: event.schedule))"]
        // Only when given, so that keys stored before these fields existed still match.
        if event.content.imageURL != nil || event.ttlSeconds != nil {
            text += [event.content.imageURL ?? "", event.ttlSeconds.map(String.init) ?? ""]
        }
        text += event.recipients
        let data = Data(text.joined(separator: "\u{0}").utf8)
        return SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
    }

    func status(of id: UUID, on db: any Database) async throws -> EventStatus? {
        let sql = db.sql
        guard
            let event = try await sql.select()
                .columns(
                    "category", "tenant", "state", "created_at", "not_before", "recipients", "processed", "last_error"
                )
                .from("events").where("id", .equal, id).first()
        else { return nil }
        let notifications =
            try await sql.select().column(SQLFunction("COUNT", args: SQLLiteral.all), as: "n")
            .from("notifications").where("event_id", .equal, id).first()?.decode(column: "n", as: Int.self) ?? 0
        var deliveries: [String: [String: Int]] = [:]
        for row in try await sql.select().columns("channel", "status")
            .column(SQLFunction("COUNT", args: SQLLiteral.all), as: "n")
            .from("deliveries").where("event_id", .equal, id).groupBy("channel").groupBy("status").all()
        {
            deliveries[try row.decode(column: "channel", as: String.self), default: [:]][
                try row.decode(column: "status", as: String.self)] = try row.decode(column: "n", as: Int.self)
        }
        var skipped: [String: [String: Int]] = [:]
        for row in try await sql.select().columns("channel", "reason", "count").from("event_skips")
            .where("event_id", .equal, id).all()
        {
            skipped[try row.decode(column: "channel", as: String.self), default: [:]][
                try row.decode(column: "reason", as: String.self)] = try row.decode(column: "count", as: Int.self)
        }
        var lastErrors: [String: String] = [:]
        for row in try await sql.select().columns("channel", "last_error").from("deliveries")
            .where("event_id", .equal, id).where("last_error", .isNot, SQLLiteral.null)
            .where("status", .notEqual, DeliveryStatus.sent.rawValue)
            .orderBy("updated_at", .descending).limit(100).all()
        {
            let channel = try row.decode(column: "channel", as: String.self)
            if lastErrors[channel] == nil {
                lastErrors[channel] = try row.decode(column: "last_error", as: String.self)
            }
        }
        return EventStatus(
            id: id,
            category: try event.decode(column: "category", as: String.self),
            tenant: try event.decode(column: "tenant", as: String.self),
            state: EventStatus.FanoutState(rawValue: try event.decode(column: "state", as: String.self)) ?? .pending,
            createdAt: try event.decode(column: "created_at", as: Date.self),
            notBefore: try event.decode(column: "not_before", as: Date.self),
            recipients: try event.decode(column: "recipients", as: Int.self),
            processed: try event.decode(column: "processed", as: Int.self),
            notifications: notifications, deliveries: deliveries, skipped: skipped, lastErrors: lastErrors,
            error: try event.decode(column: "last_error", as: String?.self))
    }
}

/// Where a delivery stands.
enum DeliveryStatus: String, Sendable, CaseIterable {
    case queued, running, sent, failed, dead
}

extension Array {
    /// The elements in consecutive slices of at most `size`.
    func chunked(_ size: Int) -> [ArraySlice<Element>] {
        stride(from: 0, to: count, by: size).map { self[$0..<Swift.min($0 + size, count)] }
    }
}
