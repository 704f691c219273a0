import BelfryCore
import Fluent
import Foundation
import SQLKit

/// What the operator console shows, read from the database, so that every instance sharing it
/// shows the same.
struct ConsoleData: Sendable {
    let storage: BelfryDatabase
    let events: EventStatusQuery
    let now: @Sendable () -> Date

    static let recentEvents = 15
    static let deadShown = 50
    /// The charts' span, in minutes.
    static let chartMinutes = 60

    struct Overview: Sendable {
        var events: [EventStatus]
        /// Failed and dead deliveries, the latest first.
        var ended: [DeadLetters.Ended]
        var deadTotal: Int
        var failedTotal: Int
        /// Deliveries queued or under way, by channel.
        var pending: [String: Int]
        /// The first minute of the charts.
        var since: Date
        /// Queue depth at the end of each minute (`nil` where no sample was taken), the last one now.
        var depth: [Int?]
        /// Attempts finished in each minute: sent, and those that were not (retry, failed, dead).
        var sent: [Int]
        var unsent: [Int]

        /// Status events by status (`queued`, `running`, `sent`, `failed`, `dead`).
        var statusCounts: [String: Int] = [:]
        /// Failed and dead status events, the latest first.
        var statusEnded: [StatusEventRow] = []

        /// Deliveries sent a second over the last whole minute (the current one is still going).
        var deliveryRate: Double { Double(sent.dropLast().last ?? 0) / 60 }
    }

    /// A status event that did not reach its endpoint.
    struct StatusEventRow: Sendable {
        var id: UUID
        var endpoint: String
        var type: String
        var status: String
        var attempts: Int
        /// How many reports the row holds: a bundle (``StatusEventReports``) ends as one.
        var reports: Int
        var lastError: String?
        var updatedAt: Date
    }

    struct DeliveryRow: Sendable {
        var id: UUID
        var channel: String
        var user: String
        var device: UUID?
        var status: String
        var attempts: Int
        var lastError: String?
        var lastStatus: Int?
        var nextAttemptAt: Date
        var attemptLog: [Attempt] = []
    }

    typealias Attempt = MessageRecord.Attempt

    /// What an event said: its notification's title, body, link and data (JSON text).
    struct EventContent: Sendable {
        var title: String
        var body: String
        var url: String?
        var data: String?
    }

    struct EventDetail: Sendable {
        var status: EventStatus
        var content: EventContent
        var deliveries: [DeliveryRow]
        /// Deliveries beyond the ones listed.
        var more: Int
    }

    func overview(on db: any Database) async throws -> Overview {
        let sql = db.sql
        let recent = try await events.recent(state: nil, limit: Self.recentEvents, on: db).map(\.id)
        let statuses = try await events.statuses(of: recent, on: db)
        let events = recent.compactMap { statuses[$0] }
        let ended = try await DeadLetters(storage: storage, now: now).list(limit: Self.deadShown, on: db)
        let outbox = try await Outbox.counts(Outbox.pendingStatuses + DeadLetters.retryable, on: sql)
        let pending = Outbox.pending(in: outbox)
        let deadTotal = outbox[.dead, default: [:]].values.reduce(0, +)
        let failedTotal = outbox[.failed, default: [:]].values.reduce(0, +)
        let chart = try await chart(pending: pending.values.reduce(0, +), on: sql)
        var overview = Overview(
            events: events, ended: ended, deadTotal: deadTotal, failedTotal: failedTotal, pending: pending,
            since: chart.since, depth: chart.depth, sent: chart.sent, unsent: chart.unsent)
        // Reports, not rows: a row may bundle many.
        for row in try await sql.select().column("status").column(
            SQLFunction("SUM", args: SQLColumn("reports")), as: "n"
        )
        .from(Tables.statusEvents).groupBy("status").all() {
            overview.statusCounts[try row.decode(column: "status", as: String.self)] = try row.decode(
                column: "n", as: Int.self)
        }
        overview.statusEnded = try await endedStatusEvents(on: sql)
        return overview
    }

