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
    /// This instance's queue, offered each batch's deliveries due now once they are committed.
    var offers: (any DeliveryOffers)? = nil
    static let batchSize = 500
    /// A big event's recipients per batch on PostgreSQL. A batch is a dozen round trips to the
    /// server whatever its size, and fan-out of one event goes a batch at a time, so there it
    /// sets the pace of the deliveries behind it (2 000 against 500: webhook deliveries of one
    /// 20 000-recipient event 0.059–0.067 → 0.066–0.070 of h2load). On SQLite a batch holds the
    /// one writer that intake waits for, so it stays at `batchSize`.
    static let postgresPageSize = 2000
    static let eventsPerBatch = 32
    /// Small events a batch takes together on PostgreSQL, where each statement costs the server
    /// a parse and a plan whatever its rows.
    static let postgresEventsPerBatch = 128
    /// Recipients a batch takes on this database: a big event's page, or small events' together.
    private var pageSize: Int { storage.kind == .postgres ? Self.postgresPageSize : Self.batchSize }
    /// A big event's first page on this database: an eighth of a whole one.
    private var firstPageSize: Int { pageSize / 8 }

    /// Recipients the next page of an event to `total` takes once `processed` are done. An event
    /// that fits in one `whole` page takes it at once. A bigger one's pages take as many as are
    /// done already, from `first` up: nothing of an event is sent before its first page
    /// commits, and the queue sends each page while the next is written, so the pages grow from
    /// one the queue waits little for (an event to 20 000 recipients on PostgreSQL starts with
    /// 250, not 2 000: BENCHMARKS.md).
    static func pageLimit(processed: Int, total: Int, first: Int, whole: Int) -> Int {
        total <= whole ? whole : min(whole, max(first, processed))
    }

    /// Small events a batch takes together on this database.
    private var eventsPerGroup: Int {
        storage.kind == .postgres ? Self.postgresEventsPerBatch : Self.eventsPerBatch
    }
    /// Fan-out loops per process on PostgreSQL.
    static let postgresWorkers = 4
    /// Whether this loop takes the events of digest categories. A digest's items keep the
    /// order their events came in, counted as they join; with several loops each taking the
    /// first event no other holds, the second of two events close together could join first
    /// (and take the last place a digest keeps). So on PostgreSQL only the first loop of each
    /// process takes them, one after another.
    var takesDigests = true
    /// Failed batches after which an event stops being retried. Retries back off (5 s, 10 s, …),
    /// so the last one comes about 20 minutes after the first failure: long enough to ride out a
    /// passing database problem, short enough that a broken event is reported.
    static let maxFailures = 8

    /// Processes the most overdue events in one transaction. The first goes alone when it is
    /// big (a topic's, a digest's, one already begun, or more recipients than a batch), a page
    /// of its recipients at a time. Otherwise the small events due next, up to `eventsPerBatch`
    /// and `batchSize` recipients, go together: one read each of their recipients, users,
    /// preferences and devices, one insert of all their rows and one update of the events, so
    /// that a stream of one-recipient events costs a few statements a batch, not a dozen an
    /// event. A batch that fails rolls back; one of several events is then tried alone, so that
    /// only the event at fault fails. That one waits (behind the others) before it is tried
    /// again; after `maxFailures` it is marked `failed` with its error.
    /// - Returns: whether there was an event to work on.
    func processBatch(on db: any Database) async throws -> Bool {
        for alone in [false, true] {
            let picked = NIOLockedValueBox<Picked?>(nil)
            let reserved = NIOLockedValueBox<[OfferReservation]>([])
            do {
                // A plan ahead that fails leaves the work to the writer, which finds the event at
                // fault (and a database out of reach fails there too).
                let ahead = alone ? nil : try? await planAhead(on: db)
                let outcomes = try await storage.write(db) { tx in
                    // SQLite's group commit runs the work again alone when another write of
                    // its group fails: what an earlier run reserved was never written.
                    self.cancel(reserved)
                    if let ahead, let outcomes = try await self.write(ahead, picked: picked, reserved: reserved, on: tx)
                    {
                        return outcomes
                    }
                    return try await self.fanOut(alone: alone, picked: picked, reserved: reserved, on: tx)
                }
                await committed(outcomes, on: db)
                return !outcomes.isEmpty
            } catch {
                // Rolled back (or not known to have committed): the queue's room goes back. Rows
                // that did commit are claimed by this worker, and return when their lease ends.
                cancel(reserved)
                guard let picked = picked.withLockedValue({ $0 }) else { throw error }
                if picked.events > 1 { continue }
                if try await recordFailure(of: picked.first, error: error.operatorDescription, on: db) {
                    metrics.event(EventStatus.FanoutState.failed.rawValue)
                }
                return true
            }
        }
        preconditionFailure("a batch of one event returns or records its failure")
    }

    /// Gives the queue back the room of reservations whose rows were not written.
    private func cancel(_ reserved: NIOLockedValueBox<[OfferReservation]>) {
        let reservations = reserved.withLockedValue { reserved in
            defer { reserved = [] }; return reserved
        }
        for reservation in reservations { offers?.cancel(reservation) }
    }

    /// The first event a batch took, and how many it took.
    private struct Picked: Sendable {
        var first: UUID
        var events: Int
    }

    /// One transaction's work: the most overdue event, then either the small events due after
    /// it together with it, or it alone, followed (once it ends within its batch) by the next
    /// due events one by one, in their order (a digest's items keep the order their events came
    /// in). Events are locked as they are taken, not before: one worker on a big event holds no
    /// others from the rest.
    private func fanOut(
        alone: Bool, picked: NIOLockedValueBox<Picked?>, reserved: NIOLockedValueBox<[OfferReservation]>,
        on db: any Database
    ) async throws -> [Outcome] {
        let now = now()
        // SQLite locks no rows: the events that may join the first are read with it, one read
        // where PostgreSQL, which locks each row read until the batch ends, needs two.
        let firstRead = storage.kind == .postgres ? 1 : eventsPerGroup
        let due = try await dueEvents(limit: firstRead, now: now, picked: picked, on: db)
        guard let first = due.first else { return [] }
        if !alone, groupSize(of: first) != nil {
            let next =
                firstRead > 1
                ? Array(due.dropFirst())
                : try await dueEvents(limit: eventsPerGroup - 1, after: first.id, now: now, picked: nil, on: db)
            let group = self.group(first, next)
            picked.withLockedValue { $0 = Picked(first: first.id, events: group.count) }
            return try await together(group, now: now, reserved: reserved, on: db)
        }
        var outcomes: [Outcome] = []
        var recipients = 0
        var event: DueEvent? = first
        while let current = event {
            picked.withLockedValue { $0 = Picked(first: first.id, events: outcomes.count + 1) }
            let outcome = try await single(current, now: now, reserved: reserved, on: db)
            outcomes.append(outcome)
            recipients += outcome.recipients
            guard !alone, outcome.ended != nil, outcomes.count < Self.eventsPerBatch, recipients < Self.batchSize
            else { break }
            event = try await dueEvents(limit: 1, now: now, picked: nil, on: db).first
        }
        return outcomes
    }

    /// `first`, a small event, and those of `next` that fit beside it in a batch, in order.
    private func group(_ first: DueEvent, _ next: [DueEvent]) -> [DueEvent] {
        var group = [first]
        var room = pageSize - (groupSize(of: first) ?? pageSize)
        for event in next {
            guard let size = groupSize(of: event), size <= room else { break }
            group.append(event)
            room -= size
        }
        return group
    }

    /// Small events due together, read and planned before the write (`planAhead`).
    private struct Ahead: Sendable {
        var events: [DueEvent]
        var plan: TogetherPlan
    }

    /// On SQLite, the group of small events due first, read and planned on a reader's
    /// connection before the write, so that the one writer, which intake waits for too, only
    /// writes it. Nil (the writer reads and plans, as on PostgreSQL) when the first due event
    /// goes alone, a category of the group throttles (its counts are the writer's to keep), or a
    /// recipient is new (the writer creates the user). Preferences and devices are as they were
    /// read: one changed in the few milliseconds before the write counts from the next event,
    /// as on PostgreSQL, where each of a batch's reads sees what had committed when it ran.
    private func planAhead(on db: any Database) async throws -> Ahead? {
        guard storage.kind == .sqlite else { return nil }
        let now = now()
        let due = try await dueEvents(limit: eventsPerGroup, now: now, picked: nil, on: db)
        guard let first = due.first, groupSize(of: first) != nil else { return nil }
        let group = self.group(first, Array(due.dropFirst()))
        guard group.allSatisfy({ workspace.category($0.categoryID)?.throttle == nil }),
            let plan = try await planTogether(group, now: now, creatingUsers: false, on: db)
        else { return nil }
        return Ahead(events: group, plan: plan)
    }

    /// Writes a group planned ahead, in the writer's transaction; nil, writing nothing, when one
    /// of its events is no longer open and unbegun (taken meanwhile by another process on the
    /// same file) or one of its users is gone (erased meanwhile: nothing of theirs may be
    /// written). The events are `picked` only then, so that a failure of the database before
    /// them (no session, the lock busy) is not taken for theirs.
    private func write(
        _ ahead: Ahead, picked: NIOLockedValueBox<Picked?>, reserved: NIOLockedValueBox<[OfferReservation]>,
        on db: any Database
    ) async throws -> [Outcome]? {
        let ids = ahead.events.map(\.id)
        let open = try await db.sql.select().column("id").from(Tables.events).where("id", .in, ids)
            .where(SQLRaw(Self.open)).where("processed", .equal, 0).all()
        guard open.count == ids.count else { return nil }
        let users = try await db.sql.select().column("id").from(UserModel.schema)
            .where("id", .in, ahead.plan.users).all()
        guard users.count == ahead.plan.users.count else { return nil }
        picked.withLockedValue { $0 = Picked(first: ids[0], events: ids.count) }
        return try await writeTogether(ahead.events, ahead.plan, reserved: reserved, on: db)
    }

    /// The recipients an event brings to a batch of several, or `nil` when it goes alone.
    private func groupSize(of event: DueEvent) -> Int? {
        guard event.topic == nil, event.processed == 0, event.total <= Self.batchSize,
            let category = workspace.category(event.categoryID), category.batch == nil
        else { return nil }
        return event.total
    }

    /// What follows a commit of a batch's outcomes, never before it: the queue woken, the
    /// streams told of the new notifications (in one message to other instances), the metrics
    /// counted.
    func committed(_ outcomes: [Outcome], on db: any Database) async {
        for outcome in outcomes {
            // Offered first: a claim the wake starts asks only for the slots the offer left. Those
            // the queue took before the write are written claimed; the others wait for a claim.
            if let reservation = outcome.rows.reservation {
                offers?.offer(reservation)
            } else if !outcome.rows.offered.isEmpty {
                offers?.offer(outcome.rows.offered)
            }
        }
        if outcomes.contains(where: { $0.rows.queued > 0 }) { wakeDeliveries() }
        await NotificationRows.publish(outcomes.map(\.rows), to: events, on: db)
        for outcome in outcomes { count(outcome) }
    }

    private func count(_ outcome: Outcome) {
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

    /// An event due for fan-out, as a batch reads it.
    struct DueEvent: Sendable {
        static let columns = [
            "id", "category", "tenant", "title", "body", "url", "data", "calendar_rule", "created_at", "recipients",
            "processed", "topic", "topic_cursor", "source", "content_variants", "image_url", "ttl_seconds",
            "content_available",
        ]

        var id: UUID
        var categoryID: String
        var tenant: String
        var title: String
        var body: String
        var url: String?
        var data: String?
        var calendar: CalendarRule?
        /// When the event was accepted: its inbox items' latency runs from then.
        var acceptedAt: Date
        /// Its recipients: for a topic, its subscribers when it was accepted until it is done.
        var total: Int
        /// Recipients already fanned out (positions below it, for an event's own list).
        var processed: Int
        var topic: String?
        var topicCursor: UUID?
        var fromCommand: Bool
        /// From templates: the text in each language, rendered at intake; each recipient reads theirs.
        var variants: LocalizedContent?
        /// What else its deliveries carry: the image, the time to live, a background push.
        var extras: NotificationRows.EventExtras

        init(row: DirectRow) throws {
            id = try row.decode(column: "id", as: UUID.self)
            categoryID = try row.decode(column: "category", as: String.self)
            tenant = try row.decode(column: "tenant", as: String.self)
            title = try row.decode(column: "title", as: String.self)
            body = try row.decode(column: "body", as: String.self)
            url = try row.decode(column: "url", as: String?.self)
            data = try row.decode(column: "data", as: String?.self)
            calendar = try row.decode(column: "calendar_rule", as: String?.self).map {
                try JSONDecoder().decode(CalendarRule.self, from: Data($0.utf8))
            }
            acceptedAt = try row.decode(column: "created_at", as: Date.self)
            total = try row.decode(column: "recipients", as: Int.self)
            processed = try row.decode(column: "processed", as: Int.self)
            topic = try row.decode(column: "topic", as: String?.self)
            topicCursor = try row.decode(column: "topic_cursor", as: UUID?.self)
            fromCommand = try row.decode(column: "source", as: String?.self) == EventIntake.Source.command.rawValue
            variants = LocalizedContent(stored: try row.decode(column: "content_variants", as: String?.self))
            extras = NotificationRows.EventExtras(
                imageURL: try row.decode(column: "image_url", as: String?.self),
                ttlSeconds: try row.decode(column: "ttl_seconds", as: Int?.self),
                contentAvailable: try row.decode(column: "content_available", as: Bool?.self), acceptedAt: acceptedAt)
        }
    }

    /// Events fan-out has yet to finish.
    static let open =
        "\"state\" IN ('\(EventStatus.FanoutState.pending.rawValue)', '\(EventStatus.FanoutState.running.rawValue)')"

    /// `DueEvent.columns`, quoted and listed once: SQLKit quoting each name anew for each batch
    /// showed in the intake benchmark's profile, where a batch is an event or two.
    private static let dueColumns = SQLRaw(DueEvent.columns.map { "\"\($0)\"" }.joined(separator: ", "))

    /// The most overdue events (after `first`, when given), locked for this transaction
    /// (skipping those other workers hold). A row that cannot be read ends the list there; when
    /// it is the first, it is the batch's event (`picked`), which fails with that error.
    private func dueEvents(
        limit: Int, after first: UUID? = nil, now: Date, picked: NIOLockedValueBox<Picked?>?, on db: any Database
    ) async throws -> [DueEvent] {
        let due = db.sql.select()
            .column(Self.dueColumns)
            .from(Tables.events)
            // As literals: PostgreSQL's index of open events (`events_open`) names them so.
            .where(SQLRaw(Self.open))
            .where("not_before", .lessThanOrEqual, now)
            .orderBy("not_before")
            .limit(limit)
        if let first { due.where("id", .notEqual, first) }
        if !takesDigests {
            let digests = workspace.categories.filter { $0.batch != nil }.map(\.id)
            if !digests.isEmpty { due.where("category", .notIn, digests) }
        }
        var events: [DueEvent] = []
        for row in try await storage.rows(storage.lockingSkipLocked(due).query, on: db.sql) {
            do {
                events.append(try DueEvent(row: row))
            } catch {
                guard events.isEmpty, let picked, let id = try? row.decode(column: "id", as: UUID.self) else { break }
                picked.withLockedValue { $0 = Picked(first: id, events: 1) }
                throw error
            }
        }
        return events
    }

    /// A page of one event's recipients, its rows and the event's progress.
    private func single(
        _ event: DueEvent, now: Date, reserved: NIOLockedValueBox<[OfferReservation]>, on db: any Database
    ) async throws -> Outcome {
        let sql = db.sql
        let limit = Self.pageLimit(
            processed: event.processed, total: event.total, first: firstPageSize, whole: pageSize)
        // The audience, a page at a time: the event's own list by position, or a topic's
        // subscribers (with the users they are) by user id.
        var recipients: [String]
        var topicUsers: [String: Recipient]?
        var topicCursor: UUID?
        let cursor: Int
        let done: Bool
        if let topic = event.topic {
            let after = event.topicCursor ?? Self.beforeEveryUser
            // The page first, in the order of the topic's index; then its users, without the
            // event's exclusions. (One query joining the two let PostgreSQL sort all the
            // subscribers for every page.)
            let ids = try await sql.select().column("user_id").from(Tables.topicSubscriptions)
                .where("topic", .equal, topic).where("user_id", .greaterThan, after)
                .orderBy("user_id").limit(limit).all()
                .map { try $0.decode(column: "user_id", as: UUID.self) }
            let page =
                ids.isEmpty
                ? [] : try await storage.rows(Self.topicUsers(ids, event: event.id), on: sql).map(Self.recipient(from:))
            recipients = page.map(\.externalID)
            topicUsers = Dictionary(page.map { ($0.externalID, $0.recipient) }) { first, _ in first }
            topicCursor = ids.last ?? after
            cursor = event.processed + page.count
            done = ids.count < limit
        } else {
            let page = sql.select().columns("position", "external_id").from(Tables.eventRecipients)
                .where("event_id", .equal, event.id).where("position", .greaterThanOrEqual, event.processed)
                .orderBy("position").limit(limit)
            let rows = try await storage.rows(page.query, on: sql)
            recipients = try rows.map { try $0.decode(column: "external_id", as: String.self) }
            // Positions below the cursor are done. They are dense unless a user was erased since
            // (their rows go with them), so the cursor follows the last position read.
            cursor = try rows.last.map { try $0.decode(column: "position", as: Int.self) + 1 } ?? event.total
            done = cursor >= event.total || recipients.isEmpty
        }

        guard let category = workspace.category(event.categoryID) else {
            // The workspace no longer has this category: say so on the event rather than drop it.
            try await sql.update(Tables.events)
                .set("state", to: EventStatus.FanoutState.failed.rawValue)
                .set("last_error", to: "category \"\(event.categoryID)\" is no longer in the workspace config")
                .where("id", .equal, event.id)
                .run()
            return Outcome(processed: true, ended: .failed)
        }
        let users: [String: Recipient]
        if let topicUsers {
            users = topicUsers
        } else {
            users = try await userIDs(for: recipients, now: now, on: db)
        }
        let planned = try await write(
            [
                try await plan(
                    event, category: category, recipients: recipients,
                    audience: try await audience(users, tenants: [event.tenant], on: sql), now: now, on: db)
            ], reserved: reserved, on: db)[0]
        let update = sql.update(Tables.events)
            .set("processed", to: cursor)
            .set("batched", to: SQLRaw("batched + \(planned.batched)"))
            .set("state", to: (done ? EventStatus.FanoutState.done : .running).rawValue)
            .where("id", .equal, event.id)
        if event.topic != nil {
            update.set("topic_cursor", to: topicCursor)
            // A topic's audience is known once read to its end: the subscribers reached.
            if done { update.set("recipients", to: cursor) }
        }
        try await update.run()
        return Outcome(
            processed: true, rows: planned.rows, recipients: recipients.count, ended: done ? .done : nil,
            acceptedAt: event.acceptedAt, acceptedByCommand: event.fromCommand && event.processed == 0)
    }

    /// Small events whole, together: each read and write once for all of them.
    private func together(
        _ events: [DueEvent], now: Date, reserved: NIOLockedValueBox<[OfferReservation]>, on db: any Database
    ) async throws -> [Outcome] {
        guard let plan = try await planTogether(events, now: now, creatingUsers: true, on: db) else {
            preconditionFailure("a plan that may create users is always made")
        }
        return try await writeTogether(events, plan, reserved: reserved, on: db)
    }

    /// What small events' recipients get: each event's list, and what was planned for it.
    private struct TogetherPlan: Sendable {
        var lists: [UUID: [String]]
        var planned: [Planned]
        /// The recipients' users, as they were read.
        var users: [UUID]
    }

    /// Reads small events' recipients, users, preferences and devices, once for all of them,
    /// and applies the rule. Nil when `creatingUsers` is false and a recipient is not a user yet.
    private func planTogether(
        _ events: [DueEvent], now: Date, creatingUsers: Bool, on db: any Database
    ) async throws -> TogetherPlan? {
        let sql = db.sql
        var lists: [UUID: [String]] = [:]
        let listed = sql.select().columns("event_id", "external_id").from(Tables.eventRecipients)
            .where("event_id", .in, events.map(\.id)).orderBy("event_id").orderBy("position")
        for row in try await storage.rows(listed.query, on: sql) {
            lists[try row.decode(column: "event_id", as: UUID.self), default: []].append(
                try row.decode(column: "external_id", as: String.self))
        }
        let externalIDs = Array(Set(lists.values.joined()))
        let users: [String: Recipient]
        if creatingUsers {
            users = try await userIDs(for: externalIDs, now: now, on: db)
        } else {
            users = try await knownUsers(externalIDs, on: sql)
            guard users.count == externalIDs.count else { return nil }
        }
        let audience = try await audience(users, tenants: Array(Set(events.map(\.tenant))), on: sql)
        var planned: [Planned] = []
        for event in events {
            guard let category = workspace.category(event.categoryID) else {
                preconditionFailure("only events of a category in the workspace are taken together")
            }
            planned.append(
                try await plan(
                    event, category: category, recipients: lists[event.id] ?? [], audience: audience, now: now,
                    on: db))
        }
        return TogetherPlan(lists: lists, planned: planned, users: users.values.map(\.id))
    }

    /// Writes what was planned for small events, and ends them.
    private func writeTogether(
        _ events: [DueEvent], _ plan: TogetherPlan, reserved: NIOLockedValueBox<[OfferReservation]>,
        on db: any Database
    ) async throws -> [Outcome] {
        let planned = try await write(plan.planned, reserved: reserved, skipsInEvents: true, on: db)
        // Each is done: every recipient of its list was read. Its skips go in its row.
        let update = db.sql.update(Tables.events)
            .set("processed", to: SQLColumn("recipients"))
            .set("state", to: EventStatus.FanoutState.done.rawValue)
            .where("id", .in, events.map(\.id))
        if let skips = EventSkips.columnUpdate(planned.map { ($0.event, $0.skips) }) { update.set("skips", to: skips) }
        try await update.run()
        return zip(events, planned).map { event, planned in
            Outcome(
                processed: true, rows: planned.rows, recipients: plan.lists[event.id]?.count ?? 0, ended: .done,
                acceptedAt: event.acceptedAt, acceptedByCommand: event.fromCommand)
        }
    }

    /// The recipients of a batch as the rule reads them: the users, their stored preferences
    /// for the user's defaults and the events' tenants, and their devices that can take a push.
    private struct Audience {
        var users: [String: Recipient]
        var preferences: [UUID: [PreferenceScope: PreferenceSelections]]
        var devices: [UUID: [DeviceStore.Device]]
    }

    /// Reads what the rule needs of `users`; those created by this batch have nothing stored.
    private func audience(
        _ users: [String: Recipient], tenants: [String], on sql: any SQLDatabase
    ) async throws
        -> Audience
    {
        let known = users.values.filter { !$0.isNew }.map(\.id)
        return Audience(
            users: users, preferences: try await preferenceSets(of: known, tenants: tenants, on: sql),
            devices: try await devices.deliverableDevices(of: known, on: sql))
    }

    /// What one event's recipients get, before it is written.
    private struct Planned {
        var event: UUID
        /// The notifications and deliveries (none for a digest: its items joined the users' batches).
        var rows: NotificationRows
        /// Channels left out, by channel and reason, for the event's counts.
        var skips: [String: [SkipReason: Int]] = [:]
        /// Each recipient's skips, when an endpoint wants to hear of them (`message.skipped`).
        var skipped: [StatusEvent] = []
        /// Recipients whose item joined a digest.
        var batched = 0
    }

    /// Applies the rule to each recipient, then the throttle, and builds the rows; a digest's
    /// items join the users' open batches here.
    private func plan(
        _ event: DueEvent, category: CategoryDefinition, recipients: [String], audience: Audience, now: Date,
        on db: any Database
    ) async throws -> Planned {
        let decodedData = event.data.flatMap(JSONValue.storedData)
        var planned = Planned(event: event.id, rows: notificationRows())
        // Each recipient's skips, when an endpoint wants to hear of them.
        var report = SkipReport(enabled: statusEvents?.wants(.messageSkipped) == true)
        // First what each recipient gets by the rule, then the throttle, then the rows.
        var plans = ruled(
            event, category: category, recipients: recipients, audience: audience, now: now,
            skips: &planned.skips, report: &report)
        if let rule = category.batch {
            // A digest: the event joins each user's open batch; the batch's one notification
            // meets the throttle and goes out when the batch closes.
            let item = BatchItem(
                eventID: event.id, title: event.title, body: event.body, url: event.url, data: event.data,
                key: BatchItem.keyValue(rule.key, in: decodedData))
            try await addToBatches(
                item, of: category, tenant: event.tenant, rule: rule, plans: plans, variants: event.variants, now: now,
                on: db)
            planned.batched = plans.count
        } else {
            let before = report.enabled ? plans : []
            try await throttle(&plans, category: category, now: now, skips: &planned.skips, on: db)
            for (old, new) in zip(before, plans) where old.delivering.count != new.delivering.count {
                let kept = Set(new.delivering.map(\.id))
                for channel in old.delivering where !kept.contains(channel.id) {
                    report.entries.append((report.externalIDs[old.user.id] ?? "", channel.id, .throttled))
                }
            }
            let literal = NotificationRows.Content(
                eventID: event.id, category: category, tenant: event.tenant, title: event.title, body: event.body,
                url: event.url, data: event.data, decodedData: decodedData, extras: event.extras)
            var picker = event.variants.map(LocalizedContent.Picker.init)
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
                planned.rows.add(
                    content, for: plan.user, due: plan.due, delivering: plan.delivering, devices: plan.devices,
                    now: now, isFollowed: isFollowed)
            }
        }
        planned.skipped = report.statusEvents(event: event.id, category: category.id, tenant: event.tenant)
        return planned
    }

    /// The skips of each recipient, kept when an endpoint wants to hear of them.
    private struct SkipReport {
        var enabled: Bool
        var externalIDs: [UUID: String] = [:]
        var entries: [(user: String, channel: String, reason: SkipReason)] = []

        /// `message.skipped`, one per recipient and channel left out.
        func statusEvents(event: UUID, category: String, tenant: String) -> [StatusEvent] {
            let common: [String: JSONValue] = [
                "event": .string(event.uuidString.lowercased()), "category": .string(category),
                "tenant": .string(tenant),
            ]
            return entries.map { user, channel, reason in
                StatusEvent(
                    type: .messageSkipped,
                    data: common.merging([
                        "user": .string(user), "channel": .string(channel), "reason": .string(reason.rawValue),
                    ]) { _, new in new })
            }
        }
    }

    /// What each recipient gets by the category's rule, their preferences and devices: the
    /// channels left out are counted in `skips`, and in `report` when it is on.
    private func ruled(
        _ event: DueEvent, category: CategoryDefinition, recipients: [String], audience: Audience, now: Date,
        skips: inout [String: [SkipReason: Int]], report: inout SkipReport
    ) -> [Plan] {
        let tenantDefinition = workspace.tenant(event.tenant)
        var plans: [Plan] = []
        for recipient in recipients {
            guard let user = audience.users[recipient] else { continue }
            // A calendar rule is read in the recipient's own time zone (UTC when Belfry does not know it).
            let due =
                event.calendar.flatMap { $0.nextDate(after: event.acceptedAt, in: user.timeZone ?? .gmt) }.map {
                    max($0, now)
                } ?? now
            // A tenant that names its apps reaches only devices of those apps.
            let userDevices = (audience.devices[user.id] ?? []).filter {
                tenantDefinition?.allows(app: $0.app) ?? true
            }
            // Counted straight into the event's skips, or first per recipient when reported.
            var own: [String: [SkipReason: Int]] = [:]
            let delivering =
                report.enabled
                ? channels(
                    of: category, for: user, tenant: event.tenant, stored: audience.preferences[user.id] ?? [:],
                    devices: userDevices, skips: &own)
                : channels(
                    of: category, for: user, tenant: event.tenant, stored: audience.preferences[user.id] ?? [:],
                    devices: userDevices, skips: &skips)
            if report.enabled {
                report.externalIDs[user.id] = recipient
                for (channel, reasons) in own {
                    for (reason, count) in reasons {
                        skips[channel, default: [:]][reason, default: 0] += count
                        report.entries.append((recipient, channel, reason))
                    }
                }
            }
            if !delivering.isEmpty {
                plans.append(Plan(user: user, due: due, delivering: delivering, devices: userDevices))
            }
        }
        return plans
    }

    /// Writes what was planned for one or more events: their rows, reports and skips (unless
    /// `skipsInEvents`: the caller writes them in the events' rows). The queue takes what it
    /// has room for of the offered deliveries first (`reserved`, to give back should the
    /// transaction fail), and they are written claimed by it.
    /// - Returns: what was written.
    private func write(
        _ planned: [Planned], reserved: NIOLockedValueBox<[OfferReservation]>, skipsInEvents: Bool = false,
        on db: any Database
    ) async throws -> [Planned] {
        var planned = planned
        if let offers {
            for index in planned.indices where !planned[index].rows.offered.isEmpty {
                guard let reservation = offers.reserve(planned[index].rows.offered) else { break }
                reserved.withLockedValue { $0.append(reservation) }
                planned[index].rows.claim(reservation)
            }
        }
        try await NotificationRows.insert(planned.map(\.rows), storage: storage, on: db)
        try await statusEvents?.queue(planned.flatMap { $0.rows.statusEvents + $0.skipped }, on: db)
        if !skipsInEvents {
            try await EventSkips.add(
                Dictionary(planned.map { ($0.event, $0.skips) }) { first, _ in first }, storage: storage, on: db)
        }
        return planned
    }

    /// Rows for the notifications of a batch, reporting what the workspace's `webhooks` take.
    func notificationRows() -> NotificationRows {
        var rows = NotificationRows()
        rows.reportsQueued = statusEvents?.wants(.messageQueued) == true
        rows.reportsSent = statusEvents?.wants(.messageSent) == true
        rows.offers = offers?.takesOffers == true
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
    static func recipient(from row: DirectRow) throws -> (externalID: String, recipient: Recipient) {
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
        var found = try await knownUsers(externalIDs, on: db.sql)
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
        if !raced.isEmpty { found.merge(try await knownUsers(raced, on: db.sql)) { first, _ in first } }
        return found
    }

    /// The users of these external ids that Belfry knows.
    private func knownUsers(_ externalIDs: [String], on sql: any SQLDatabase) async throws -> [String: Recipient] {
        var found: [String: Recipient] = [:]
        let select = sql.select().columns(Self.recipientColumns.map { SQLColumn($0) })
            .from(UserModel.schema).where("external_id", .in, externalIDs)
        for row in try await storage.rows(select.query, on: sql) {
            let (externalID, recipient) = try Self.recipient(from: row)
            found[externalID] = recipient
        }
        return found
    }

    /// Each user's stored selections for the user's defaults and these tenants.
    func preferenceSets(
        of users: [UUID], tenants: [String], on sql: any SQLDatabase
    ) async throws
        -> [UUID: [PreferenceScope: PreferenceSelections]]
    {
        guard !users.isEmpty else { return [:] }
        let scopes: [PreferenceScope] = [.userDefaults] + tenants.map(PreferenceScope.tenant)
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
