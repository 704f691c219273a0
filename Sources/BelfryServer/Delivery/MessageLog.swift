import BelfryCore
import Fluent
import Foundation
import SQLKit

/// The message log: every delivery (one notification on one channel and device) with every
/// attempt, newest first, filtered by user, event, channel, status and time, a page at a time
/// after the last row of the previous page. `GET /v1/messages`, `belfry messages` and the
/// console's user page read it.
struct MessageLog: Sendable {
    struct Filter: Sendable {
        var user: UUID?
        var event: UUID?
        var channel: String?
        var status: String?
        var since: Date?
    }

    /// Up to `limit` messages, newest first, older than the message `after`.
    func page(_ filter: Filter, after cursor: UUID?, limit: Int, on db: any Database) async throws -> [MessageRecord] {
        let rows = try await Self.page(filter, after: cursor, limit: limit, on: db.sql).all()
        return try await Self.records(rows, on: db)
    }

    /// The statement of a page. A user's messages are found through their notifications
    /// (`notifications_inbox`, then `deliveries_notification`): no index leads with the
    /// deliveries' `user_id`, and one would cost every delivery a write (two on PostgreSQL, where
    /// each change of status writes every index). Read by that column, a user's page read the
    /// whole table: 2.6 ms at 20 000 deliveries on SQLite, 0.01 ms through the notifications.
    static func page(_ filter: Filter, after cursor: UUID?, limit: Int, on sql: any SQLDatabase) -> SQLSelectBuilder {
        let select = Self.select(on: sql)
        if let user = filter.user {
            select.where(SQLColumn("user_id", table: Tables.deliveries), .equal, SQLBind(user))
            select.where(SQLColumn("user_id", table: Tables.notifications), .equal, SQLBind(user))
        }
        if let event = filter.event {
            select.where(SQLColumn("event_id", table: Tables.deliveries), .equal, SQLBind(event))
        }
        if let channel = filter.channel {
            select.where(SQLColumn("channel", table: Tables.deliveries), .equal, SQLBind(channel))
        }
        if let status = filter.status {
            select.where(SQLColumn("status", table: Tables.deliveries), .equal, SQLBind(status))
        }
        if let since = filter.since {
            select.where(SQLColumn("created_at", table: Tables.deliveries), .greaterThanOrEqual, SQLBind(since))
        }
        if let cursor {
            // Compared with the cursor row's own stored values, so no timestamp leaves the database.
            select.where(
                SQLQueryString(
                    """
                    (deliveries.created_at < (SELECT created_at FROM deliveries WHERE id = \(bind: cursor))
                     OR (deliveries.created_at = (SELECT created_at FROM deliveries WHERE id = \(bind: cursor))
                         AND deliveries.id < \(bind: cursor)))
                    """))
        }
        return
            select
            .orderBy(
                SQLOrderBy(
                    expression: SQLColumn("created_at", table: Tables.deliveries), direction: SQLDirection.descending)
            )
            .orderBy(
                SQLOrderBy(expression: SQLColumn("id", table: Tables.deliveries), direction: SQLDirection.descending)
            )
            .limit(limit)
    }

    func message(_ id: UUID, on db: any Database) async throws -> MessageRecord? {
        let rows = try await Self.select(on: db.sql)
            .where(SQLColumn("id", table: Tables.deliveries), .equal, SQLBind(id)).all()
        return try await Self.records(rows, on: db).first
    }

    private static func select(on sql: any SQLDatabase) -> SQLSelectBuilder {
        sql.select()
            .columns(
                SQLColumn("id", table: Tables.deliveries), SQLColumn("event_id", table: Tables.deliveries),
                SQLColumn("notification_id", table: Tables.deliveries),
                SQLColumn("external_id", table: UserModel.schema),
                SQLColumn("channel", table: Tables.deliveries), SQLColumn("kind", table: Tables.deliveries),
                SQLColumn("device_id", table: Tables.deliveries), SQLColumn("status", table: Tables.deliveries),
                SQLColumn("category", table: Tables.notifications), SQLColumn("title", table: Tables.notifications),
                SQLColumn("last_error", table: Tables.deliveries), SQLColumn("last_status", table: Tables.deliveries),
                SQLColumn("next_attempt_at", table: Tables.deliveries),
                SQLColumn("created_at", table: Tables.deliveries),
                SQLColumn("updated_at", table: Tables.deliveries)
            )
            .from(Tables.deliveries)
            .join(
                Tables.notifications, on: SQLColumn("notification_id", table: Tables.deliveries), .equal,
                SQLColumn("id", table: Tables.notifications)
            )
            .join(
                UserModel.schema, on: SQLColumn("user_id", table: Tables.deliveries), .equal,
                SQLColumn("id", table: UserModel.schema))
    }

    private static func records(_ rows: [any SQLRow], on db: any Database) async throws -> [MessageRecord] {
        var records = try rows.map { row in
            let status = try row.decode(column: "status", as: String.self)
            return MessageRecord(
                id: try row.decode(column: "id", as: UUID.self),
                eventID: try row.decode(column: "event_id", as: UUID.self),
                notificationID: try row.decode(column: "notification_id", as: UUID.self),
                user: try row.decode(column: "external_id", as: String.self),
                channel: try row.decode(column: "channel", as: String.self),
                kind: try row.decode(column: "kind", as: String.self),
                deviceID: try row.decode(column: "device_id", as: UUID?.self), status: status,
                category: try row.decode(column: "category", as: String.self),
                title: try row.decode(column: "title", as: String.self),
                lastError: try row.decode(column: "last_error", as: String?.self),
                lastStatus: try row.decode(column: "last_status", as: Int?.self),
                // The next attempt's time means something only while one is to come.
                nextAttemptAt: status == DeliveryStatus.queued.rawValue
                    ? try row.decode(column: "next_attempt_at", as: Date.self) : nil,
                createdAt: try row.decode(column: "created_at", as: Date.self),
                updatedAt: try row.decode(column: "updated_at", as: Date.self), attempts: [])
        }
        let logs = try await attempts(of: records.map(\.id), on: db)
        for index in records.indices { records[index].attempts = logs[records[index].id] ?? [] }
        return records
    }

    /// Every attempt of `deliveries`, in order, by delivery.
    static func attempts(of deliveries: [UUID], on db: any Database) async throws -> [UUID: [MessageRecord.Attempt]] {
        guard !deliveries.isEmpty else { return [:] }
        var log: [UUID: [MessageRecord.Attempt]] = [:]
        for row in try await db.sql.select()
            .columns("delivery_id", "attempt", "started_at", "finished_at", "outcome", "status_code", "error")
            .from(Tables.deliveryAttempts).where("delivery_id", .in, deliveries)
            .orderBy("started_at").all()
        {
            log[try row.decode(column: "delivery_id", as: UUID.self), default: []].append(
                MessageRecord.Attempt(
                    number: try row.decode(column: "attempt", as: Int.self),
                    startedAt: try row.decode(column: "started_at", as: Date.self),
                    finishedAt: try row.decode(column: "finished_at", as: Date.self),
                    outcome: try row.decode(column: "outcome", as: String.self),
                    statusCode: try row.decode(column: "status_code", as: Int?.self),
                    error: try row.decode(column: "error", as: String?.self)))
        }
        return log
    }
}
