import BelfryCore
import Fluent
import Foundation
import SQLKit

/// What the console shows of one user: who they are, their devices, their preferences per
/// site, and their messages (deliveries) with every attempt, newest first, a page at a time.
extension ConsoleData {
    static let messagesShown = 50

    struct UserDetail: Sendable {
        var user: UserRecord
        var devices: [DeviceRecord]
        /// Per tenant: the categories turned off, and the channels set to required.
        var preferences: [(tenant: String, off: [String], required: [String])]
        var messages: [Message]
        /// The last message's delivery id, when there may be older ones.
        var older: UUID?
        var inboxCount: Int
    }

    /// One notification on one channel (and device), with its attempts.
    struct Message: Sendable {
        var delivery: DeliveryRow
        var event: UUID
        var category: String
        var title: String
        var createdAt: Date
    }

    func user(
        _ externalID: String, before: UUID?, preferences store: PreferenceStore, devices: DeviceStore,
        on db: any Database
    ) async throws -> UserDetail? {
        guard let model = try await UserModel.query(on: db).filter(\.$externalID == externalID).first() else {
            return nil
        }
        let id = try model.requireID()
        let tenants = try await model.tenantIDs(on: db)
        var preferences: [(String, [String], [String])] = []
        for tenant in tenants.isEmpty ? [store.workspace.defaultTenant] : tenants {
            let data = try await store.view(userID: id, scope: .tenant(tenant), on: db).data
            let off = (data.sections ?? []).flatMap { $0.subcategories ?? [] }.filter { $0.preference == .optOut }
                .map(\.category)
            let required = (data.channelPreferences ?? []).filter(\.isRestricted).map(\.channel)
            preferences.append((tenant, off, required))
        }
        let messages = try await self.messages(of: id, before: before, on: db)
        let inbox =
            try await db.sql.select().column(SQLFunction("COUNT", args: SQLLiteral.all), as: "n").from("notifications")
            .where("user_id", .equal, id).where("in_inbox", .equal, true).first()?.decode(column: "n", as: Int.self)
            ?? 0
        return UserDetail(
            user: model.record(tenants: tenants), devices: try await devices.devices(of: id, on: db).map(\.record),
            preferences: preferences, messages: messages,
            older: messages.count == Self.messagesShown ? messages.last?.delivery.id : nil,
            inboxCount: inbox)
    }

    private func messages(of user: UUID, before: UUID?, on db: any Database) async throws -> [Message] {
        let sql = db.sql
        let select = sql.select()
            .columns(
                SQLColumn("id", table: "deliveries"), SQLColumn("channel", table: "deliveries"),
                SQLColumn("device_id", table: "deliveries"), SQLColumn("status", table: "deliveries"),
                SQLColumn("attempts", table: "deliveries"), SQLColumn("last_error", table: "deliveries"),
                SQLColumn("last_status", table: "deliveries"), SQLColumn("next_attempt_at", table: "deliveries"),
                SQLColumn("event_id", table: "deliveries"),
                SQLColumn("category", table: "events"), SQLColumn("title", table: "events"),
                SQLColumn("created_at", table: "deliveries")
            )
            .from("deliveries")
            .join("events", on: SQLColumn("event_id", table: "deliveries"), .equal, SQLColumn("id", table: "events"))
            .where(SQLColumn("user_id", table: "deliveries"), .equal, SQLBind(user))
        if let before {
            // Compared with the cursor row's own stored values, so no timestamp leaves the database.
            select.where(
                SQLQueryString(
                    """
                    (deliveries.created_at < (SELECT created_at FROM deliveries WHERE id = \(bind: before))
                     OR (deliveries.created_at = (SELECT created_at FROM deliveries WHERE id = \(bind: before))
                         AND deliveries.id < \(bind: before)))
                    """))
        }
        var messages =
            try await select
            .orderBy(
                SQLOrderBy(expression: SQLColumn("created_at", table: "deliveries"), direction: SQLDirection.descending)
            )
            .orderBy(SQLOrderBy(expression: SQLColumn("id", table: "deliveries"), direction: SQLDirection.descending))
            .limit(Self.messagesShown).all()
            .map { row in
                Message(
                    delivery: DeliveryRow(
                        id: try row.decode(column: "id", as: UUID.self),
                        channel: try row.decode(column: "channel", as: String.self), user: "",
                        device: try row.decode(column: "device_id", as: UUID?.self),
                        status: try row.decode(column: "status", as: String.self),
                        attempts: try row.decode(column: "attempts", as: Int.self),
                        lastError: try row.decode(column: "last_error", as: String?.self),
                        lastStatus: try row.decode(column: "last_status", as: Int?.self),
                        nextAttemptAt: try row.decode(column: "next_attempt_at", as: Date.self)),
                    event: try row.decode(column: "event_id", as: UUID.self),
                    category: try row.decode(column: "category", as: String.self),
                    title: try row.decode(column: "title", as: String.self),
                    createdAt: try row.decode(column: "created_at", as: Date.self))
            }
        let logs = try await attemptLogs(of: messages.map { $0.delivery.id }, on: db)
        for index in messages.indices { messages[index].delivery.attemptLog = logs[messages[index].delivery.id] ?? [] }
        return messages
    }

    /// Every attempt of `deliveries`, in order, by delivery.
    func attemptLogs(of deliveries: [UUID], on db: any Database) async throws -> [UUID: [Attempt]] {
        guard !deliveries.isEmpty else { return [:] }
        var log: [UUID: [Attempt]] = [:]
        for row in try await db.sql.select()
            .columns("delivery_id", "attempt", "started_at", "finished_at", "outcome", "status_code", "error")
            .from("delivery_attempts").where("delivery_id", .in, deliveries)
            .orderBy("started_at").all()
        {
            log[try row.decode(column: "delivery_id", as: UUID.self), default: []].append(
                Attempt(
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
