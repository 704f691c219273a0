import BelfryAPNs
import BelfryCore
import BelfryWebPush
import Crypto
import Fluent
import Foundation
import SQLKit

/// The one way events come in, for `POST /v1/events` and `belfry send` alike: checks an
/// event, stores it durably, wakes fan-out, and reports on it later.
struct EventIntake: Sendable {
    static let maxRecipients = 10_000
    static let maxTitleLength = 256
    static let maxBodyBytes = 64 * 1024
    static let maxDataBytes = 16 * 1024
    /// How deep `data` may nest: lists and objects inside one another.
    static let maxDataDepth = 32
    static let idempotencyWindow: TimeInterval = 24 * 3600
    /// Recipients per INSERT statement: well under SQLite's 32 766 bound parameters.
    static let insertBatch = 500

    let storage: BelfryDatabase
    let workspace: WorkspaceConfig
    let now: @Sendable () -> Date
    /// Tells this process's fan-out that an event is waiting.
    let wake: @Sendable () -> Void
    let metrics: BelfryMetrics

    /// What became of an accepted event.
    struct Accepted: Sendable {
        var id: UUID
        /// An earlier event returned for its idempotency key, not stored again.
        var replayed: Bool
        /// Distinct recipients.
        var recipients: Int
    }

    /// Checks `request` and stores it; throws a clear error naming every problem.
    func accept(_ request: EventRequest, on db: any Database) async throws -> Accepted {
        let event = try Self.validate(request, workspace: workspace, now: now())
        let (id, replayed, recipients) = try await store(event, on: db)
        if !replayed { metrics.event("accepted") }
        wake()
        return Accepted(id: id, replayed: replayed, recipients: recipients)
    }

    /// Stores the event, its recipients and its idempotency key in one transaction; only
    /// after that commits does the caller answer 202. A key seen within 24 hours returns
    /// the first event instead.
    ///
    /// - Returns: the event id, whether it is an earlier event replayed for its key, and its
    ///   recipients (for a topic, its subscribers now).
    private func store(_ event: Checked, on db: any Database) async throws -> (UUID, Bool, Int) {
        for attempt in 1...2 {
            do {
                return try await storage.write(db) { tx in try await self.insert(event, on: tx) }
            } catch  where error.isConstraintFailure && attempt == 1 {
                // Another request stored the same idempotency key first: the second try replays it.
                continue
            }
        }
        preconditionFailure("the second attempt returns or throws")
    }

    private func insert(_ event: Checked, on db: any Database) async throws -> (UUID, Bool, Int) {
        let sql = db.sql
        let now = self.now()
        if let key = event.idempotencyKey {
            let rows = try await sql.select().columns("event_id", "created_at", "request_hash").from("idempotency_keys")
                .where("key", .equal, key).all()
            if let row = rows.first {
                let created = try row.decode(column: "created_at", as: Date.self)
                if now.timeIntervalSince(created) < Self.idempotencyWindow {
                    guard try row.decode(column: "request_hash", as: String.self) == Self.fingerprint(event) else {
                        throw BelfryError(
                            .idempotencyKeyReused,
                            "the idempotency key \"\(key)\" was used in the last 24 hours for a different event; use a new key"
                        )
                    }
                    let id = try row.decode(column: "event_id", as: UUID.self)
                    let recipients =
                        try await sql.select().column("recipients").from("events").where("id", .equal, id).first()?
                        .decode(column: "recipients", as: Int.self) ?? 0
                    return (id, true, recipients)
                }
                try await sql.delete(from: "idempotency_keys").where("key", .equal, key).run()
            }
        }
        let id = UUID.timeOrdered(at: now)
        // A topic's audience is read at fan-out; until then its size is the subscribers' now.
        var recipients = event.recipients.count
        if let topic = event.topic {
            recipients = try await TopicStore(storage: storage, now: self.now).subscribers(of: topic, on: db)
        }
        try await sql.insert(into: "events")
            .columns(
                "id", "category", "tenant", "title", "body", "url", "data", "calendar_rule", "state", "not_before",
                "recipients", "processed", "failures", "lease_expires_at", "created_at", "image_url", "ttl_seconds",
                "topic"
            )
            .values(
                id, event.category.id, event.tenant, event.content.title, event.content.body, event.content.url,
                event.data, try event.calendar.map { String(decoding: try JSONEncoder().encode($0), as: UTF8.self) },
                EventStatus.FanoutState.pending.rawValue, event.notBefore, recipients, 0, 0, Date?.none,
                now,
                event.content.imageURL, event.ttlSeconds, event.topic
            )
            .run()
        try await storage.insert(
            into: "event_recipients", columns: ["event_id", "position", "external_id"],
            rows: event.recipients.enumerated().map { [.id(id), .integer($0.offset), .text($0.element)] },
            rowsPerStatement: Self.insertBatch, on: db)
        if event.topic != nil {
            try await storage.insert(
                into: "event_exclusions", columns: ["event_id", "external_id"],
                rows: event.exclude.map { [.id(id), .text($0)] }, rowsPerStatement: Self.insertBatch, on: db)
        }
        if let key = event.idempotencyKey {
            try await sql.insert(into: "idempotency_keys").columns("key", "event_id", "request_hash", "created_at")
                .values(key, id, Self.fingerprint(event), now).run()
        }
        return (id, false, recipients)
    }

