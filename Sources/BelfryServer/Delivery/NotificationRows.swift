import BelfryCore
import Fluent
import Foundation
import SQLKit

/// The rows one transaction writes for new notifications: each notification (the inbox's
/// record), a queued delivery per other channel and device, and what the streams are told
/// after the commit. Fan-out writes one per recipient of an event; closing a batch writes one
/// per batch.
struct NotificationRows: Sendable {
    /// What a notification says.
    struct Content: Sendable {
        var eventID: UUID
        var category: CategoryDefinition
        var tenant: String
        var title: String
        var body: String
        var url: String?
        /// The event's `data` as stored, and decoded for the streams.
        var data: String?
        var decodedData: [String: JSONValue]?
        var batch: NotificationBatch? = nil
        /// The language tag of the template variant it was rendered from; `nil`: the default.
        var locale: String? = nil
        /// The shorter text push channels show, from the category's `content.push` templates.
        var pushTitle: String? = nil
        var pushBody: String? = nil
        /// What else of the event a provider needs, for the deliveries offered to the queue as
        /// they are written (`offered`); `nil`: none is offered.
        var extras: EventExtras? = nil
    }

    /// The event's fields a provider needs beside the notification's: what the queue's read
    /// joins from `events`.
    struct EventExtras: Sendable {
        var imageURL: String?
        var ttlSeconds: Int?
        var contentAvailable: Bool?
        /// When the event was accepted (the 202), for the delivery latency metric.
        var acceptedAt: Date
    }

    private var notifications: [[BulkValue]] = []
    /// The user of each of `notifications`, held while they are written (PostgreSQL).
    private var users: [UUID] = []
    private var deliveries: [QueuedDelivery] = []
    private var randomness = IDRandomness()
    /// Deliveries queued: the queue is woken when there are any.
    private(set) var queued = 0
    /// New inbox notifications of users with an open stream on this instance, by event.
    private(set) var created: [UUID: [(UUID, InboxNotification)]] = [:]
    /// Every user with a new notification in their inbox now, by event, for other instances.
    private(set) var inboxUsers: [UUID: [UUID]] = [:]
    /// The events of `inboxUsers` in the order their first notification was written.
    private var inboxEvents: [UUID] = []
    /// Inbox notifications available at once, by channel: delivered by being written.
    private(set) var deliveredInInbox: [String: Int] = [:]
    /// Whether to report each queued delivery (`message.queued`) and each inbox notification
    /// written as delivered (`message.sent`), for the workspace's `webhooks`.
    var reportsQueued = false
    var reportsSent = false
    /// Those reports, to be queued in the transaction that inserts the rows.
    private(set) var statusEvents: [StatusEvent] = []
    /// Whether to build the new deliveries due now on webhook and push channels as the queue
    /// reads them, for it to take after the commit without a search and a read (`DeliveryOffers`).
    var offers = false
    /// Those deliveries; a push's badge is counted when the queue takes it.
    private(set) var offered: [Delivery] = []
    /// Where each of `offered` is among the rows.
    private var offeredRows: [Int] = []
    /// Those of `offered` the queue took before the rows were written, written claimed by it.
    private(set) var reservation: OfferReservation?

    /// Adds one user's notification, due at `due`, on the channels the rule let through.
    /// - Returns: the notification's id; `nil` when no channel delivers.
    @discardableResult
    mutating func add(
        _ content: Content, for user: Fanout.Recipient, due: Date, delivering: [ChannelDefinition],
        devices: [DeviceStore.Device], now: Date, isFollowed: (UUID) -> Bool
    ) -> UUID? {
        guard !delivering.isEmpty else { return nil }
        let category = content.category
        let notificationID = UUID.timeOrdered(at: now, using: &randomness)
        let inInbox = delivering.contains { $0.kind == .inbox }
        // One due later is announced to the streams when its time comes (`InboxAnnouncer`).
        let announceAt = inInbox && due > now ? due : nil
        notifications.append([
            .id(notificationID), .id(content.eventID), .id(user.id), .text(category.id), .text(content.tenant),
            .text(content.title), .text(content.body), .text(content.url), .text(content.data), .bool(inInbox),
            .date(now), .date(due), .text(content.batch.map(NotificationBatch.stored)), .text(content.locale),
            .text(content.pushTitle), .text(content.pushBody), .date(announceAt),
        ])
        users.append(user.id)
        if inInbox, due <= now {
            noteInInbox(notificationID, content, user: user.id, at: due, isFollowed: isFollowed(user.id))
        }
        for channel in delivering {
            // The inbox delivery is the notification row itself, written in this transaction: a
            // delivery row would only repeat it (and cost the fan-out more than half its writes).
            // One due later is announced at its time (`announce_at`), without a delivery row.
            if channel.kind == .inbox && due > now { continue }
            if channel.kind == .inbox {
                deliveredInInbox[channel.id, default: 0] += 1
                if reportsSent {
                    statusEvents.append(
                        report(
                            .messageSent, notificationID, content, user, channel: channel.id, message: notificationID))
                }
                continue
            }
            // A push channel delivers to each of the user's devices on its platform.
            let targets: [DeviceStore.Device?] =
                channel.kind.isPush ? devices.filter { $0.platform.channelKind == channel.kind } : [nil]
            // A delayed channel (a fallback) comes due later, and may find it is not needed.
            let policy = category.channel(channel.id)
            let channelDue = due.addingTimeInterval(TimeInterval(policy?.delaySeconds ?? 0))
            let firstAttempt = Fanout.firstAttempt(on: channel, of: category, for: user, due: channelDue)
            let offering =
                offers && firstAttempt <= now && policy?.unless == nil
                && (channel.kind == .webhook || channel.kind.isPush)
            for device in targets {
                queued += 1
                let deliveryID = UUID.timeOrdered(at: now, using: &randomness)
                if reportsQueued {
                    statusEvents.append(
                        report(
                            .messageQueued, notificationID, content, user, channel: channel.id, message: deliveryID,
                            device: device?.id))
                }
                deliveries.append(
                    QueuedDelivery(
                        id: deliveryID, notification: notificationID, event: content.eventID, user: user.id,
                        channel: channel.id, device: device?.id, kind: .notification, firstAttempt: firstAttempt,
                        now: now, condition: policy?.unless))
                if offering, let extras = content.extras {
                    offeredRows.append(deliveries.count - 1)
                    offered.append(
                        Self.offer(
                            deliveryID, of: notificationID, content, extras, for: user, on: channel, device: device,
                            now: now))
                }
            }
        }
        return notificationID
    }

