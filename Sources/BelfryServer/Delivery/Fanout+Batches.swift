import BelfryCore
import Crypto
import Fluent
import Foundation
import Mustache
import SQLKit

/// One event as a batch lists it.
struct BatchItem: Sendable {
    var eventID: UUID
    var title: String
    var body: String
    var url: String?
    /// The event's `data`, as stored.
    var data: String?
    /// The value of the rule's `key` in the event's data: events with the same value share a
    /// batch. Empty without a key, or when the data lacks the field.
    var key: String

    static func keyValue(_ key: String?, in data: [String: JSONValue]?) -> String {
        guard let key, let value = data?[key] else { return "" }
        switch value {
        case .array, .object:
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            return (try? encoder.encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? ""
        default:
            // A string, a number (whole numbers without a fraction), a boolean, or null as "".
            return "\(EmailComposer.plain(value))"
        }
    }
}

extension Fanout {
    /// Batches closed in one transaction.
    static let batchesPerClose = 100

    /// Adds an event to each planned user's open batch of the category, tenant and key, opening
    /// one where there is none. One upsert on the open batch's key counts the event, atomically
    /// on both databases, so two instances adding to the same batch count both; the first
    /// `max_items` events are kept as the batch's items.
    func addToBatches(
        _ item: BatchItem, of category: CategoryDefinition, tenant: String, rule: BatchRule, plans: [Plan],
        variants: LocalizedContent? = nil, now: Date, on db: any Database
    ) async throws {
        guard !plans.isEmpty else { return }
        // From templates, each user's item is in their language, as the summary will be.
        var locales: [UUID: String?] = [:]
        var picker = variants.map(LocalizedContent.Picker.init)
        var randomness = IDRandomness()
        // The key's value may be long: the open key holds its digest.
        let keyDigest = SHA256.hash(data: Data(item.key.utf8)).hexEncoded
        var batches: [[BulkValue]] = []
        var due: [UUID: Date] = [:]
        for plan in plans {
            let user = plan.user
            due[user.id] = plan.due
            locales[user.id] = user.locale
            batches.append([
                .id(UUID.timeOrdered(at: now, using: &randomness)), .id(user.id), .text(category.id), .text(tenant),
                .text(item.key), .text("\(user.id.uuidString)|\(category.id)|\(tenant)|\(keyDigest)"),
                .id(item.eventID), .integer(1), .date(plan.due),
                .date(rule.closing(openedAt: plan.due, timeZone: user.timeZone ?? .gmt)),
            ])
        }
        let counted = try await storage.insert(
            into: Tables.batches,
            columns: [
                "id", "user_id", "category", "tenant", "batch_key", "open_key", "first_event_id", "count",
                "opened_at", "closes_at",
            ], rows: batches, rowsPerStatement: 300,
            onConflict: .update(target: ["open_key"], set: "count = batches.count + 1"),
            returning: ["id", "user_id", "count"], on: db)
        var items: [[BulkValue]] = []
        for row in counted {
            let position = try row.decode(column: "count", as: Int.self) - 1
            guard position < rule.maxItems else { continue }
            let userID = try row.decode(column: "user_id", as: UUID.self)
            var text = (title: item.title, body: item.body, url: item.url)
            if let content = picker?.variant(for: locales[userID] ?? nil).content {
                text = (content.title, content.body, content.url)
            }
            items.append([
                .id(try row.decode(column: "id", as: UUID.self)), .integer(position), .id(item.eventID),
                .text(text.title), .text(text.body), .text(text.url), .text(item.data), .date(due[userID] ?? now),
            ])
        }
        try await storage.insert(
            into: Tables.batchItems,
            columns: ["batch_id", "position", "event_id", "title", "body", "url", "data", "created_at"],
            rows: items, rowsPerStatement: 300, on: db)
    }

    /// Closes the batches whose time has come, up to `batchesPerClose` in one transaction: each
    /// becomes one notification, on the channels the preference rule and the throttle allow
    /// now, and is marked closed in the same transaction. A batch is locked while it closes
    /// (`FOR UPDATE SKIP LOCKED` on PostgreSQL), so it closes once, whichever instance takes it;
    /// a process that dies mid-way rolls back, and the batch closes after the restart.
    /// - Returns: whether there was a batch to close.
    func closeDueBatches(on db: any Database) async throws -> Bool {
        let outcome = try await storage.write(db) { tx in try await self.closeBatches(on: tx) }
        await committed([outcome], on: db)
        return outcome.processed
    }