    /// A digest of what the event asks for, to tell a retry of the same event from a different
    /// event that reuses its key.
    static func fingerprint(_ event: Checked) -> String {
        var text = [event.category.id, event.tenant, event.content.title, event.content.body, event.content.url ?? ""]
        text += [event.data ?? "", "\(String(describing: event.schedule))"]
        // Only when given, so that keys stored before these fields existed still match.
        if event.content.imageURL != nil || event.ttlSeconds != nil {
            text += [event.content.imageURL ?? "", event.ttlSeconds.map(String.init) ?? ""]
        }
        text += event.recipients
        // Only when given, as above.
        if let topic = event.topic { text += ["topic:" + topic] }
        if !event.exclude.isEmpty { text += ["exclude:"] + event.exclude }
        let data = Data(text.joined(separator: "\u{0}").utf8)
        return SHA256.hash(data: data).hexEncoded
    }

    /// A checked event, ready to store.
    struct Checked: Sendable {
        var category: CategoryDefinition
        var tenant: String
        /// Empty for a topic event.
        var recipients: [String]
        var topic: String?
        /// Stored for a topic event; already taken out of `recipients` otherwise.
        var exclude: [String]
        var content: EventRequest.Content
        var data: String?
        var idempotencyKey: String?
        var notBefore: Date
        /// A rule read in each recipient's time zone: their notification is due at its next match.
        var calendar: CalendarRule?
        /// The schedule as asked for, so that a retry can be recognised.
        var schedule: EventRequest.Schedule?
        var ttlSeconds: Int?
    }

