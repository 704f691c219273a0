import BelfryCore
import BelfryMail
import Fluent
import Foundation
import NIOConcurrencyHelpers
import SQLKit

/// Turns accepted events into notifications and deliveries, a batch of recipients at a time.
///
/// Each batch is one transaction that locks its event (`FOR UPDATE SKIP LOCKED` on PostgreSQL,
/// so several instances share events without waiting on each other), applies the preference
/// rule to each recipient, writes their notification (the inbox: the row is its delivery) and
/// queued deliveries for the other channels, and advances the event's cursor. A process that
/// dies mid-batch loses nothing: the batch rolls back and the next worker does it again.
struct Fanout: Sendable {
    let storage: BelfryDatabase
    let workspace: WorkspaceConfig
    let now: @Sendable () -> Date
    /// Tells the streams of the new notifications after each batch commits.
    let events: InboxEvents
    /// Whether a user has a stream open on this instance: their new items are built in the batch.
    let isFollowed: @Sendable (UUID) -> Bool
    /// Wakes the delivery queue once a batch queued deliveries.
    let wakeDeliveries: @Sendable () -> Void
    let metrics: BelfryMetrics
    /// The users' devices that can take a push.
    let devices: DeviceStore
    /// Reports each recipient's channels the rule or the throttle left out (`message.skipped`).
    var statusEvents: StatusEvents? = nil
    static let batchSize = 500
    static let eventsPerBatch = 32
    /// Fan-out loops per process on PostgreSQL.
    static let postgresWorkers = 4
    /// Failed batches after which an event stops being retried. Retries back off (5 s, 10 s, …),
    /// so the last one comes about 20 minutes after the first failure: long enough to ride out a
    /// passing database problem, short enough that a broken event is reported.
    static let maxFailures = 8

    /// Processes one batch of the most overdue event, if any is due, in one transaction; small
    /// events that end within the batch leave room for the next due ones in the same
    /// transaction (up to `batchSize` recipients and `eventsPerBatch` events), so that a stream
    /// of one-recipient events is not one commit each. A batch that fails rolls back, and its
    /// event waits (behind the others) before it is tried again; after `maxFailures` the event
    /// is marked `failed` with its error.
    /// - Returns: whether there was an event to work on.
    func processBatch(on db: any Database) async throws -> Bool {
        let picked = NIOLockedValueBox<UUID?>(nil)
        do {
            let outcomes = try await storage.write(db) { tx in
                var outcomes: [Outcome] = []
                var recipients = 0
                while outcomes.count < Self.eventsPerBatch && recipients < Self.batchSize {
                    let outcome = try await self.batch(on: tx, picked: picked)
                    guard outcome.processed else { break }
                    outcomes.append(outcome)
                    recipients += outcome.recipients
                    // An event with recipients still to go takes the next batch on its own.
                    if outcome.ended == nil { break }
                }
                return outcomes
            }
            for outcome in outcomes { await committed(outcome, on: db) }
            return !outcomes.isEmpty
        } catch {
            guard let eventID = picked.withLockedValue({ $0 }) else { throw error }
            if try await recordFailure(of: eventID, error: error.operatorDescription, on: db) {
                metrics.event(EventStatus.FanoutState.failed.rawValue)
            }
            return true
        }
    }

    /// What follows a commit, never before it: the queue woken, the streams told of the new
    /// notifications, the metrics counted.
    func committed(_ outcome: Outcome, on db: any Database) async {
        if outcome.rows.queued > 0 { wakeDeliveries() }
        await outcome.rows.publish(to: events, on: db)
        outcome.rows.count(into: metrics)
        if let acceptedAt = outcome.acceptedAt {
            for (channel, count) in outcome.rows.deliveredInInbox {
                metrics.deliveredAfter(now().timeIntervalSince(acceptedAt), channel: channel, count: count)
            }
        }
        metrics.fannedOut(outcome.recipients)
        if outcome.acceptedByCommand { metrics.event("accepted") }
        if let ended = outcome.ended { metrics.event(ended.rawValue) }
    }