    /// The last hour a minute at a time: the queue's depth (the current minute's is `pending`),
    /// and the deliveries sent and not sent.
    private func chart(
        pending: Int, on sql: any SQLDatabase
    ) async throws -> (since: Date, depth: [Int?], sent: [Int], unsent: [Int]) {
        // Whole minutes, the last one the current minute.
        let nowMinute = Int64(now().timeIntervalSince1970 / 60)
        let first = nowMinute - Int64(Self.chartMinutes) + 1
        var depth = [Int?](repeating: nil, count: Self.chartMinutes)
        for row in try await sql.select().columns("minute", "depth").from(Tables.queueSamples)
            .where("minute", .greaterThanOrEqual, first).all()
        {
            let index = Int(try row.decode(column: "minute", as: Int64.self) - first)
            if depth.indices.contains(index) { depth[index] = try row.decode(column: "depth", as: Int.self) }
        }
        depth[Self.chartMinutes - 1] = pending
        var sent = [Int](repeating: 0, count: Self.chartMinutes)
        var unsent = sent
        let since = Date(timeIntervalSince1970: TimeInterval(first * 60))
        for row in try await sql.select()
            .column(minuteIndex(of: "finished_at", since: since), as: "bucket").column("outcome")
            .column(SQLFunction("COUNT", args: SQLLiteral.all), as: "n")
            .from(Tables.deliveryAttempts).where("finished_at", .greaterThanOrEqual, since)
            .groupBy(SQLColumn("bucket")).groupBy("outcome").all()
        {
            let index = try row.decode(column: "bucket", as: Int.self)
            guard sent.indices.contains(index) else { continue }
            let count = try row.decode(column: "n", as: Int.self)
            switch try row.decode(column: "outcome", as: String.self) {
            case "sent": sent[index] += count
            case "skipped": break
            default: unsent[index] += count
            }
        }
        // An inbox notification is sent when it becomes available: it has no delivery row.
        for row in try await sql.select()
            .column(minuteIndex(of: "available_at", since: since), as: "bucket")
            .column(SQLFunction("COUNT", args: SQLLiteral.all), as: "n")
            .from(Tables.notifications).where("in_inbox", .equal, true)
            .where("available_at", .greaterThanOrEqual, since).where("available_at", .lessThanOrEqual, now())
            .groupBy(SQLColumn("bucket")).all()
        {
            let index = try row.decode(column: "bucket", as: Int.self)
            if sent.indices.contains(index) { sent[index] += try row.decode(column: "n", as: Int.self) }
        }
        return (since, depth, sent, unsent)
    }

    /// The status event rows that failed or died, newest first.
    private func endedStatusEvents(on sql: any SQLDatabase) async throws -> [StatusEventRow] {
        try await sql.select()
            .columns("id", "endpoint", "type", "status", "attempts", "reports", "last_error", "updated_at")
            .from(Tables.statusEvents)
            .where(
                "status", .in,
                [StatusEventSender.Status.failed.rawValue, StatusEventSender.Status.dead.rawValue]
            )
            .orderBy("updated_at", .descending).limit(Self.deadShown).all().map { row in
                StatusEventRow(
                    id: try row.decode(column: "id", as: UUID.self),
                    endpoint: try row.decode(column: "endpoint", as: String.self),
                    type: try row.decode(column: "type", as: String.self),
                    status: try row.decode(column: "status", as: String.self),
                    attempts: try row.decode(column: "attempts", as: Int.self),
                    reports: try row.decode(column: "reports", as: Int.self),
                    lastError: try row.decode(column: "last_error", as: String?.self),
                    updatedAt: try row.decode(column: "updated_at", as: Date.self))
            }
    }

