import BelfryCore
import Fluent
import Foundation
import SQLKit

/// What became of events: the read model behind `GET /v1/events/{id}`, `belfry events` and the
/// console, counted from the events, their skips, notifications and deliveries.
struct EventStatusQuery: Sendable {
    let workspace: WorkspaceConfig

    /// The newest events first, optionally in one fan-out state.
    func recent(state: EventStatus.FanoutState?, limit: Int, on db: any Database) async throws -> [EventSummary] {
        let select = db.sql.select()
            .columns("id", "state", "category", "tenant", "created_at", "recipients", "processed")
            .from(Tables.events)
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

    /// Events of a category (or any), accepted after `since`, newest first, a page after the
    /// event `before` (the last of the previous page), compared by its own stored time so that no
    /// timestamp leaves the database.
    func search(
        category: String?, since: Date?, before: UUID?, limit: Int, on db: any Database
    ) async throws -> [UUID] {
        let select = db.sql.select().column("id").from(Tables.events)
        if let category { select.where("category", .equal, category) }
        if let since { select.where("created_at", .greaterThanOrEqual, since) }
        if let before {
            select.where(
                SQLQueryString(
                    """
                    (created_at < (SELECT created_at FROM events WHERE id = \(bind: before))
                     OR (created_at = (SELECT created_at FROM events WHERE id = \(bind: before)) AND id < \(bind: before)))
                    """))
        }
        return try await select.orderBy("created_at", .descending).orderBy("id", .descending).limit(limit).all()
            .map { try $0.decode(column: "id", as: UUID.self) }
    }

    /// Whether the event is stored: one indexed read, where `status(of:)` counts everything.
    func exists(_ id: UUID, on db: any Database) async throws -> Bool {
        try await db.sql.select().column("id").from(Tables.events).where("id", .equal, id).limit(1).first() != nil
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
            .from(Tables.events).where("id", .in, ids).all()
        guard !events.isEmpty else { return [:] }
        let notifications = try await notificationCounts(of: ids, on: sql)
        let deliveries = try await deliveryCounts(of: ids, on: sql)
        let skipped = try await skips(of: ids, on: sql)
        let lastErrors = try await lastErrors(of: ids, on: sql)

        let inboxChannel = workspace.channels.first { $0.kind == .inbox }?.id
        var statuses: [UUID: EventStatus] = [:]
        for event in events {
            let id = try event.decode(column: "id", as: UUID.self)
            var counts = deliveries[id] ?? [:]
            // An inbox notification has no delivery row (the notification is its record; one
            // written before `announce_at` existed and due later may have one): those still to be
            // announced are queued, the others delivered.
            if let inboxChannel, let inInbox = notifications[id]?.inInbox {
                let withRows = counts[inboxChannel, default: [:]].values.reduce(0, +)
                let toAnnounce = notifications[id]?.toAnnounce ?? 0
                if toAnnounce > 0 {
                    counts[inboxChannel, default: [:]][DeliveryStatus.queued.rawValue, default: 0] += toAnnounce
                }
                if inInbox > withRows + toAnnounce {
                    counts[inboxChannel, default: [:]][DeliveryStatus.sent.rawValue, default: 0] +=
                        inInbox - withRows - toAnnounce
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

    /// Each event's notifications: all, those in the inbox, and those still to be announced.
    private func notificationCounts(
        of ids: [UUID], on sql: any SQLDatabase
    ) async throws -> [UUID: (all: Int, inInbox: Int?, toAnnounce: Int)] {
        var notifications: [UUID: (all: Int, inInbox: Int?, toAnnounce: Int)] = [:]
        for row in try await sql.select().column("event_id")
            .column(SQLFunction("COUNT", args: SQLLiteral.all), as: "n")
            .column(SQLRaw("SUM(CASE WHEN in_inbox THEN 1 ELSE 0 END)"), as: "inbox")
            .column(SQLRaw("SUM(CASE WHEN announce_at IS NOT NULL THEN 1 ELSE 0 END)"), as: "to_announce")
            .from(Tables.notifications).where("event_id", .in, ids).groupBy("event_id").all()
        {
            notifications[try row.decode(column: "event_id", as: UUID.self)] = (
                try row.decode(column: "n", as: Int.self), try row.decode(column: "inbox", as: Int?.self),
                try row.decode(column: "to_announce", as: Int?.self) ?? 0
            )
        }
        return notifications
    }

    /// Each event's deliveries by channel and status (skipped ones are counted in `skips`).
    private func deliveryCounts(of ids: [UUID], on sql: any SQLDatabase) async throws -> [UUID: [String: [String: Int]]]
    {
        var deliveries: [UUID: [String: [String: Int]]] = [:]
        for row in try await sql.select().columns("event_id", "channel", "status")
            .column(SQLFunction("COUNT", args: SQLLiteral.all), as: "n")
            .from(Tables.deliveries).where("event_id", .in, ids)
            .where("status", .notEqual, DeliveryStatus.skipped.rawValue)
            .groupBy("event_id").groupBy("channel").groupBy("status").all()
        {
            deliveries[try row.decode(column: "event_id", as: UUID.self), default: [:]][
                try row.decode(column: "channel", as: String.self), default: [:]][
                    try row.decode(column: "status", as: String.self)] = try row.decode(column: "n", as: Int.self)
        }
        return deliveries
    }

    /// Each event's channels left out, by channel and reason: those in its row and those in
    /// `event_skips` (see `EventSkips`), added.
    private func skips(of ids: [UUID], on sql: any SQLDatabase) async throws -> [UUID: [String: [String: Int]]] {
        var skipped: [UUID: [String: [String: Int]]] = [:]
        for row in try await sql.select().columns("id", "skips").from(Tables.events)
            .where("id", .in, ids).where("skips", .isNot, SQLLiteral.null).all()
        {
            let event = try row.decode(column: "id", as: UUID.self)
            for (channel, reasons) in try EventSkips.counts(inColumn: try row.decode(column: "skips", as: String.self))
            {
                skipped[event, default: [:]][channel, default: [:]].merge(reasons, uniquingKeysWith: +)
            }
        }
        for row in try await sql.select().columns("event_id", "channel", "reason", "count").from(Tables.eventSkips)
            .where("event_id", .in, ids).all()
        {
            skipped[try row.decode(column: "event_id", as: UUID.self), default: [:]][
                try row.decode(column: "channel", as: String.self), default: [:]][
                    try row.decode(column: "reason", as: String.self), default: 0] += try row.decode(
                    column: "count", as: Int.self)
        }
        return skipped
    }

    /// The newest error of each channel's deliveries not sent, by event.
    private func lastErrors(of ids: [UUID], on sql: any SQLDatabase) async throws -> [UUID: [String: String]] {
        // The newest error of each channel's deliveries not sent; of errors from the same
        // moment, a final one (failed, dead) before one that will be retried.
        var lastErrors: [UUID: [String: String]] = [:]
        let newest = SQLRaw(
            "ROW_NUMBER() OVER (PARTITION BY event_id, channel ORDER BY updated_at DESC, "
                + "CASE WHEN status IN ('\(DeliveryStatus.failed.rawValue)', '\(DeliveryStatus.dead.rawValue)') "
                + "THEN 0 ELSE 1 END, id DESC)")
        let ranked = sql.select().columns("event_id", "channel", "last_error").column(newest, as: "rank")
            .from(Tables.deliveries).where("event_id", .in, ids).where("last_error", .isNot, SQLLiteral.null)
            .where("status", .notEqual, DeliveryStatus.sent.rawValue)
        for row in try await sql.select().columns("event_id", "channel", "last_error")
            .from(SQLAlias(SQLGroupExpression(ranked.query), as: SQLIdentifier("ranked")))
            .where("rank", .equal, 1).all()
        {
            lastErrors[try row.decode(column: "event_id", as: UUID.self), default: [:]][
                try row.decode(column: "channel", as: String.self)] = try row.decode(
                    column: "last_error", as: String.self)
        }
        return lastErrors
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
