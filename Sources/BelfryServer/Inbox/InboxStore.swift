import BelfryCore
import Fluent
import Foundation
import SQLKit

/// A user's inbox: the notifications fan-out wrote with the inbox channel, once they are due.
struct InboxStore: Sendable {
    let storage: BelfryDatabase
    let workspace: WorkspaceConfig
    let now: @Sendable () -> Date
    /// Wakes the delivery queue after an action answer is queued for the webhook.
    let wakeDeliveries: @Sendable () -> Void
    /// Reports reads, views, archives and answers to the workspace's `webhooks`.
    let statusEvents: StatusEvents

    enum Status: String, CaseIterable, Sendable {
        case unread, read, all, archived
    }

    enum Mark: String, CaseIterable, Sendable {
        case seen, read, unread, archive, unarchive

        /// What the workspace's `webhooks` hear of it; undoing a mark is not reported.
        var statusEvent: StatusEventType? {
            switch self {
            case .seen: .messageSeen
            case .read: .messageRead
            case .archive: .messageArchived
            case .unread, .unarchive: nil
            }
        }

        /// The column whose time says the mark was made.
        var column: String? {
            switch self {
            case .seen: "seen_at"
            case .read: "read_at"
            case .archive: "archived_at"
            case .unread, .unarchive: nil
            }
        }
    }

    struct Filter: Sendable {
        var status: Status = .all
        var category: String?
        var tenant: String?
    }

    static let columns = [
        "id", "category", "tenant", "title", "body", "url", "data", "available_at", "seen_at", "read_at", "archived_at",
        "batch", "locale",
    ]

    /// The rows a user sees: theirs, meant for the inbox, and due.
    private func visible(_ select: SQLSelectBuilder, userID: UUID) -> SQLSelectBuilder {
        select.where("user_id", .equal, userID).inInboxAndDue(by: now())
    }

    /// Newest first. The cursor is the last notification of the previous page: the next page
    /// holds what sorts after it, so notifications arriving meanwhile neither repeat nor push
    /// items off the pages.
    func page(
        userID: UUID, filter: Filter, limit: Int, after cursor: UUID?, on db: any Database
    ) async throws
        -> InboxPage
    {
        let select = visible(db.sql.select().columns(Self.columns).from(Tables.notifications), userID: userID)
        switch filter.status {
        case .unread: select.where("read_at", .is, SQLLiteral.null).where("archived_at", .is, SQLLiteral.null)
        case .read: select.where("read_at", .isNot, SQLLiteral.null).where("archived_at", .is, SQLLiteral.null)
        case .all: select.where("archived_at", .is, SQLLiteral.null)
        case .archived: select.where("archived_at", .isNot, SQLLiteral.null)
        }
        if let category = filter.category { select.where("category", .equal, category) }
        if let tenant = filter.tenant { select.where("tenant", .equal, tenant) }
        if let cursor {
            // Compared with the cursor row's own stored values, so no timestamp leaves the database.
            select.where(
                SQLQueryString(
                    """
                    (available_at < (SELECT available_at FROM notifications WHERE id = \(bind: cursor))
                     OR (available_at = (SELECT available_at FROM notifications WHERE id = \(bind: cursor)) AND id < \(bind: cursor)))
                    """))
        }
        let rows = try await select.orderBy("available_at", .descending).orderBy("id", .descending)
            .limit(limit + 1).all()
        let items = try rows.prefix(limit).map(item)
        return InboxPage(
            notifications: items, nextCursor: rows.count > limit ? items.last.map { Self.cursor(for: $0.id) } : nil)
    }

    func counts(userID: UUID, tenant: String?, on db: any Database) async throws -> InboxCounts {
        try await counts(of: [userID], tenant: tenant, on: db)[userID] ?? InboxCounts(unread: 0, unseen: 0)
    }

    /// A user's counts, or `nil` if the user no longer exists, in one statement: what a stream
    /// sends first. Written as SQL: Fluent's model reading (reflection) and SQLKit's query
    /// builder were half of the CPU time of opening a stream.
    func countsIfUserExists(userID: UUID, epoch: Int? = nil, on db: any Database) async throws -> InboxCounts? {
        let row = try await db.sql.raw(countsIfUserExistsQuery(userID: userID, epoch: epoch, on: db)).first()
        guard let row, try row.decode(column: "users", as: Int.self) > 0 else { return nil }
        return try Self.counts(in: row)
    }