    /// - Returns: whether the event failed for good.
    private func recordFailure(of eventID: UUID, error: String, on db: any Database) async throws -> Bool {
        let now = now()
        return try await storage.write(db) { tx in
            let failures =
                try await tx.sql.update(Tables.events)
                .set("failures", to: SQLRaw("failures + 1"))
                .set("last_error", to: String(error.prefix(1000)))
                .where("id", .equal, eventID)
                .returning("failures")
                .first()?.decode(column: "failures", as: Int.self) ?? Self.maxFailures
            let update = tx.sql.update(Tables.events).where("id", .equal, eventID)
            if failures >= Self.maxFailures {
                update.set("state", to: EventStatus.FanoutState.failed.rawValue)
            } else {
                update.set("not_before", to: now.addingTimeInterval(5 * pow(2, Double(failures - 1))))
            }
            try await update.run()
            return failures >= Self.maxFailures
        }
    }

    struct Outcome: Sendable {
        var processed: Bool
        /// What was written, and what the streams are to be told.
        var rows = NotificationRows()
        /// Recipients processed.
        var recipients = 0
        /// The event's fan-out ended with this batch: `done` or `failed`.
        var ended: EventStatus.FanoutState?
        /// When the event was accepted: its inbox items' latency runs from then.
        var acceptedAt: Date?
        /// The first batch of an event `belfry send` stored: counted as accepted here, once.
        var acceptedByCommand = false
    }