    /// Notes a notification visible in its user's inbox now, for the streams told after the commit.
    private mutating func noteInInbox(
        _ id: UUID, _ content: Content, user: UUID, at due: Date, isFollowed: Bool
    ) {
        if inboxUsers[content.eventID] == nil { inboxEvents.append(content.eventID) }
        inboxUsers[content.eventID, default: []].append(user)
        // Streams on this instance get the item itself; others read it when told.
        guard isFollowed else { return }
        let category = content.category
        let item = InboxNotification(
            id: id, category: category.id, tenant: content.tenant, title: content.title, body: content.body,
            url: content.url, data: content.decodedData, actions: category.actions, createdAt: due, seenAt: nil,
            readAt: nil, archivedAt: nil, batch: content.batch, locale: content.locale)
        created[content.eventID, default: []].append((user, item))
    }

    /// A delivery due now, as the queue's read of its rows gives it but for a push's badge.
    private static func offer(
        _ id: UUID, of notification: UUID, _ content: Content, _ extras: EventExtras, for user: Fanout.Recipient,
        on channel: ChannelDefinition, device: DeviceStore.Device?, now: Date
    ) -> Delivery {
        Delivery(
            id: id, eventID: content.eventID, channel: channel, attempt: 1, userID: user.id,
            externalUserID: user.externalID,
            content: DeliveryContent(
                deliveryID: id, notificationID: notification, category: content.category, tenant: content.tenant,
                on: channel.kind, title: content.title, body: content.body, pushTitle: content.pushTitle,
                pushBody: content.pushBody, url: content.url, imageURL: extras.imageURL, data: content.data,
                createdAt: now, eventTTL: extras.ttlSeconds, contentAvailable: extras.contentAvailable,
                batch: content.batch, locale: content.locale),
            payload: channel.kind.isPush ? .push(device?.pushDevice, unread: 0) : .webhook(action: nil),
            acceptedAt: extras.acceptedAt)
    }

    /// A status event about one message of this fan-out.
    private func report(
        _ type: StatusEventType, _ notificationID: UUID, _ content: Content, _ user: Fanout.Recipient,
        channel: String, message: UUID, device: UUID? = nil
    ) -> StatusEvent {
        .message(
            type, message: message, notification: notificationID, user: user.externalID, event: content.eventID,
            category: content.category.id, tenant: content.tenant, channel: channel, device: device)
    }

    /// Writes the offered deliveries `reservation` took as claimed by its queue.
    mutating func claim(_ reservation: OfferReservation) {
        let ids = reservation.ids
        for (delivery, row) in zip(offered, offeredRows) where ids.contains(delivery.id) {
            deliveries[row].claim = (reservation.worker, reservation.leaseExpiresAt)
        }
        self.reservation = reservation
    }

    func insert(storage: BelfryDatabase, on db: any Database) async throws {
        try await Self.insert([self], storage: storage, on: db)
    }

    /// Inserts the rows of several, in as few statements as if they were one.
    static func insert(_ all: [NotificationRows], storage: BelfryDatabase, on db: any Database) async throws {
        if storage.kind == .postgres { try await holdUsers(Set(all.flatMap(\.users)), storage: storage, on: db) }
        // No conflict is expected: a batch is one transaction, so it never runs twice. At most
        // 32 766 bound values per statement on SQLite: 150 notifications, 300 deliveries.
        try await storage.insert(
            into: Tables.notifications,
            columns: [
                "id", "event_id", "user_id", "category", "tenant", "title", "body", "url", "data", "in_inbox",
                "created_at", "available_at", "batch", "locale", "push_title", "push_body", "announce_at",
            ], rows: all.flatMap(\.notifications), rowsPerStatement: 150, on: db)
        try await QueuedDelivery.insert(all.flatMap(\.deliveries).map(\.values), storage: storage, on: db)
    }