    /// Checks an event against the workspace, reporting every problem at once.
    static func validate(_ event: EventRequest, workspace: WorkspaceConfig, now: Date) throws -> Checked {
        guard let category = workspace.category(event.category) else {
            throw BelfryError(.categoryNotFound, "no category \"\(event.category)\" in this workspace")
        }
        let tenant = event.tenant ?? workspace.defaultTenant
        guard workspace.tenant(tenant) != nil else {
            throw BelfryError(.tenantNotFound, "no tenant \"\(tenant)\" in this workspace")
        }
        var problems: [String] = []
        if let topic = event.topic {
            if !event.recipients.isEmpty {
                problems.append("give \"recipients\" or \"topic\", not both")
            }
            if !TopicName.isValid(topic) {
                problems.append("field \"topic\" must be \(TopicName.rule), got \"\(topic.prefix(40))\"")
            }
        } else if event.recipients.isEmpty || event.recipients.count > maxRecipients {
            problems.append(
                "field \"recipients\" must list 1 to \(maxRecipients) user ids, got \(event.recipients.count); "
                    + "send larger audiences in several events, or name a \"topic\"")
        }
        for (field, ids) in [("recipients", event.recipients), ("exclude", event.exclude ?? [])] {
            for (index, id) in ids.enumerated().filter({ !UserID.isValid($0.element) }).prefix(3) {
                problems.append(
                    "field \"\(field)[\(index)]\": \"\(id.prefix(40))\" is not a valid user id (\(UserID.rule))")
            }
        }
        if let exclude = event.exclude, exclude.count > maxRecipients {
            problems.append("field \"exclude\" may list at most \(maxRecipients) user ids, got \(exclude.count)")
        }
        let title = event.content.title.trimmingCharacters(in: .whitespacesAndNewlines)
        if title.isEmpty || event.content.title.count > maxTitleLength {
            problems.append(
                "field \"content.title\" must have 1 to \(maxTitleLength) characters, got \(event.content.title.count)")
        }
        problems += [
            TextCheck.controlCharacters(in: event.content.title, field: "content.title"),
            TextCheck.controlCharacters(in: event.content.body, field: "content.body", multiline: true),
        ].compactMap { $0 }
        if event.content.body.utf8.count > maxBodyBytes {
            problems.append(
                "field \"content.body\" is \(event.content.body.utf8.count) bytes; at most \(maxBodyBytes) allowed")
        }
        for (field, url) in [("content.url", event.content.url), ("content.image_url", event.content.imageURL)] {
            guard let url else { continue }
            let parsed = URL(string: url)
            if url.count > 2048 || !["http", "https"].contains(parsed?.scheme ?? "") || parsed?.host == nil {
                problems.append("field \"\(field)\" must be an http or https URL, got \"\(url.prefix(80))\"")
            }
        }
        if let ttl = event.ttlSeconds, !(0...maxTTL).contains(ttl) {
            problems.append("field \"ttl_seconds\" must be from 0 to \(maxTTL), got \(ttl)")
        }
        var data: String?
        if let fields = event.data {
            // Every reader of the data (the inbox, the streams, each provider) decodes it again
            // inside the notification around it: one limit here keeps all of them well within
            // what their decoders take.
            let depth = JSONValue.object(fields).depth
            if depth > maxDataDepth {
                problems.append("field \"data\" nests \(depth) levels deep; at most \(maxDataDepth) allowed")
            }
            let encoded = try JSONEncoder().encode(fields)
            if encoded.count > maxDataBytes {
                problems.append("field \"data\" is \(encoded.count) bytes as JSON; at most \(maxDataBytes) allowed")
            }
            data = String(decoding: encoded, as: UTF8.self)
        }
        if let key = event.idempotencyKey, key.isEmpty || key.count > 255 {
            problems.append("the idempotency key must have 1 to 255 characters")
        }
        var notBefore = now
        var calendar: CalendarRule?
        if let schedule = event.schedule {
            let year: TimeInterval = 366 * 24 * 3600
            let given = [schedule.sendAt != nil, schedule.delaySeconds != nil, schedule.calendar != nil].filter { $0 }
            if given.count != 1 {
                problems.append("field \"schedule\" takes one of \"send_at\", \"delay_seconds\" or \"calendar\"")
            }
            if let sendAt = schedule.sendAt {
                if sendAt.timeIntervalSince(now) > year {
                    problems.append("field \"schedule.send_at\" must be within a year")
                }
                notBefore = max(now, sendAt)
            }
            if let delay = schedule.delaySeconds {
                if !(0...Int(year)).contains(delay) {
                    problems.append("field \"schedule.delay_seconds\" must be from 0 to \(Int(year)), got \(delay)")
                }
                notBefore = now.addingTimeInterval(TimeInterval(max(delay, 0)))
            }
            if let rule = schedule.calendar {
                problems += rule.problems.map { "field \"schedule.calendar\": \($0)" }
                if rule.problems.isEmpty, rule.nextDate(after: now, in: .gmt) == nil {
                    problems.append("field \"schedule.calendar\": no date matches it (such as 30 February)")
                }
                if rule.repeats {
                    problems.append(
                        "field \"schedule.calendar.repeats\": events are sent once; trigger one event per occurrence")
                }
                calendar = rule
            }
        }
        if problems.isEmpty {
            problems += pushSizeProblems(event, category: category, tenant: tenant, data: data, workspace: workspace)
        }
        if !problems.isEmpty {
            throw BelfryError.invalid(problems.joined(separator: "; "))
        }
        // One notification per person, however often the list names them; none for those left out.
        let excluded = Set(event.exclude ?? [])
        var seen = excluded
        let recipients = event.recipients.filter { seen.insert($0).inserted }
        return Checked(
            category: category, tenant: tenant, recipients: recipients, topic: event.topic,
            exclude: Array(excluded).sorted(), content: event.content, data: data,
            idempotencyKey: event.idempotencyKey, notBefore: notBefore, calendar: calendar, schedule: event.schedule,
            ttlSeconds: event.ttlSeconds)
    }