    /// The minute of `column` counted from `since`, in the database's own date arithmetic.
    private func minuteIndex(of column: String, since: Date) -> any SQLExpression {
        let start = since.timeIntervalSince1970
        return switch storage.kind {
        case .sqlite: SQLRaw("CAST((\(column) - \(start)) / 60 AS INTEGER)")
        case .postgres: SQLRaw("CAST(FLOOR((EXTRACT(EPOCH FROM \(column)) - \(start)) / 60) AS INTEGER)")
        }
    }

    static let deliveriesShown = 200

    /// An event's status, and its deliveries with every attempt.
    func event(_ id: UUID, on db: any Database) async throws -> EventDetail? {
        guard let status = try await events.status(of: id, on: db) else { return nil }
        let sql = db.sql
        var rows = try await sql.select()
            .columns(
                SQLColumn("id", table: Tables.deliveries), SQLColumn("channel"), SQLColumn("external_id"),
                SQLColumn("device_id"), SQLColumn("status"), SQLColumn("attempts"), SQLColumn("last_error"),
                SQLColumn("last_status"), SQLColumn("next_attempt_at")
            )
            .from(Tables.deliveries).join(
                UserModel.schema, on: SQLColumn("user_id", table: Tables.deliveries), .equal,
                SQLColumn("id", table: UserModel.schema)
            )
            .where(SQLColumn("event_id", table: Tables.deliveries), .equal, SQLBind(id))
            .orderBy(SQLColumn("created_at", table: Tables.deliveries)).orderBy(
                SQLColumn("id", table: Tables.deliveries)
            )
            .limit(Self.deliveriesShown)
            .all()
            .map { row in
                DeliveryRow(
                    id: try row.decode(column: "id", as: UUID.self),
                    channel: try row.decode(column: "channel", as: String.self),
                    user: try row.decode(column: "external_id", as: String.self),
                    device: try row.decode(column: "device_id", as: UUID?.self),
                    status: try row.decode(column: "status", as: String.self),
                    attempts: try row.decode(column: "attempts", as: Int.self),
                    lastError: try row.decode(column: "last_error", as: String?.self),
                    lastStatus: try row.decode(column: "last_status", as: Int?.self),
                    nextAttemptAt: try row.decode(column: "next_attempt_at", as: Date.self))
            }
        let total =
            try await sql.select().column(SQLFunction("COUNT", args: SQLLiteral.all), as: "n").from(Tables.deliveries)
            .where("event_id", .equal, id).first()?.decode(column: "n", as: Int.self) ?? 0
        let logs = try await MessageLog.attempts(of: rows.map(\.id), on: db)
        for index in rows.indices { rows[index].attemptLog = logs[rows[index].id] ?? [] }
        let row = try await sql.select().columns("title", "body", "url", "data").from(Tables.events).where(
            "id", .equal, id
        )
        .first()
        let content = EventContent(
            title: try row?.decode(column: "title", as: String.self) ?? "",
            body: try row?.decode(column: "body", as: String.self) ?? "",
            url: try row?.decode(column: "url", as: String?.self),
            data: try row?.decode(column: "data", as: String?.self))
        return EventDetail(status: status, content: content, deliveries: rows, more: max(0, total - rows.count))
    }

    /// Records the queue's depth for the current minute, once whichever instance gets there
    /// first, and forgets samples older than a day.
    func sampleQueueDepth(on db: any Database) async throws {
        let now = now()
        let minute = Int64(now.timeIntervalSince1970 / 60)
        let depth = Outbox.pending(in: try await Outbox.counts(Outbox.pendingStatuses, on: db.sql)).values.reduce(0, +)
        try await storage.write(db) { tx in
            try await tx.sql.insert(into: Tables.queueSamples).columns("minute", "depth").values(minute, depth)
                .ignoringConflicts(with: ["minute"]).run()
            try await tx.sql.delete(from: Tables.queueSamples).where("minute", .lessThan, minute - 24 * 60).run()
        }
    }
}