    private func batch(on db: any Database, picked: NIOLockedValueBox<UUID?>) async throws -> Outcome {
        let sql = db.sql
        let now = now()
        let due = sql.select()
            .columns(
                "id", "category", "tenant", "title", "body", "url", "data", "calendar_rule", "created_at", "recipients",
                "processed", "topic", "topic_cursor", "source", "content_variants"
            )
            .from(Tables.events)
            .where("state", .in, [EventStatus.FanoutState.pending.rawValue, EventStatus.FanoutState.running.rawValue])
            .where("not_before", .lessThanOrEqual, now)
            .orderBy("not_before")
            .limit(1)
        guard let event = try await storage.lockingSkipLocked(due).first()
        else { return Outcome(processed: false) }

        let eventID = try event.decode(column: "id", as: UUID.self)
        picked.withLockedValue { $0 = eventID }
        let processed = try event.decode(column: "processed", as: Int.self)
        let total = try event.decode(column: "recipients", as: Int.self)
        let tenant = try event.decode(column: "tenant", as: String.self)
        let tenantDefinition = workspace.tenant(tenant)
        let categoryID = try event.decode(column: "category", as: String.self)
        let calendar = try event.decode(column: "calendar_rule", as: String?.self).map {
            try JSONDecoder().decode(CalendarRule.self, from: Data($0.utf8))
        }
        let acceptedAt = try event.decode(column: "created_at", as: Date.self)
        // The audience, a page at a time: the event's own list by position, or a topic's
        // subscribers (with the users they are) by user id.
        let topic = try event.decode(column: "topic", as: String?.self)
        var recipients: [String]
        var topicUsers: [String: Recipient]?
        var topicCursor: UUID?
        let cursor: Int
        let done: Bool
        if let topic {
            let after = try event.decode(column: "topic_cursor", as: UUID?.self) ?? Self.beforeEveryUser
            // The page first, in the order of the topic's index; then its users, without the
            // event's exclusions. (One query joining the two let PostgreSQL sort all the
            // subscribers for every page.)
            let ids = try await sql.select().column("user_id").from(Tables.topicSubscriptions)
                .where("topic", .equal, topic).where("user_id", .greaterThan, after)
                .orderBy("user_id").limit(Self.batchSize).all()
                .map { try $0.decode(column: "user_id", as: UUID.self) }
            let page =
                ids.isEmpty
                ? [] : try await sql.raw(Self.topicUsers(ids, event: eventID)).all().map(Self.recipient(from:))
            recipients = page.map(\.externalID)
            topicUsers = Dictionary(page.map { ($0.externalID, $0.recipient) }) { first, _ in first }
            topicCursor = ids.last ?? after
            cursor = processed + page.count
            done = ids.count < Self.batchSize
        } else {
            let rows = try await sql.select().columns("position", "external_id").from(Tables.eventRecipients)
                .where("event_id", .equal, eventID).where("position", .greaterThanOrEqual, processed)
                .orderBy("position").limit(Self.batchSize).all()
            recipients = try rows.map { try $0.decode(column: "external_id", as: String.self) }
            // Positions below the cursor are done. They are dense unless a user was erased since
            // (their rows go with them), so the cursor follows the last position read.
            cursor = try rows.last.map { try $0.decode(column: "position", as: Int.self) + 1 } ?? total
            done = cursor >= total || recipients.isEmpty
        }

        guard let category = workspace.category(categoryID) else {
            // The workspace no longer has this category: say so on the event rather than drop it.
            try await sql.update(Tables.events)
                .set("state", to: EventStatus.FanoutState.failed.rawValue)
                .set("last_error", to: "category \"\(categoryID)\" is no longer in the workspace config")
                .where("id", .equal, eventID)
                .run()
            return Outcome(processed: true, ended: .failed)
        }
        // The content is the same for every recipient: read it once per batch.
        let title = try event.decode(column: "title", as: String.self)
        let body = try event.decode(column: "body", as: String.self)
        let url = try event.decode(column: "url", as: String?.self)
        let data = try event.decode(column: "data", as: String?.self)
        let decodedData = data.flatMap(JSONValue.storedData)
        // From templates: the text in each language, rendered at intake; each recipient reads theirs.
        let variants = LocalizedContent(stored: try event.decode(column: "content_variants", as: String?.self))
        var rows = notificationRows()
        var batched = 0
        do {
            let users: [String: Recipient]
            if let topicUsers {
                users = topicUsers
            } else {
                users = try await userIDs(for: recipients, now: now, on: db)
            }
            let known = users.values.filter { !$0.isNew }.map(\.id)
            let preferences = try await preferenceSets(of: known, tenant: tenant, on: sql)
            let devices = try await devices.deliverableDevices(of: known, on: sql)
            var skips: [String: [SkipReason: Int]] = [:]
            // Each recipient's skips, when an endpoint wants to hear of them.
            let reportsSkips = statusEvents?.wants(.messageSkipped) == true
            var skipped: [(user: String, channel: String, reason: SkipReason)] = []
            var externalIDs: [UUID: String] = [:]
            // First what each recipient gets by the rule, then the throttle, then the rows.
            var plans: [Plan] = []
            for recipient in recipients {
                guard let user = users[recipient] else { continue }
                // A calendar rule is read in the recipient's own time zone (UTC when Belfry does not know it).
                let due =
                    calendar.flatMap { $0.nextDate(after: acceptedAt, in: user.timeZone ?? .gmt) }.map { max($0, now) }
                    ?? now
                // A tenant that names its apps reaches only devices of those apps.
                let userDevices = (devices[user.id] ?? []).filter { tenantDefinition?.allows(app: $0.app) ?? true }
                // Counted straight into the event's skips, or first per recipient when reported.
                var own: [String: [SkipReason: Int]] = [:]
                let delivering =
                    reportsSkips
                    ? channels(
                        of: category, for: user, tenant: tenant, stored: preferences[user.id] ?? [:],
                        devices: userDevices, skips: &own)
                    : channels(
                        of: category, for: user, tenant: tenant, stored: preferences[user.id] ?? [:],
                        devices: userDevices, skips: &skips)
                if reportsSkips {
                    externalIDs[user.id] = recipient
                    for (channel, reasons) in own {
                        for (reason, count) in reasons {
                            skips[channel, default: [:]][reason, default: 0] += count
                            skipped.append((recipient, channel, reason))
                        }
                    }
                }
                if !delivering.isEmpty {
                    plans.append(Plan(user: user, due: due, delivering: delivering, devices: userDevices))
                }
            }
            if let rule = category.batch {
                // A digest: the event joins each user's open batch; the batch's one notification
                // meets the throttle and goes out when the batch closes.
                let item = BatchItem(
                    eventID: eventID, title: title, body: body, url: url, data: data,
                    key: BatchItem.keyValue(rule.key, in: decodedData))
                try await addToBatches(
                    item, of: category, tenant: tenant, rule: rule, plans: plans, variants: variants, now: now, on: db)
                batched = plans.count
            } else {
                let before = reportsSkips ? plans : []
                try await throttle(&plans, category: category, now: now, skips: &skips, on: db)
                for (old, new) in zip(before, plans) where old.delivering.count != new.delivering.count {
                    let kept = Set(new.delivering.map(\.id))
                    for channel in old.delivering where !kept.contains(channel.id) {
                        skipped.append((externalIDs[old.user.id] ?? "", channel.id, .throttled))
                    }
                }
                let literal = NotificationRows.Content(
                    eventID: eventID, category: category, tenant: tenant, title: title, body: body, url: url,
                    data: data, decodedData: decodedData)
                var picker = variants.map(LocalizedContent.Picker.init)
                for plan in plans {
                    var content = literal
                    if let (tag, text) = picker?.variant(for: plan.user.locale) {
                        content.title = text.title
                        content.body = text.body
                        content.url = text.url
                        content.pushTitle = text.pushTitle
                        content.pushBody = text.pushBody
                        content.locale = tag
                    }
                    rows.add(
                        content, for: plan.user, due: plan.due, delivering: plan.delivering, devices: plan.devices,
                        now: now, isFollowed: isFollowed)
                }
                try await rows.insert(storage: storage, on: db)
                try await statusEvents?.queue(rows.statusEvents, on: db)
            }
            try await EventSkips.add(skips, event: eventID, on: sql)
            if let statusEvents, !skipped.isEmpty {
                let common: [String: JSONValue] = [
                    "event": .string(eventID.uuidString.lowercased()), "category": .string(category.id),
                    "tenant": .string(tenant),
                ]
                try await statusEvents.queue(
                    skipped.map { user, channel, reason in
                        StatusEvent(
                            type: .messageSkipped,
                            data: common.merging([
                                "user": .string(user), "channel": .string(channel), "reason": .string(reason.rawValue),
                            ]) { _, new in new })
                    }, on: db)
            }
        }
        let update = sql.update(Tables.events)
            .set("processed", to: cursor)
            .set("batched", to: SQLRaw("batched + \(batched)"))
            .set("state", to: (done ? EventStatus.FanoutState.done : .running).rawValue)
            .where("id", .equal, eventID)
        if topic != nil {
            update.set("topic_cursor", to: topicCursor)
            // A topic's audience is known once read to its end: the subscribers reached.
            if done { update.set("recipients", to: cursor) }
        }
        try await update.run()
        let fromCommand = try event.decode(column: "source", as: String?.self) == EventIntake.Source.command.rawValue
        return Outcome(
            processed: true, rows: rows, recipients: recipients.count, ended: done ? .done : nil,
            acceptedAt: acceptedAt,
            acceptedByCommand: fromCommand && processed == 0)
    }