    private struct OpenBatch {
        var id: UUID
        var userID: UUID
        var category: String
        var tenant: String
        var firstEvent: UUID
        var count: Int
    }

    private func closeBatches(on db: any Database) async throws -> Outcome {
        let sql = db.sql
        let now = now()
        let batches = try await dueBatches(now: now, on: sql)
        guard !batches.isEmpty else { return Outcome(processed: false) }
        let items = try await items(of: batches, on: sql)
        let audience = try await audience(of: batches, on: sql)

        var closed: [StatusEvent] = []
        var rows = notificationRows()
        var skips: [UUID: [String: [SkipReason: Int]]] = [:]
        for open in batches {
            var notificationID: UUID?
            // A batch whose category left the workspace config, or stopped batching, closes with
            // nothing to send; a user erased meanwhile took their batches along.
            if let category = workspace.category(open.category), let rule = category.batch,
                let user = audience.users[open.userID]
            {
                let userDevices = audience.devices[user.id] ?? []
                let delivering = channels(
                    of: category, for: user, tenant: open.tenant,
                    stored: audience.preferences[open.tenant]?[user.id] ?? [:],
                    devices: userDevices, skips: &skips[open.firstEvent, default: [:]])
                var plans =
                    delivering.isEmpty ? [] : [Plan(user: user, due: now, delivering: delivering, devices: userDevices)]
                try await throttle(
                    &plans, category: category, now: now, skips: &skips[open.firstEvent, default: [:]], on: db)
                let batch = NotificationBatch(count: open.count, items: items[open.id] ?? [])
                let text = BatchText.render(rule, batch, locale: user.locale)
                let content = NotificationRows.Content(
                    eventID: open.firstEvent, category: category, tenant: open.tenant, title: text.title,
                    body: text.body, url: batch.items.first?.url, data: nil, decodedData: nil, batch: batch,
                    locale: text.locale)
                for plan in plans {
                    notificationID = rows.add(
                        content, for: plan.user, due: now, delivering: plan.delivering, devices: plan.devices, now: now,
                        isFollowed: isFollowed)
                }
            }
            try await sql.update(Tables.batches)
                .set("open_key", to: SQLLiteral.null)
                .set("closed_at", to: now)
                .set("notification_id", to: notificationID)
                .where("id", .equal, open.id)
                .run()
            if statusEvents?.wants(.batchClosed) == true {
                closed.append(
                    Self.batchClosed(open, user: audience.externalIDs[open.userID], notification: notificationID))
            }
        }
        try await statusEvents?.queue(closed, on: db)
        try await rows.insert(storage: storage, on: db)
        try await statusEvents?.queue(rows.statusEvents, on: db)
        // The items now live in the notification's `batch`; the batch row stays, like its events.
        try await sql.delete(from: Tables.batchItems).where("batch_id", .in, batches.map(\.id)).run()
        try await EventSkips.add(skips, storage: storage, on: db)
        return Outcome(processed: true, rows: rows)
    }

    /// The open batches whose window has ended, oldest first, locked against other workers.
    private func dueBatches(now: Date, on sql: any SQLDatabase) async throws -> [OpenBatch] {
        let due = sql.select()
            .columns("id", "user_id", "category", "tenant", "first_event_id", "count")
            .from(Tables.batches)
            .where("open_key", .isNot, SQLLiteral.null)
            .where("closes_at", .lessThanOrEqual, now)
            .orderBy("closes_at")
            .limit(Self.batchesPerClose)
        return try await storage.lockingSkipLocked(due).all().map { row in
            OpenBatch(
                id: try row.decode(column: "id", as: UUID.self),
                userID: try row.decode(column: "user_id", as: UUID.self),
                category: try row.decode(column: "category", as: String.self),
                tenant: try row.decode(column: "tenant", as: String.self),
                firstEvent: try row.decode(column: "first_event_id", as: UUID.self),
                count: try row.decode(column: "count", as: Int.self))
        }
    }