    /// On PostgreSQL, holds `users` until the caller's transaction ends, as a foreign key on each
    /// notification's user did (`FOR KEY SHARE`: they cannot be deleted meanwhile), in one
    /// statement; throws ``UsersGone`` when one of them is gone, erased since the rows were
    /// planned. An erasure that deletes one of them meanwhile waits for this transaction, then
    /// deletes what it wrote (`UserErasure`). SQLite checks its foreign keys itself, with one
    /// writer at a time.
    static func holdUsers(_ users: Set<UUID>, storage: BelfryDatabase, on db: any Database) async throws {
        guard storage.kind == .postgres, !users.isEmpty else { return }
        let hold: SQLQueryString =
            "SELECT COUNT(*) AS n FROM (SELECT id FROM users WHERE id IN (\(binds: Array(users))) FOR KEY SHARE) AS held"
        let held = try await storage.rows(hold, on: db.sql).first?.decode(column: "n", as: Int.self)
        guard held == users.count else { throw UsersGone(missing: users.count - (held ?? 0)) }
    }

    /// Users of the rows to write were erased after the rows were planned: nothing is written,
    /// and the fan-out goes again without them.
    struct UsersGone: Error, CustomStringConvertible {
        let missing: Int
        var description: String { "\(missing) of the recipients were erased meanwhile; the batch goes again" }
    }

    /// Counts the inbox notifications written as delivered, after the commit.
    func count(into metrics: BelfryMetrics) {
        for (channel, count) in deliveredInInbox {
            metrics.delivered(channel: channel, outcome: "sent", count: count)
        }
    }

    /// Tells the streams of the new notifications of several batches' rows at once, after the
    /// commit.
    /// The events keep their order: the batch's, then within each the order they were written.
    static func publish(_ all: [NotificationRows], to events: InboxEvents, on db: any Database) async {
        let users = all.flatMap { rows in rows.inboxEvents.map { (event: $0, users: rows.inboxUsers[$0] ?? []) } }
        guard !users.isEmpty else { return }
        let items = all.flatMap { rows in rows.inboxEvents.flatMap { rows.created[$0] ?? [] } }
        await events.created(items: items, users: users, on: db)
    }
}

/// A delivery queued for its first attempt: the one shape of the row fan-out writes for each
/// channel and device, and an action answer for the webhook.
struct QueuedDelivery {
    var id: UUID
    var notification: UUID
    var event: UUID
    var user: UUID
    var channel: String
    var device: UUID? = nil
    var kind: Delivery.Kind
    /// The action answered, for an `action` delivery.
    var action: String? = nil
    var firstAttempt: Date
    var now: Date
    /// A delayed channel's condition (`unless`).
    var condition: CategoryChannelDefinition.Condition? = nil
    /// Written as claimed by this worker until then: running its first attempt, taken by the
    /// queue before the row was written (`OfferReservation`).
    var claim: (worker: String, leaseExpiresAt: Date)? = nil

    static let columns = [
        "id", "notification_id", "event_id", "user_id", "channel", "device_id", "kind", "action_id", "status",
        "attempts", "next_attempt_at", "created_at", "updated_at", "condition", "worker", "lease_expires_at",
    ]

    var values: [BulkValue] {
        [
            .id(id), .id(notification), .id(event), .id(user), .text(channel), .id(device), .text(kind.rawValue),
            .text(action), .text((claim == nil ? DeliveryStatus.queued : .running).rawValue),
            .integer(claim == nil ? 0 : 1), .date(firstAttempt), .date(now), .date(now), .text(condition?.rawValue),
            .text(claim?.worker), .date(claim?.leaseExpiresAt),
        ]
    }

    /// Inserts rows of `values`: 16 bound values each, so 300 a statement stay well under
    /// SQLite's 32 766.
    static func insert(_ rows: [[BulkValue]], storage: BelfryDatabase, on db: any Database) async throws {
        try await storage.insert(into: Tables.deliveries, columns: columns, rows: rows, rowsPerStatement: 300, on: db)
    }
}

extension NotificationBatch {
    /// As the `batch` column of a notification keeps it: the JSON the API sends.
    static func stored(_ batch: NotificationBatch) -> String {
        String(decoding: (try? JSONCoding.encoder.encode(batch)) ?? Data("null".utf8), as: UTF8.self)
    }

    /// The `batch` column read back; `nil` for a notification that is not a batch.
    init?(stored text: String?) {
        guard let text, let batch = try? Self.decoder.decode(NotificationBatch.self, from: Data(text.utf8))
        else { return nil }
        self = batch
    }

    private static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }()
}