    /// The statement of ``countsIfUserExists(userID:epoch:on:)``.
    func countsIfUserExistsQuery(userID: UUID, epoch: Int?, on db: any Database) -> SQLQueryString {
        // A page token's stream also needs the session it came from to be current.
        let current = epoch.map { SQLQueryString("AND session_epoch = \(bind: $0)") } ?? ""
        return """
            SELECT (SELECT COUNT(*) FROM users WHERE id = \(bind: userID) \(current)) AS users,
            \(unsafeRaw: Self.unreadSum) AS unread, \(unsafeRaw: Self.unseenSum) AS unseen
            FROM notifications
            WHERE user_id = \(bind: userID) AND \(unsafeRaw: counted) AND available_at <= \(bind: now())
            """
    }

    /// The notifications the counts read: in the inbox, not archived, and unread or unseen (those
    /// read and seen add nothing to either count), as SQL for one database kind, the columns
    /// named by `table` if given. The index `notifications_unread` holds just these, with the
    /// columns the counts sum, under this predicate's text: SQLite's planner uses a partial
    /// index only for a query that has the index's terms among its own.
    static func counted(postgres: Bool, table: String? = nil) -> String {
        let column = { (name: String) in table.map { "\($0).\(name)" } ?? name }
        let inInbox = postgres ? column("in_inbox") : "\(column("in_inbox")) = 1"
        return "\(inInbox) AND \(column("archived_at")) IS NULL"
            + " AND (\(column("read_at")) IS NULL OR \(column("seen_at")) IS NULL)"
    }

    /// ``counted(postgres:table:)`` for this store's database.
    private var counted: String { Self.counted(postgres: storage.kind == .postgres) }

    /// How many of a user's notifications are unread and unseen, summed over those selected.
    private static let unreadSum = "SUM(CASE WHEN read_at IS NULL THEN 1 ELSE 0 END)"
    private static let unseenSum = "SUM(CASE WHEN seen_at IS NULL THEN 1 ELSE 0 END)"

    /// The counts in a row with `unread` and `unseen` columns; no notifications sum to NULL.
    private static func counts(in row: some SQLRow) throws -> InboxCounts {
        InboxCounts(
            unread: try row.decode(column: "unread", as: Int?.self) ?? 0,
            unseen: try row.decode(column: "unseen", as: Int?.self) ?? 0)
    }

    /// The counts of many users in one query (of one tenant, or all when `tenant` is nil); a
    /// user without notifications counts zero.
    func counts(of users: [UUID], tenant: String? = nil, on db: any Database) async throws -> [UUID: InboxCounts] {
        guard !users.isEmpty else { return [:] }
        var result = Dictionary(uniqueKeysWithValues: users.map { ($0, InboxCounts(unread: 0, unseen: 0)) })
        for row in try await countsQuery(of: users, tenant: tenant, on: db).all() {
            result[try row.decode(column: "user_id", as: UUID.self)] = try Self.counts(in: row)
        }
        return result
    }

    /// The query of ``counts(of:tenant:on:)``: a row for each of `users` with a notification
    /// counted.
    func countsQuery(of users: [UUID], tenant: String?, on db: any Database) -> SQLSelectBuilder {
        let select = db.sql.select()
            .column("user_id")
            .column(SQLRaw(Self.unreadSum), as: "unread")
            .column(SQLRaw(Self.unseenSum), as: "unseen")
            .from(Tables.notifications)
            .where("user_id", .in, users).where(SQLRaw(counted))
            .where("available_at", .lessThanOrEqual, now())
        if let tenant { select.where("tenant", .equal, tenant) }
        return select.groupBy("user_id")
    }

    /// The visible notifications an event gave `users`, with whose they are.
    func items(ofEvent eventID: UUID, users: [UUID], on db: any Database) async throws -> [(UUID, InboxNotification)] {
        guard !users.isEmpty else { return [] }
        let rows = try await db.sql.select().columns(Self.columns + ["user_id"]).from(Tables.notifications)
            .where("event_id", .equal, eventID).where("user_id", .in, users).inInboxAndDue(by: now())
            .all()
        return try rows.map { (try $0.decode(column: "user_id", as: UUID.self), try item($0)) }
    }

    /// One of the user's visible notifications.
    func item(_ id: UUID, userID: UUID, on db: any Database) async throws -> InboxNotification? {
        try await visible(db.sql.select().columns(Self.columns).from(Tables.notifications), userID: userID)
            .where("id", .equal, id).first().map(item)
    }