    /// Four weeks, the longest any push service keeps a message.
    static let maxTTL = 28 * 86_400

    /// The event is refused when the largest push it can make (every field, a large badge) is
    /// over what a push channel of its category takes: 4096 bytes of APNs payload, or 4096
    /// bytes of encrypted Web Push body.
    private static func pushSizeProblems(
        _ event: EventRequest, category: CategoryDefinition, tenant: String, data: String?, workspace: WorkspaceConfig
    ) -> [String] {
        let kinds = Set(category.channels.compactMap { workspace.channel($0.channel)?.kind })
        let content = DeliveryContent(
            deliveryID: UUID(), notificationID: UUID(), category: category, tenant: tenant,
            title: event.content.title, body: event.content.body, url: event.content.url,
            imageURL: event.content.imageURL, data: data, createdAt: Date(), ttlSeconds: event.ttlSeconds)
        var problems: [String] = []
        if kinds.contains(.apns), case let size = APNsPayload.largestSize(APNsNotification(content)),
            size > APNsPayload.maxSize
        {
            problems.append(
                "the APNs payload would be \(size) bytes; APNs takes at most \(APNsPayload.maxSize): "
                    + "shorten the content or the data")
        }
        if kinds.contains(.webPush), case let size = WebPushMessage.largestEncryptedSize(content),
            size > WebPushEncryption.maxPayloadSize
        {
            problems.append(
                "the encrypted Web Push message would be \(size) bytes; push services take at most "
                    + "\(WebPushEncryption.maxPayloadSize): shorten the content or the data")
        }
        return problems
    }

    /// Whether the event is stored: one indexed read, where `status(of:)` counts everything.
    func exists(_ id: UUID, on db: any Database) async throws -> Bool {
        try await db.sql.select().column("id").from("events").where("id", .equal, id).limit(1).first() != nil
    }

    func status(of id: UUID, on db: any Database) async throws -> EventStatus? {
        try await statuses(of: [id], on: db)[id]
    }