    /// Rows for the notifications of a batch, reporting what the workspace's `webhooks` take.
    func notificationRows() -> NotificationRows {
        var rows = NotificationRows()
        rows.reportsQueued = statusEvents?.wants(.messageQueued) == true
        rows.reportsSent = statusEvents?.wants(.messageSent) == true
        return rows
    }

    /// What one recipient gets from an event: the user, when, and on which channels and devices.
    struct Plan {
        var user: Recipient
        var due: Date
        var delivering: [ChannelDefinition]
        var devices: [DeviceStore.Device]
    }

    /// The channels of `category` that reach `user` by the preference rule (and, for email, their
    /// address); the others are counted in `skips` by reason.
    func channels(
        of category: CategoryDefinition, for user: Recipient, tenant: String,
        stored: [PreferenceScope: PreferenceSelections], devices: [DeviceStore.Device],
        skips: inout [String: [SkipReason: Int]]
    ) -> [ChannelDefinition] {
        let resolved = ResolvedPreferences(
            config: workspace, userDefaults: stored[.userDefaults] ?? PreferenceSelections(),
            tenant: stored[.tenant(tenant)] ?? PreferenceSelections())
        let authorized = Set(
            workspace.channels.filter { channel in
                channel.kind.isPush && devices.contains { $0.platform.channelKind == channel.kind }
            }.map(\.id))
        var delivering: [ChannelDefinition] = []
        for (channelID, decision) in PreferenceRule.decisions(
            for: category, preferences: resolved, authorizedPushChannels: authorized)
        {
            guard let channel = workspace.channel(channelID) else { continue }
            switch decision {
            case .deliver where channel.kind == .email && !user.hasEmail:
                skips[channelID, default: [:]][.noAddress, default: 0] += 1
            case .deliver: delivering.append(channel)
            case .skip(let reason): skips[channelID, default: [:]][reason, default: 0] += 1
            }
        }
        return delivering
    }