    /// Changes one notification's state; `nil` when the user has no such notification.
    func mark(_ id: UUID, _ mark: Mark, userID: UUID, on db: any Database) async throws -> InboxNotification? {
        let now = now()
        let updated = try await storage.write(db) { tx in
            let update = tx.sql.update(Tables.notifications)
            Self.apply(mark, to: update, now: now)
            let rows = try await update.where("id", .equal, id).where("user_id", .equal, userID)
                .inInboxAndDue(by: now).returning(Self.changedColumns.map { SQLColumn($0) }).all()
            if let type = mark.statusEvent, let column = mark.column {
                // Only a change made now is reported: marking read again keeps the first time.
                let changed = try rows.filter { row in
                    try row.decode(column: column, as: Date?.self).map { abs($0.timeIntervalSince(now)) < 0.001 }
                        ?? false
                }
                try await self.queueStatus(type, changed, userID: userID, on: tx)
            }
            return rows.count
        }
        guard updated == 1 else { return nil }
        return try await item(id, userID: userID, on: db)
    }

    enum ActionOutcome: Sendable {
        case notFound
        case unknownAction
        /// `action` is the answer that counts: the first one given.
        case recorded(InboxNotification, forwarded: Bool, action: String)
    }

    /// Records the user's answer to one of a notification's actions, marks it read, and queues
    /// the answer for the workspace's webhook channel (if it has one), all in one transaction.
    /// Only the first answer counts.
    func respond(
        to id: UUID, action actionID: String, userID: UUID, on db: any Database
    ) async throws
        -> ActionOutcome
    {
        let now = now()
        let webhook = workspace.channels.first { $0.kind == .webhook }
        let outcome: ActionOutcome = try await storage.write(db) { tx in
            guard
                let row = try await self.visible(
                    tx.sql.select().columns("category", "event_id").from(Tables.notifications), userID: userID
                ).where("id", .equal, id).first()
            else { return .notFound }
            let category = try row.decode(column: "category", as: String.self)
            guard self.workspace.category(category)?.actions.contains(where: { $0.id == actionID }) == true
            else {
                return .unknownAction
            }
            // Marked read first: on PostgreSQL that locks the row, so that of two answers at
            // once the second sees the first.
            let update = tx.sql.update(Tables.notifications)
            Self.apply(.read, to: update, now: now)
            try await update.where("id", .equal, id).run()
            // One answer per notification: a repeat (a double tap, a retried request, another
            // device) records nothing and sends nothing, and gets the first answer back.
            let first = try await tx.sql.select().column("action_id").from(Tables.notificationActions)
                .where("notification_id", .equal, id).orderBy("created_at").limit(1).first()
                .map { try $0.decode(column: "action_id", as: String.self) }
            let answered = first != nil
            if !answered {
                try await tx.sql.insert(into: Tables.notificationActions).columns(
                    "id", "notification_id", "action_id", "created_at"
                )
                .values(UUID(), id, actionID, now).run()
            }
            if !answered {
                let answer = try await tx.sql.select().columns(Self.changedColumns).from(Tables.notifications)
                    .where("id", .equal, id).all()
                try await self.queueStatus(
                    .messageAction, answer, userID: userID, extra: ["action": .string(actionID)], on: tx)
            }
            if let webhook, !answered {
                let answer = QueuedDelivery(
                    id: UUID(), notification: id, event: try row.decode(column: "event_id", as: UUID.self),
                    user: userID, channel: webhook.id, kind: .action, action: actionID, firstAttempt: now, now: now)
                try await QueuedDelivery.insert([answer.values], storage: self.storage, on: tx)
            }
            let item = try await tx.sql.select().columns(Self.columns).from(Tables.notifications).where(
                "id", .equal, id
            )
            .first()
            guard let item else { return .notFound }
            return .recorded(try self.item(item), forwarded: webhook != nil && !answered, action: first ?? actionID)
        }
        if case .recorded(_, true, _) = outcome { wakeDeliveries() }
        return outcome
    }

