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
    /// How long storing an event on PostgreSQL may take once its connection has closed before
    /// the request is answered 503, and how long while its connection is open.
    static let storeDeadline: TimeInterval = 3
    static let storePatience: TimeInterval = 20
    /// Recipients per INSERT statement: well under SQLite's 32 766 bound parameters.
    static let insertBatch = 500

    let storage: BelfryDatabase
    let workspace: WorkspaceConfig
    let now: @Sendable () -> Date
    /// Tells this process's fan-out that an event is waiting.
    let wake: @Sendable () -> Void
    let metrics: BelfryMetrics
    /// Who follows an event's topic.
    let topics: TopicStore
    /// Small events stored together (see `storeTogether`).
    private let together: GroupCommit<Pending>
    /// The most recipients of an event stored together with others.
    static let togetherRecipients = 100
    /// Groups stored at once on PostgreSQL, each on a connection of its own: one, and a spare
    /// that opens only once the first has been storing its group for `postgresSpareAfter`, so
    /// that a group on a lost connection holds no one else up. Lanes open to every group made
    /// them small: with 32 clients posting, four lanes gave groups of under five events, and
    /// two lanes cost the server a fifth more CPU an event than one (BENCHMARKS.md).
    static let postgresLanes = 2
    static let postgresSpareAfter: Duration = .milliseconds(50)

    init(
        storage: BelfryDatabase, workspace: WorkspaceConfig, now: @escaping @Sendable () -> Date,
        wake: @escaping @Sendable () -> Void, metrics: BelfryMetrics, topics: TopicStore
    ) {
        self.storage = storage
        self.workspace = workspace
        self.now = now
        self.wake = wake
        self.metrics = metrics
        self.topics = topics
        // SQLite has one writer: one group waits for it at a time, while the next gathers; the
        // lane passes on as the writer takes the group (see `storeTogether`). On PostgreSQL each
        // group stores within the deadline of the request that has waited longest (see
        // `durably`), and the spare lane takes those waiting behind a group that sticks.
        together =
            storage.kind == .postgres
            ? GroupCommit(maxGroup: 64, lanes: Self.postgresLanes, spareAfter: Self.postgresSpareAfter)
            : GroupCommit(maxGroup: 64)
    }

    /// What became of an accepted event.
    struct Accepted: Sendable {
        var id: UUID
        /// An earlier event returned for its idempotency key, not stored again.
        var replayed: Bool
        /// Distinct recipients.
        var recipients: Int
    }

    /// Where an event came from: the API (counted as accepted by the instance that answered),
    /// or `belfry send`, a process of its own (counted by the instance that starts its fan-out).
    enum Source: String, Sendable {
        case api
        case command
    }

    /// Checks `request` and stores it; throws a clear error naming every problem. `db` is asked
    /// for only when this request stores its event itself or leads a group: a request's
    /// database handle is built anew each time, a part of intake worth sparing.
    func accept(
        _ request: EventRequest, via source: Source = .api, on db: @autoclosure @escaping @Sendable () -> any Database
    ) async throws -> Accepted {
        let event = try Self.validate(request, workspace: workspace, now: now())
        let accepted: Accepted
        if event.idempotencyKey == nil, event.topic == nil, event.recipients.count <= Self.togetherRecipients {
            let pending = Pending(
                event: event, id: UUID.timeOrdered(at: now()), source: source, database: db, arrived: .now)
            try await together.run(pending) { try await self.storeTogether($0, begun: $1) }
            accepted = Accepted(id: pending.id, replayed: false, recipients: event.recipients.count)
        } else {
            let database = db()
            let (id, replayed, recipients) = try await durably { watch in
                try await store(event, source: source, watch: watch, on: database)
            }
            accepted = Accepted(id: id, replayed: replayed, recipients: recipients)
        }
        if !accepted.replayed && source == .api { metrics.event("accepted") }
        wake()
        return accepted
    }

    /// Runs a store. On PostgreSQL a query sent just as its connection was lost may never end,
    /// and nothing else may fail to tell of it: once its connection has closed, or after 20 s
    /// however slow the database, the store gives up, which answers 503 (send it again, with
    /// its Idempotency-Key) and replaces the pool. A store merely slow on a busy database waits.
    /// The deadline for a lost connection counts from `since`, when the request that has waited
    /// longest arrived; the patience with a slow one counts from the store's start.
    private func durably<T: Sendable>(
        since: ContinuousClock.Instant = .now, _ store: @escaping @Sendable (ConnectionWatch?) async throws -> T
    ) async throws -> T {
        guard storage.kind == .postgres else { return try await store(nil) }
        let watch = ConnectionWatch()
        let waited = (ContinuousClock.now - since) / .seconds(1)
        return try await withDeadline(
            max(Self.storeDeadline - waited, 0.25), "storing an event", extendedWhile: { watch.mayEnd },
            upTo: Self.storePatience
        ) {
            try await store(watch)
        }
    }

    /// An event waiting to be stored with others.
    struct Pending: Sendable {
        var event: Checked
        var id: UUID
        var source: Source
        /// The database of the request that brought it; the group's first one is used.
        var database: @Sendable () -> any Database
        /// When its request came in: the group's deadline counts from its oldest.
        var arrived: ContinuousClock.Instant
    }

    /// Stores small events of concurrent requests (no idempotency key, no topic, a short list)
    /// together: on SQLite one insert of their events and one of their recipients in one
    /// transaction, on PostgreSQL one statement (see `insert(_:rowsPerStatement:on:)`) instead of
    /// one for each event, each parsed and planned by the server. Should the group fail, each
    /// event is stored again alone, so that only the one at fault fails.
    private func storeTogether(
        _ group: [Pending], begun: @escaping @Sendable () -> Void
    ) async throws -> [(any Error)?] {
        @Sendable func store(_ events: [Pending]) async throws {
            guard storage.kind == .postgres else {
                return try await storage.write(events[0].database()) { tx in
                    // The writer has taken this group: the next gathers and queues meanwhile.
                    begun()
                    try await self.insert(events, on: tx)
                }
            }
            let oldest = events.map(\.arrived).min() ?? .now
            try await durably(since: oldest) { watch in
                try await events[0].database().withConnection { connection in
                    await watch?.note(connection)
                    try await self.insert(events, on: connection)
                }
            }
        }
        do {
            try await store(group)
            return Array(repeating: nil, count: group.count)
        } catch  where group.count > 1 && !DatabaseFailure.isUnavailable(error) {
            // A database out of reach is no one event's fault: each caller hears of it (503)
            // rather than storing again. Otherwise each event alone, side by side: one after
            // another, the last of a large group would wait out the deadlines of all before it.
            return await withTaskGroup(of: (Int, (any Error)?).self) { alone in
                for (index, pending) in group.enumerated() {
                    alone.addTask {
                        do {
                            try await store([pending])
                            return (index, nil)
                        } catch {
                            return (index, error)
                        }
                    }
                }
                var errors = [(any Error)?](repeating: nil, count: group.count)
                for await (index, error) in alone { errors[index] = error }
                return errors
            }
        }
    }

    private func insert(_ group: [Pending], on db: any Database) async throws {
        let rows = try self.rows(
            of: group.map { ($0.event, $0.id, $0.event.recipients.count, $0.source) }, now: now())
        try await storage.insert(rows, rowsPerStatement: Self.insertBatch, on: db)
    }

    /// The rows of events about to be stored and of their own recipients: the events first,
    /// which the recipients refer to. `recipients` is each event's count (a topic's subscribers).
    private func rows(
        of events: [(event: Checked, id: UUID, recipients: Int, source: Source)], now: Date
    ) throws -> [BelfryDatabase.Rows] {
        [
            BelfryDatabase.Rows(
                table: Tables.events, columns: Self.eventColumns,
                rows: try events.map {
                    try eventRow($0.event, id: $0.id, recipients: $0.recipients, source: $0.source, now: now)
                }),
            BelfryDatabase.Rows(
                table: Tables.eventRecipients, columns: Self.recipientColumns,
                rows: events.flatMap { Self.recipientRows($0.event.recipients, of: $0.id) }),
        ]
    }

    /// An event's recipients as rows of `event_recipients`, by position.
    private static func recipientRows(_ recipients: [String], of event: UUID) -> [[BulkValue]] {
        recipients.enumerated().map { [.id(event), .integer($0.offset), .text($0.element)] }
    }

    static let recipientColumns = ["event_id", "position", "external_id"]

    static let eventColumns = [
        "id", "category", "tenant", "title", "body", "url", "data", "calendar_rule", "state", "not_before",
        "recipients", "processed", "failures", "lease_expires_at", "created_at", "image_url", "ttl_seconds",
        "topic", "source", "content_available", "content_variants",
    ]

    /// An event's row, in `eventColumns`' order: pending, nothing processed yet.
    private func eventRow(
        _ event: Checked, id: UUID, recipients: Int, source: Source, now: Date
    ) throws
        -> [BulkValue]
    {
        let calendar = try event.calendar.map { String(decoding: try JSONEncoder().encode($0), as: UTF8.self) }
        return [
            .id(id), .text(event.category.id), .text(event.tenant), .text(event.text.title), .text(event.text.body),
            .text(event.text.url), .text(event.data), .text(calendar), .text(EventStatus.FanoutState.pending.rawValue),
            .date(event.notBefore), .integer(recipients), .integer(0), .integer(0), .date(nil), .date(now),
            .text(event.content.imageURL), .integer(event.ttlSeconds), .text(event.topic),
            .text(source == .api ? nil : source.rawValue), .bool(event.contentAvailable),
            .text(event.variants?.stored),
        ]
    }

    /// Stores the event, its recipients and its idempotency key in one transaction (on
    /// PostgreSQL, an event without a key in one statement); only after that commits does the
    /// caller answer 202. A key seen within 24 hours returns the first event instead.
    ///
    /// - Returns: the event id, whether it is an earlier event replayed for its key, and its
    ///   recipients (for a topic, its subscribers now).
    private func store(
        _ event: Checked, source: Source, watch: ConnectionWatch?, on db: any Database
    ) async throws -> (UUID, Bool, Int) {
        if storage.kind == .postgres, event.idempotencyKey == nil {
            // Nothing read that the write depends on: the rows go in one statement, atomic on
            // its own, with no transaction to begin and commit around it.
            return try await db.withConnection { connection in
                await watch?.note(connection)
                return try await self.insert(event, source: source, on: connection)
            }
        }
        for attempt in 1...2 {
            do {
                return try await storage.write(db) { tx in
                    await watch?.note(tx)
                    return try await self.insert(event, source: source, on: tx)
                }
            } catch  where error.isConstraintFailure && attempt == 1 {
                // Another request stored the same idempotency key first: the second try replays it.
                continue
            }
        }
        preconditionFailure("the second attempt returns or throws")
    }

    private func insert(_ event: Checked, source: Source, on db: any Database) async throws -> (UUID, Bool, Int) {
        let sql = db.sql
        let now = self.now()
        if let key = event.idempotencyKey {
            let rows = try await sql.select().columns("event_id", "created_at", "request_hash").from(
                Tables.idempotencyKeys
            )
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
                        try await sql.select().column("recipients").from(Tables.events).where("id", .equal, id).first()?
                        .decode(column: "recipients", as: Int.self) ?? 0
                    return (id, true, recipients)
                }
                try await sql.delete(from: Tables.idempotencyKeys).where("key", .equal, key).run()
            }
        }
        let id = UUID.timeOrdered(at: now)
        // A topic's audience is read at fan-out; until then its size is the subscribers' now.
        var recipients = event.recipients.count
        if let topic = event.topic {
            recipients = try await topics.subscribers(of: topic, on: db)
        }
        var rows = try self.rows(of: [(event, id, recipients, source)], now: now)
        if event.topic != nil {
            rows.append(
                BelfryDatabase.Rows(
                    table: Tables.eventExclusions, columns: ["event_id", "external_id"],
                    rows: event.exclude.map { [.id(id), .text($0)] }))
        }
        if let key = event.idempotencyKey {
            rows.append(
                BelfryDatabase.Rows(
                    table: Tables.idempotencyKeys, columns: ["key", "event_id", "request_hash", "created_at"],
                    rows: [[.text(key), .id(id), .text(Self.fingerprint(event)), .date(now)]]))
        }
        try await storage.insert(rows, rowsPerStatement: Self.insertBatch, on: db)
        return (id, false, recipients)
    }

    /// A digest of what the event asks for, to tell a retry of the same event from a different
    /// event that reuses its key.
    static func fingerprint(_ event: Checked) -> String {
        var text = [
            event.category.id, event.tenant, event.content.title ?? "", event.content.body ?? "",
            event.content.url ?? "",
        ]
        text += [event.data ?? "", "\(String(describing: event.schedule))"]
        // Only when given, so that keys stored before these fields existed still match.
        if event.content.imageURL != nil || event.ttlSeconds != nil {
            text += [event.content.imageURL ?? "", event.ttlSeconds.map(String.init) ?? ""]
        }
        text += event.recipients
        // Only when given, as above.
        if let topic = event.topic { text += ["topic:" + topic] }
        if !event.exclude.isEmpty { text += ["exclude:"] + event.exclude }
        if let background = event.contentAvailable { text += ["content_available:\(background)"] }
        let data = Data(text.joined(separator: "\u{0}").utf8)
        return SHA256.hash(data: data).hexEncoded
    }
}