    /// Past the category's limit, only the inbox: it keeps every notification.
    func throttle(
        _ plans: inout [Plan], category: CategoryDefinition, now: Date, skips: inout [String: [SkipReason: Int]],
        on db: any Database
    ) async throws {
        guard let rule = category.throttle else { return }
        let counted = plans.filter { $0.delivering.contains { $0.kind != .inbox } }.map(\.user.id)
        let admitted = try await Throttle.admit(
            counted, category: category.id, rule: rule, now: now, storage: storage, on: db)
        for index in plans.indices where !admitted.contains(plans[index].user.id) {
            for channel in plans[index].delivering where channel.kind != .inbox {
                skips[channel.id, default: [:]][.throttled, default: 0] += 1
            }
            plans[index].delivering.removeAll { $0.kind != .inbox }
        }
    }

    /// When a delivery due at `due` may first be attempted: quiet hours hold push channels
    /// (not the inbox or the others), except for categories that break through them.
    static func firstAttempt(
        on channel: ChannelDefinition, of category: CategoryDefinition, for user: Recipient, due: Date
    ) -> Date {
        guard channel.kind.isPush, QuietHours.apply(to: category), let quietHours = user.quietHours else { return due }
        return quietHours.release(of: due, userTimeZone: user.timeZone)
    }

    /// What fan-out needs to know of a recipient.
    struct Recipient: Sendable {
        var id: UUID
        /// The backend's id for them, as status events name users.
        var externalID = ""
        var timeZone: TimeZone? = nil
        /// Their language tag, for the content's variant.
        var locale: String? = nil
        var quietHours: QuietHours? = nil
        /// Whether email can reach them.
        var hasEmail = false
        /// Created by this batch: nothing stored about them yet.
        var isNew = false
    }