    /// Marks every visible notification (of a tenant or category, if given) read or seen.
    /// - Returns: how many changed.
    func markAll(
        _ mark: Mark, userID: UUID, tenant: String?, category: String?, on db: any Database
    ) async throws
        -> Int
    {
        let now = now()
        return try await storage.write(db) { tx in
            let update = tx.sql.update(Tables.notifications)
            Self.apply(mark, to: update, now: now)
            update.where("user_id", .equal, userID).inInboxAndDue(by: now).where("archived_at", .is, SQLLiteral.null)
                .where(mark == .read ? "read_at" : "seen_at", .is, SQLLiteral.null)
            if let tenant { update.where("tenant", .equal, tenant) }
            if let category { update.where("category", .equal, category) }
            let rows = try await update.returning(Self.changedColumns.map { SQLColumn($0) }).all()
            if let type = mark.statusEvent { try await self.queueStatus(type, rows, userID: userID, on: tx) }
            return rows.count
        }
    }

    /// What a status event about a notification says, read back from the change.
    private static let changedColumns = ["id", "event_id", "category", "tenant", "read_at", "seen_at", "archived_at"]

    /// Queues `type` for each changed notification of `userID` (rows of ``changedColumns``), in
    /// the change's transaction. The inbox's message is the notification itself.
    private func queueStatus(
        _ type: StatusEventType, _ rows: [any SQLRow], userID: UUID, extra: [String: JSONValue] = [:],
        on tx: any Database
    ) async throws {
        guard statusEvents.wants(type), !rows.isEmpty else { return }
        let user = try await StatusEvents.externalID(of: userID, on: tx)
        let inbox = workspace.channels.first { $0.kind == .inbox }?.id
        let events = try rows.map { row in
            let id = try row.decode(column: "id", as: UUID.self)
            return StatusEvent.message(
                type, message: id, notification: id, user: user,
                event: try row.decode(column: "event_id", as: UUID.self),
                category: try row.decode(column: "category", as: String.self),
                tenant: try row.decode(column: "tenant", as: String.self), channel: inbox, extra: extra)
        }
        try await statusEvents.queue(events, on: tx)
    }

    private static func apply(_ mark: Mark, to update: SQLUpdateBuilder, now: Date) {
        func keepOrSet(_ column: String) {
            update.set(column, to: SQLFunction("COALESCE", args: SQLColumn(column), SQLBind(now)))
        }
        switch mark {
        case .seen:
            keepOrSet("seen_at")
        case .read:
            keepOrSet("seen_at")
            keepOrSet("read_at")
        case .unread:
            update.set("read_at", to: SQLLiteral.null)
        case .archive:
            keepOrSet("seen_at")
            keepOrSet("archived_at")
        case .unarchive:
            update.set("archived_at", to: SQLLiteral.null)
        }
    }

    private func item(_ row: any SQLRow) throws -> InboxNotification {
        let category = try row.decode(column: "category", as: String.self)
        return InboxNotification(
            id: try row.decode(column: "id", as: UUID.self),
            category: category,
            tenant: try row.decode(column: "tenant", as: String.self),
            title: try row.decode(column: "title", as: String.self),
            body: try row.decode(column: "body", as: String.self),
            url: try row.decode(column: "url", as: String?.self),
            data: try row.decode(column: "data", as: String?.self).flatMap(JSONValue.storedData),
            actions: workspace.category(category)?.actions ?? [],
            createdAt: try row.decode(column: "available_at", as: Date.self),
            seenAt: try row.decode(column: "seen_at", as: Date?.self),
            readAt: try row.decode(column: "read_at", as: Date?.self),
            archivedAt: try row.decode(column: "archived_at", as: Date?.self),
            batch: NotificationBatch(stored: try row.decode(column: "batch", as: String?.self)),
            locale: try row.decode(column: "locale", as: String?.self))
    }

    static func cursor(for id: UUID) -> String {
        Data("n1:\(id.uuidString)".utf8).base64URLEncodedString()
    }

    static func parseCursor(_ text: String) -> UUID? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        guard let data = Data(base64Encoded: base64), let decoded = String(data: data, encoding: .utf8),
            decoded.hasPrefix("n1:")
        else { return nil }
        return UUID(uuidString: String(decoded.dropFirst(3)))
    }
}

extension SQLPredicateBuilder {
    /// Rows meant for the inbox and due by `now`: what its reads and marks see. The stream's
    /// first counts (``InboxStore/countsIfUserExists(userID:epoch:on:)``) say the same in SQL.
    @discardableResult
    fileprivate func inInboxAndDue(by now: Date) -> Self {
        self.where("in_inbox", .equal, true).where("available_at", .lessThanOrEqual, now)
    }
}