    /// Each batch's items, in the order they joined it.
    private func items(
        of batches: [OpenBatch], on sql: any SQLDatabase
    ) async throws -> [UUID: [NotificationBatch.Item]] {
        var items: [UUID: [NotificationBatch.Item]] = [:]
        for row in try await sql.select()
            .columns("batch_id", "event_id", "title", "body", "url", "data", "created_at")
            .from(Tables.batchItems).where("batch_id", .in, batches.map(\.id))
            .orderBy("batch_id").orderBy("position").all()
        {
            items[try row.decode(column: "batch_id", as: UUID.self), default: []].append(
                NotificationBatch.Item(
                    eventID: try row.decode(column: "event_id", as: UUID.self),
                    title: try row.decode(column: "title", as: String.self),
                    body: try row.decode(column: "body", as: String.self),
                    url: try row.decode(column: "url", as: String?.self),
                    data: try row.decode(column: "data", as: String?.self).flatMap(JSONValue.storedData),
                    createdAt: try row.decode(column: "created_at", as: Date.self)))
        }
        return items
    }

    /// The batches' users as fan-out reads them: who they are, their devices and preferences.
    private struct BatchAudience {
        var users: [UUID: Recipient] = [:]
        var externalIDs: [UUID: String] = [:]
        var devices: [UUID: [DeviceStore.Device]] = [:]
        var preferences: [String: [UUID: [PreferenceScope: PreferenceSelections]]] = [:]
    }

    private func audience(of batches: [OpenBatch], on sql: any SQLDatabase) async throws -> BatchAudience {
        let userIDs = Array(Set(batches.map(\.userID)))
        var audience = BatchAudience()
        let select = sql.select().columns(Self.recipientColumns.map { SQLColumn($0) }).from(UserModel.schema)
            .where("id", .in, userIDs)
        for row in try await storage.rows(select.query, on: sql) {
            let (externalID, recipient) = try Self.recipient(from: row)
            audience.users[recipient.id] = recipient
            audience.externalIDs[recipient.id] = externalID
        }
        audience.devices = try await devices.deliverableDevices(of: userIDs, on: sql)
        for tenant in Set(batches.map(\.tenant)) {
            audience.preferences[tenant] = try await preferenceSets(
                of: Array(Set(batches.filter { $0.tenant == tenant }.map(\.userID))), tenants: [tenant], on: sql)
        }
        return audience
    }

    /// `batch.closed`: the batch, its user and first event, and the notification it became.
    private static func batchClosed(_ open: OpenBatch, user: String?, notification: UUID?) -> StatusEvent {
        StatusEvent(
            type: .batchClosed,
            data: [
                "batch": .string(open.id.uuidString.lowercased()),
                "user": user.map(JSONValue.string) ?? .null,
                "event": .string(open.firstEvent.uuidString.lowercased()),
                "category": .string(open.category), "tenant": .string(open.tenant),
                "count": .number(Double(open.count)),
                "notification": notification.map { .string($0.uuidString.lowercased()) } ?? .null,
            ])
    }
}

/// A batch's title and body: the category's Mustache templates over the batch (in the user's
/// language, with plural forms by its rules), or the first item's title with its body (one
/// event) or "and N more".
enum BatchText {
    static func render(
        _ rule: BatchRule, _ batch: NotificationBatch, locale: String?
    ) -> (title: String, body: String, locale: String?) {
        let first = batch.items.first
        let more = batch.count - 1
        let defaults = (
            title: first?.title ?? "\(batch.count) notifications",
            body: more == 0 ? (first?.body ?? "") : "and \(more) more"
        )
        var context = self.context(batch)
        let text = rule.text(for: locale)
        if let tag = text.tag { context["locale"] = tag }
        func render(_ template: String?, _ fallback: String) -> String {
            guard let template, let compiled = try? TextTemplate.compiled(template) else { return fallback }
            let text = compiled.render(context, locale: text.tag ?? locale)
            return text.isEmpty ? fallback : text
        }
        return (render(text.title, defaults.title), render(text.body, defaults.body), text.tag)
    }

    /// What the templates see: `count`, `more` (and `has_more`), `items` (each with `title`,
    /// `body`, `url`, `data`, `created_at`) and `first`.
    static func context(_ batch: NotificationBatch) -> [String: Any] {
        let items: [[String: Any]] = batch.items.map { item in
            // An item without a URL says so (a null), so `{{#url}}` does not find the digest's own.
            let fields: [String: Any] = [
                "title": item.title, "body": item.body, "url": item.url ?? NSNull(),
                "created_at": item.createdAt.ISO8601Format(),
                "data": item.data.map { EmailComposer.plain(.object($0)) } ?? [String: Any](),
            ]
            return fields
        }
        var context: [String: Any] = [
            "count": batch.count, "more": batch.count - 1, "has_more": batch.count > 1, "items": items,
        ]
        if let first = items.first { context["first"] = first }
        return context
    }
}