    /// Smaller than every user id: where a topic's first page starts.
    static let beforeEveryUser = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))

    /// The users' columns fan-out reads.
    static let recipientColumns = [
        "id", "external_id", "email", "time_zone", "locale", "quiet_start", "quiet_end", "quiet_time_zone",
    ]

    /// A user row (`recipientColumns`) as fan-out sees it.
    static func recipient(from row: any SQLRow) throws -> (externalID: String, recipient: Recipient) {
        var quietHours: QuietHours?
        if let start = try row.decode(column: "quiet_start", as: String?.self),
            let end = try row.decode(column: "quiet_end", as: String?.self)
        {
            quietHours = QuietHours(
                start: start, end: end, timeZone: try row.decode(column: "quiet_time_zone", as: String?.self))
        }
        return (
            try row.decode(column: "external_id", as: String.self),
            Recipient(
                id: try row.decode(column: "id", as: UUID.self),
                externalID: try row.decode(column: "external_id", as: String.self),
                timeZone: try row.decode(column: "time_zone", as: String?.self).flatMap(TimeZone.init(identifier:)),
                locale: try row.decode(column: "locale", as: String?.self),
                quietHours: quietHours,
                hasEmail: try row.decode(column: "email", as: String?.self).map(MailAddress.isValid) ?? false)
        )
    }

    /// These users (a page of a topic's subscribers), without the event's exclusions.
    static func topicUsers(_ ids: [UUID], event: UUID) -> SQLQueryString {
        let columns = recipientColumns.map { "users.\($0)" }.joined(separator: ", ")
        return """
            SELECT \(unsafeRaw: columns) FROM users
            WHERE users.id IN (\(binds: ids))
              AND NOT EXISTS (
                SELECT 1 FROM event_exclusions
                WHERE event_exclusions.event_id = \(bind: event) AND event_exclusions.external_id = users.external_id)
            """
    }

    /// The internal ids and time zones of these external ids, creating users Belfry does not know
    /// yet. Users created here are marked `isNew`: they have no preferences or devices to read.
    private func userIDs(
        for externalIDs: [String], now: Date, on db: any Database
    ) async throws
        -> [String: Recipient]
    {
        let sql = db.sql
        func lookup(_ externalIDs: [String]) async throws -> [String: Recipient] {
            var found: [String: Recipient] = [:]
            for row in try await sql.select().columns(Self.recipientColumns.map { SQLColumn($0) })
                .from(UserModel.schema).where("external_id", .in, externalIDs).all()
            {
                let (externalID, recipient) = try Self.recipient(from: row)
                found[externalID] = recipient
            }
            return found
        }
        var found = try await lookup(externalIDs)
        // Sorted, so two instances creating the same users take their locks in the same order.
        let missing = externalIDs.filter { found[$0] == nil }.sorted()
        guard !missing.isEmpty else { return found }
        var created: [String: UUID] = [:]
        var rows: [[BulkValue]] = []
        var randomness = IDRandomness()
        for externalID in missing {
            let id = UUID.timeOrdered(at: now, using: &randomness)
            created[externalID] = id
            rows.append([.id(id), .text(externalID), .date(now), .date(now)])
        }
        // Only the rows inserted come back: a user another instance created meanwhile is read below.
        let inserted = try await storage.insert(
            into: UserModel.schema, columns: ["id", "external_id", "created_at", "updated_at"], rows: rows,
            rowsPerStatement: 500, ignoringConflictsOn: ["external_id"], returning: ["external_id"], on: db)
        for row in inserted {
            let externalID = try row.decode(column: "external_id", as: String.self)
            if let id = created[externalID] {
                found[externalID] = Recipient(id: id, externalID: externalID, isNew: true)
            }
        }
        let raced = missing.filter { found[$0] == nil }
        if !raced.isEmpty { found.merge(try await lookup(raced)) { first, _ in first } }
        return found
    }

    /// Each user's stored selections for the user's defaults and the event's tenant.
    func preferenceSets(
        of users: [UUID], tenant: String, on sql: any SQLDatabase
    ) async throws
        -> [UUID: [PreferenceScope: PreferenceSelections]]
    {
        guard !users.isEmpty else { return [:] }
        let scopes: [PreferenceScope] = [.userDefaults, .tenant(tenant)]
        var sets: [UUID: [PreferenceScope: PreferenceSelections]] = [:]
        for row in try await sql.select().columns("user_id", "scope", "selections").from(PreferenceSetModel.schema)
            .where("user_id", .in, users).where("scope", .in, scopes.map(\.key)).all()
        {
            let key = try row.decode(column: "scope", as: String.self)
            guard let scope = scopes.first(where: { $0.key == key }) else { continue }
            sets[try row.decode(column: "user_id", as: UUID.self), default: [:]][scope] = try PreferenceStore.decode(
                try row.decode(column: "selections", as: String.self))
        }
        return sets
    }
}