    /// The statuses of the events `ids` that exist, in five grouped queries whatever their
    /// number (the console shows fifteen at a time).
    func statuses(of ids: [UUID], on db: any Database) async throws -> [UUID: EventStatus] {
        guard !ids.isEmpty else { return [:] }
        let sql = db.sql
        let events = try await sql.select()
            .columns(
                "id", "category", "tenant", "state", "created_at", "not_before", "recipients", "processed",
                "last_error", "batched"
            )
            .from("events").where("id", .in, ids).all()
        guard !events.isEmpty else { return [:] }

        var notifications: [UUID: (all: Int, inInbox: Int?)] = [:]
        for row in try await sql.select().column("event_id")
            .column(SQLFunction("COUNT", args: SQLLiteral.all), as: "n")
            .column(SQLRaw("SUM(CASE WHEN in_inbox THEN 1 ELSE 0 END)"), as: "inbox")
            .from("notifications").where("event_id", .in, ids).groupBy("event_id").all()
        {
            notifications[try row.decode(column: "event_id", as: UUID.self)] = (
                try row.decode(column: "n", as: Int.self), try row.decode(column: "inbox", as: Int?.self)
            )
        }
        var deliveries: [UUID: [String: [String: Int]]] = [:]
        for row in try await sql.select().columns("event_id", "channel", "status")
            .column(SQLFunction("COUNT", args: SQLLiteral.all), as: "n")
            .from("deliveries").where("event_id", .in, ids)
            .where("status", .notEqual, DeliveryStatus.skipped.rawValue)
            .groupBy("event_id").groupBy("channel").groupBy("status").all()
        {
            deliveries[try row.decode(column: "event_id", as: UUID.self), default: [:]][
                try row.decode(column: "channel", as: String.self), default: [:]][
                    try row.decode(column: "status", as: String.self)] = try row.decode(column: "n", as: Int.self)
        }
        var skipped: [UUID: [String: [String: Int]]] = [:]
        for row in try await sql.select().columns("event_id", "channel", "reason", "count").from("event_skips")
            .where("event_id", .in, ids).all()
        {
            skipped[try row.decode(column: "event_id", as: UUID.self), default: [:]][
                try row.decode(column: "channel", as: String.self), default: [:]][
                    try row.decode(column: "reason", as: String.self)] = try row.decode(column: "count", as: Int.self)
        }
        // The newest error of each channel's deliveries not sent; of errors from the same
        // moment, a final one (failed, dead) before one that will be retried.
        var lastErrors: [UUID: [String: String]] = [:]
        let newest = SQLRaw(
            "ROW_NUMBER() OVER (PARTITION BY event_id, channel ORDER BY updated_at DESC, "
                + "CASE WHEN status IN ('\(DeliveryStatus.failed.rawValue)', '\(DeliveryStatus.dead.rawValue)') "
                + "THEN 0 ELSE 1 END, id DESC)")
        let ranked = sql.select().columns("event_id", "channel", "last_error").column(newest, as: "rank")
            .from("deliveries").where("event_id", .in, ids).where("last_error", .isNot, SQLLiteral.null)
            .where("status", .notEqual, DeliveryStatus.sent.rawValue)
        for row in try await sql.select().columns("event_id", "channel", "last_error")
            .from(SQLAlias(SQLGroupExpression(ranked.query), as: SQLIdentifier("ranked")))
            .where("rank", .equal, 1).all()
        {
            lastErrors[try row.decode(column: "event_id", as: UUID.self), default: [:]][
                try row.decode(column: "channel", as: String.self)] = try row.decode(
                    column: "last_error", as: String.self)
        }

        let inboxChannel = workspace.channels.first { $0.kind == .inbox }?.id
        var statuses: [UUID: EventStatus] = [:]
        for event in events {
            let id = try event.decode(column: "id", as: UUID.self)
            var counts = deliveries[id] ?? [:]
            // An inbox notification delivered at fan-out has no delivery row (the notification
            // is its record); one that was due later has one. So the inbox notifications without
            // a row were delivered.
            if let inboxChannel, let inInbox = notifications[id]?.inInbox {
                let withRows = counts[inboxChannel, default: [:]].values.reduce(0, +)
                if inInbox > withRows {
                    counts[inboxChannel, default: [:]][DeliveryStatus.sent.rawValue, default: 0] += inInbox - withRows
                }
            }
            statuses[id] = EventStatus(
                id: id,
                category: try event.decode(column: "category", as: String.self),
                tenant: try event.decode(column: "tenant", as: String.self),
                state: EventStatus.FanoutState(rawValue: try event.decode(column: "state", as: String.self))
                    ?? .pending,
                createdAt: try event.decode(column: "created_at", as: Date.self),
                notBefore: try event.decode(column: "not_before", as: Date.self),
                recipients: try event.decode(column: "recipients", as: Int.self),
                processed: try event.decode(column: "processed", as: Int.self),
                notifications: notifications[id]?.all ?? 0, deliveries: counts, skipped: skipped[id] ?? [:],
                lastErrors: lastErrors[id] ?? [:],
                error: try event.decode(column: "last_error", as: String?.self),
                batched: try event.decode(column: "batched", as: Int.self))
        }
        return statuses
    }
}

/// Where a delivery stands.
enum DeliveryStatus: String, Sendable, CaseIterable {
    /// `skipped`: a fallback not needed after all; the event's status counts it with the skips.
    case queued, running, sent, failed, dead, skipped
}

extension Array {
    /// The elements in consecutive slices of at most `size`.
    func chunked(_ size: Int) -> [ArraySlice<Element>] {
        stride(from: 0, to: count, by: size).map { self[$0..<Swift.min($0 + size, count)] }
    }
}

extension BelfryContext {
    var eventIntake: EventIntake {
        EventIntake(storage: database, workspace: workspace, now: now, wake: fanoutWake, metrics: metrics)
    }
}
