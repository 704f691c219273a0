import BelfryCore
import BelfryJSON
import Fluent
import Foundation

/// One change to report: its type and what it is about (the message, user, event, category,
/// tenant, channel and, where there is one, the device, reason and attempt).
struct StatusEvent: Sendable {
    var type: StatusEventType
    var data: [String: JSONValue]
}

extension StatusEvent {
    /// An event about one message (a notification on one channel, and device), with the fields
    /// every message event carries spelled in one place; `extra` adds the type's own.
    static func message(
        _ type: StatusEventType, message: UUID, notification: UUID, user: String?, event: UUID, category: String,
        tenant: String, channel: String?, device: UUID? = nil, extra: [String: JSONValue] = [:]
    ) -> StatusEvent {
        func text(_ id: UUID) -> JSONValue { .string(id.lowerCaseText) }
        var data: [String: JSONValue] = [
            "message": text(message), "notification": text(notification), "user": user.map(JSONValue.string) ?? .null,
            "event": text(event), "category": .string(category), "tenant": .string(tenant),
            "channel": channel.map(JSONValue.string) ?? .null,
        ]
        if let device { data["device"] = text(device) }
        data.merge(extra) { _, new in new }
        return StatusEvent(type: type, data: data)
    }
}

/// Queues status events for the workspace's `webhooks`, in the transaction of the change they
/// report: an event for a change that rolled back is never sent, and one whose change committed
/// is never lost. ``StatusEventSender`` delivers them from the `status_events` table.
struct StatusEvents: Sendable {
    let endpoints: [StatusEndpoint]
    let storage: BelfryDatabase
    let now: @Sendable () -> Date
    /// Tells this process's sender that events are waiting.
    let wake: @Sendable () -> Void

    /// Whether any endpoint takes events of `type`: callers skip building those no one takes.
    func wants(_ type: StatusEventType) -> Bool {
        endpoints.contains { $0.events.contains(type) }
    }

    // The body each endpoint receives: `type`, `id` (the webhook-id, the same on every attempt),
    // `timestamp` and `data`, written by `JSONText` in `queue`.

    /// The external id of the user a status event names, read in the change's transaction.
    static func externalID(of userID: UUID, on db: any Database) async throws -> String? {
        try await externalIDs(of: [userID], on: db)[userID]
    }

    /// The external ids of the users status events name, by user id.
    static func externalIDs(of userIDs: some Collection<UUID>, on db: any Database) async throws -> [UUID: String] {
        var ids: [UUID: String] = [:]
        for chunk in Array(Set(userIDs)).chunked(500) {
            for row in try await db.sql.select().columns("id", "external_id").from(UserModel.schema)
                .where("id", .in, Array(chunk)).all()
            {
                ids[try row.decode(column: "id", as: UUID.self)] = try row.decode(
                    column: "external_id", as: String.self)
            }
        }
        return ids
    }

    /// Queues `events` for every endpoint that takes their type, on `db` (the caller's
    /// transaction): one row for a lone report of its endpoint and type, bundles of up to
    /// ``StatusEventReports/bundleLimit`` for many (``StatusEventReports``).
    func queue(_ events: [StatusEvent], on db: any Database) async throws {
        guard !events.isEmpty, !endpoints.isEmpty else { return }
        let now = self.now()
        // As JSONEncoder's `.iso8601` writes it: whole seconds, UTC.
        let timestamp = now.ISO8601Format()
        var randomness = IDRandomness()
        // The reports for each endpoint and type, in the order they were given.
        var groups:
            [String: (endpoint: String, type: StatusEventType, reports: [(StatusEventReports.Report, String?)])] =
                [:]
        var order: [String] = []
        for event in events {
            for endpoint in endpoints where endpoint.events.contains(event.type) {
                let id = UUID.timeOrdered(at: now, using: &randomness)
                var body = Array("{\"data\":".utf8)
                body.reserveCapacity(512)
                JSONText.write(event.data, into: &body)
                body.append(contentsOf: ",\"id\":\"\(id.lowerCaseText)\",\"timestamp\":\"\(timestamp)\",\"type\":".utf8)
                JSONBytes.appendString(event.type.rawValue, to: &body)
                body.append(UInt8(ascii: "}"))
                let user: String? = if case .string(let user)? = event.data["user"] { user } else { nil }
                let key = endpoint.id + "\n" + event.type.rawValue
                if groups[key] == nil {
                    groups[key] = (endpoint.id, event.type, [])
                    order.append(key)
                }
                groups[key]?.reports.append((.init(id: id, body: String(decoding: body, as: UTF8.self)), user))
            }
        }
        var rows: [[BulkValue]] = []
        for key in order {
            guard let group = groups[key] else { continue }
            for chunk in group.reports.chunked(StatusEventReports.bundleLimit) {
                // A lone report is its own row, named by its id and its user; a bundle is
                // named by a new id, and erasure finds a user in it by its text.
                let (id, body, user): (UUID, String, String?) =
                    if chunk.count == 1 {
                        (chunk[chunk.startIndex].0.id, chunk[chunk.startIndex].0.body, chunk[chunk.startIndex].1)
                    } else {
                        (UUID.timeOrdered(at: now, using: &randomness), StatusEventReports.bundle(chunk.map(\.0)), nil)
                    }
                rows.append([
                    .id(id), .text(group.endpoint), .text(group.type.rawValue), .text(body), .text(user),
                    .text(StatusEventSender.Status.queued.rawValue), .integer(0), .date(now), .date(now), .date(now),
                    .integer(chunk.count),
                ])
            }
        }
        guard !rows.isEmpty else { return }
        try await storage.insert(
            into: Tables.statusEvents,
            columns: [
                "id", "endpoint", "type", "body", "user_external_id", "status", "attempts", "next_attempt_at",
                "created_at", "updated_at", "reports",
            ],
            rows: rows, rowsPerStatement: 200, on: db)
        wake()
    }
}
