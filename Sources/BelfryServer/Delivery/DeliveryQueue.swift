import BelfryCore
import Fluent
import Foundation
import Logging
import NIOConcurrencyHelpers
import SQLKit

/// The durable queue of deliveries: claims due ones with a lease, hands each to its channel's
/// provider with bounded concurrency, and records the result with its backoff. Several
/// instances on PostgreSQL share the queue (`FOR UPDATE SKIP LOCKED`); a delivery claimed by a
/// process that died is claimed again once its lease has expired. Deliveries are at least
/// once: a receiver can recognise a repeat by its delivery id.
final class DeliveryQueue: Sendable {
    let database: @Sendable () -> any Database
    let storage: BelfryDatabase
    let workspace: WorkspaceConfig
    let providers: [ChannelKind: any DeliveryProvider]
    let metrics: BelfryMetrics
    let now: @Sendable () -> Date
    /// A random number in 0..<1 for backoff jitter.
    let jitter: @Sendable () -> Double
    let logger: Logger
    /// This process, as recorded on the deliveries it claims.
    let name: String
    let lease: TimeInterval
    let concurrency: Int
    let backoff = Backoff()
    private let stopping = NIOLockedValueBox(false)

    init(
        database: @escaping @Sendable () -> any Database, storage: BelfryDatabase, workspace: WorkspaceConfig,
        providers: [ChannelKind: any DeliveryProvider], metrics: BelfryMetrics, now: @escaping @Sendable () -> Date,
        jitter: @escaping @Sendable () -> Double, logger: Logger, lease: TimeInterval = 120, concurrency: Int = 16
    ) {
        self.database = database
        self.storage = storage
        self.workspace = workspace
        self.providers = providers
        self.metrics = metrics
        self.now = now
        self.jitter = jitter
        self.logger = logger
        self.lease = lease
        self.concurrency = concurrency
        self.name =
            "\(ProcessInfo.processInfo.hostName)-\(ProcessInfo.processInfo.processIdentifier)-\(UUID().uuidString.prefix(8))"
    }

    /// Claims and runs the deliveries due now, at most `limit`.
    /// - Returns: how many were attempted.
    @discardableResult
    func runOnce(limit: Int = 64) async throws -> Int {
        guard !isStopping else { return 0 }
        let claimedAt = now()
        let deliveries = try await claim(limit: limit)
        let unstarted = NIOLockedValueBox<[UUID]>([])
        await withTaskGroup(of: Void.self) { group in
            var running = 0
            for delivery in deliveries {
                if running == concurrency {
                    await group.next()
                    running -= 1
                }
                // Once stopping, claimed deliveries not yet started go back to the queue for
                // another worker, so shutdown waits only for the attempts under way. So do those
                // that waited half their lease behind slow ones: an attempt takes at most the other
                // half, so no worker claims a delivery while it is being attempted.
                if isStopping || now().timeIntervalSince(claimedAt) > lease / 2 {
                    unstarted.withLockedValue { $0.append(delivery.id) }
                    continue
                }
                group.addTask { await self.attempt(delivery) }
                running += 1
            }
        }
        let released = unstarted.withLockedValue { $0 }
        if !released.isEmpty { try await release(released) }
        return deliveries.count - released.count
    }

    /// Returns claimed deliveries that were never attempted to the queue, as if never claimed.
    func release(_ ids: [UUID]) async throws {
        try await storage.write(database()) { db in
            try await db.sql.update("deliveries")
                .set("status", to: DeliveryStatus.queued.rawValue)
                .set("attempts", to: SQLRaw("attempts - 1"))
                .set("lease_expires_at", to: Date?.none)
                .set("worker", to: String?.none)
                .where("id", .in, ids)
                .where("worker", .equal, self.name)
                .where("status", .equal, DeliveryStatus.running.rawValue)
                .run()
        }
    }

    /// Marks up to `limit` due deliveries as running under this worker's lease and returns
    /// them, each read whole (content, device, badge) in one query.
    func claim(limit: Int) async throws -> [Delivery] {
        let now = self.now()
        let ids: [UUID] = try await storage.write(database()) { db in
            let due = db.sql.select().column("id").from("deliveries")
                .where { group in
                    group.where("status", .equal, DeliveryStatus.queued.rawValue)
                        .where("next_attempt_at", .lessThanOrEqual, now)
                }
                .orWhere { group in
                    group.where("status", .equal, DeliveryStatus.running.rawValue)
                        .where("lease_expires_at", .lessThan, now)
                }
                .orderBy("next_attempt_at")
                .limit(limit)
            let ids = try await self.storage.lockingSkipLocked(due).all()
                .map { try $0.decode(column: "id", as: UUID.self) }
            guard !ids.isEmpty else { return [] }
            try await db.sql.update("deliveries")
                .set("status", to: DeliveryStatus.running.rawValue)
                .set("attempts", to: SQLRaw("attempts + 1"))
                .set("lease_expires_at", to: now.addingTimeInterval(self.lease))
                .set("worker", to: self.name)
                .set("updated_at", to: now)
                .where("id", .in, ids)
                .run()
            return ids
        }
        guard !ids.isEmpty else { return [] }
        var orphans: [(UUID, String)] = []
        var deliveries: [Delivery] = []
        for row in try await database().sql.raw(Self.claimed(ids, now: now)).all() {
            let id = try row.decode(column: "delivery_id", as: UUID.self)
            let channelID = try row.decode(column: "channel", as: String.self)
            let categoryID = try row.decode(column: "category", as: String.self)
            guard let channel = workspace.channel(channelID) else {
                orphans.append((id, "the channel is no longer in the workspace config"))
                continue
            }
            guard let category = workspace.category(categoryID) else {
                orphans.append((id, "category \"\(categoryID)\" is no longer in the workspace config"))
                continue
            }
            let actionID = try row.decode(column: "action_id", as: String?.self)
            let hasDevice = try row.decode(column: "device_row_id", as: UUID?.self) != nil
            let ttl = try row.decode(column: "ttl_seconds", as: Int?.self)
            deliveries.append(
                Delivery(
                    id: id,
                    kind: Delivery.Kind(rawValue: try row.decode(column: "kind", as: String.self)) ?? .notification,
                    action: actionID.map { id in
                        category.actions.first { $0.id == id } ?? NotificationAction(id: id, title: id)
                    },
                    eventID: try row.decode(column: "event_id", as: UUID.self),
                    channel: channel,
                    attempt: try row.decode(column: "attempts", as: Int.self),
                    userID: try row.decode(column: "user_id", as: UUID.self),
                    externalUserID: try row.decode(column: "external_id", as: String.self),
                    content: DeliveryContent(
                        deliveryID: id, notificationID: try row.decode(column: "notification_id", as: UUID.self),
                        category: category, tenant: try row.decode(column: "tenant", as: String.self),
                        title: try row.decode(column: "title", as: String.self),
                        body: try row.decode(column: "body", as: String.self),
                        url: try row.decode(column: "url", as: String?.self),
                        imageURL: try row.decode(column: "image_url", as: String?.self),
                        data: try row.decode(column: "data", as: String?.self),
                        createdAt: try row.decode(column: "created_at", as: Date.self),
                        ttlSeconds: ttl ?? category.push.ttlSeconds,
                        batch: NotificationBatch(stored: try row.decode(column: "batch", as: String?.self))),
                    device: hasDevice ? try DeviceStore.device(row, prefix: "device_") : nil,
                    unread: try row.decode(column: "unread", as: Int.self),
                    email: try row.decode(column: "user_email", as: String?.self),
                    locale: try row.decode(column: "user_locale", as: String?.self),
                    condition: try row.decode(column: "condition", as: String?.self).flatMap(
                        CategoryChannelDefinition.Condition.init(rawValue:)),
                    readAt: try row.decode(column: "read_at", as: Date?.self),
                    seenAt: try row.decode(column: "seen_at", as: Date?.self)))
        }
        if !orphans.isEmpty {
            // The workspace config no longer has their channel or category: fail them visibly
            // instead of leaving them to be claimed again for ever.
            try await storage.write(database()) { [orphans] db in
                for (id, error) in orphans {
                    try await db.sql.update("deliveries")
                        .set("status", to: DeliveryStatus.failed.rawValue)
                        .set("last_error", to: error)
                        .set("lease_expires_at", to: Date?.none)
                        .set("updated_at", to: now)
                        .where("id", .equal, id)
                        .run()
                }
            }
        }
        return deliveries
    }

    /// Claimed deliveries with everything their providers need: the notification's content,
    /// the event's image and time to live, the device, and for push the user's unread count.
    private static func claimed(_ ids: [UUID], now: Date) -> SQLQueryString {
        """
        SELECT deliveries.id AS delivery_id, deliveries.event_id, deliveries.notification_id, deliveries.channel,
          deliveries.attempts, deliveries.kind, deliveries.action_id, deliveries.user_id, users.external_id,
          users.email AS user_email, users.locale AS user_locale,
          deliveries.condition, notifications.read_at, notifications.seen_at,
          notifications.category, notifications.tenant, notifications.title, notifications.body, notifications.url,
          notifications.data, notifications.batch, notifications.created_at, events.image_url, events.ttl_seconds,
          devices.id AS device_row_id, \(unsafeRaw: DeviceStore.prefixedColumns(of: "devices", prefix: "device_")),
          CASE WHEN deliveries.device_id IS NULL THEN 0 ELSE (
            SELECT COUNT(*) FROM notifications AS inbox
            WHERE inbox.user_id = deliveries.user_id AND inbox.in_inbox = \(true) AND inbox.read_at IS NULL
              AND inbox.archived_at IS NULL AND inbox.available_at <= \(bind: now)
          ) END AS unread
        FROM deliveries
        JOIN notifications ON notifications.id = deliveries.notification_id
        JOIN events ON events.id = deliveries.event_id
        JOIN users ON users.id = deliveries.user_id
        LEFT JOIN devices ON devices.id = deliveries.device_id
        WHERE deliveries.id IN (\(binds: ids))
        """
    }

    private func attempt(_ delivery: Delivery) async {
        let started = now()
        let result: DeliveryResult
        let maxAttempts: Int
        if let reason = delivery.fallbackMet {
            maxAttempts = 1
            result = .skipped(reason)
        } else if let provider = providers[delivery.channel.kind] {
            maxAttempts = provider.maxAttempts
            result = await attempt(delivery, with: provider)
        } else {
            maxAttempts = 1
            result = .failed(reason: "no provider for \(delivery.channel.kind.rawValue) channels is configured")
        }
        do {
            try await record(
                delivery, result: result, maxAttempts: maxAttempts, started: started,
                deviceNoun: delivery.channel.kind.deviceNoun)
        } catch {
            // The lease runs out and another attempt follows: at least once, never lost.
            logger.error(
                "could not record a delivery attempt",
                metadata: ["belfry.delivery.id": "\(delivery.id)", "belfry.error": "\(String(reflecting: error))"])
        }
        logger.log(
            level: result.isDelivered ? .debug : .info, "delivery attempt",
            metadata: [
                "belfry.delivery.id": "\(delivery.id)", "belfry.channel": "\(delivery.channel.id)",
                "belfry.attempt": "\(delivery.attempt)", "belfry.outcome": "\(result.outcome)",
            ])
    }

    /// What stands between a claimed delivery and its provider: the attempt limit, and for
    /// push channels a device that still exists and takes deliveries.
    private func attempt(_ delivery: Delivery, with provider: any DeliveryProvider) async -> DeliveryResult {
        if delivery.attempt > provider.maxAttempts {
            // Claimed again after its last attempts never finished (the process died each time):
            // stop here rather than let one delivery take workers down for ever.
            return .retry(reason: "gave up after \(provider.maxAttempts) attempts; the last ones did not finish")
        }
        if delivery.channel.kind.isPush {
            let noun = delivery.channel.kind.deviceNoun
            guard let device = delivery.device else { return .failed(reason: "the \(noun) was removed") }
            if device.retiredAt != nil {
                return .failed(reason: "the \(noun) was retired: \(device.retiredReason ?? "no reason given")")
            }
        }
        // Only the send runs where the provider asks: the attempt's statements stay on any
        // loop's connections, not all on the one loop (and its one SQLite connection) of APNs.
        return await runningOn(provider.sendLoop) { await provider.deliver(delivery) }
    }

    /// Records an attempt's result on its delivery (and retires its device when the provider
    /// said so), in one transaction.
    private func record(
        _ delivery: Delivery, result: DeliveryResult, maxAttempts: Int, started: Date, deviceNoun: String
    ) async throws {
        let (id, attempt) = (delivery.id, delivery.attempt)
        let now = self.now()
        let (final, next, lastError, lastStatus) = resolve(
            result, attempt: attempt, maxAttempts: maxAttempts, now: now, deviceNoun: deviceNoun)
        let recorded = try await storage.write(database()) { db in
            let updated = try await db.sql.update("deliveries")
                .set("status", to: final.rawValue)
                .set("next_attempt_at", to: next)
                .set("lease_expires_at", to: Date?.none)
                .set("last_error", to: lastError)
                .set("last_status", to: lastStatus)
                .set("updated_at", to: now)
                .where("id", .equal, id)
                .where("worker", .equal, self.name)
                .where("status", .equal, DeliveryStatus.running.rawValue)
                .returning("id")
                .all()
            // A worker whose lease expired meanwhile lost the delivery to another: its result is history only.
            try await db.sql.insert(into: "delivery_attempts")
                .columns("id", "delivery_id", "attempt", "started_at", "finished_at", "outcome", "status_code", "error")
                .values(UUID(), id, attempt, started, now, result.outcome, lastStatus, lastError)
                .run()
            if case .retire(let device, let reason, _) = result {
                try await DeviceStore.retire(device, reason: reason, now: now, on: db.sql)
            }
            if case .skipped(let reason) = result, !updated.isEmpty {
                try await EventSkips.add(
                    event: delivery.eventID, channel: delivery.channel.id, reason: reason, count: 1, on: db.sql)
            }
            return !updated.isEmpty
        }
        metrics.delivered(channel: delivery.channel.id, outcome: final == .dead ? "dead" : result.outcome)
        if !recorded {
            logger.warning("a delivery's lease expired during its attempt", metadata: ["belfry.delivery.id": "\(id)"])
        }
    }

    /// The delivery's new status, next attempt time, error and provider status code.
    private func resolve(
        _ result: DeliveryResult, attempt: Int, maxAttempts: Int, now: Date, deviceNoun: String
    ) -> (DeliveryStatus, Date, String?, Int?) {
        switch result {
        case .delivered(let status):
            return (.sent, now, nil, status)
        case .retry(let after, let reason, let status):
            guard attempt < maxAttempts else { return (.dead, now, reason, status) }
            let delay = backoff.delay(afterAttempt: attempt, retryAfter: after, jitter: jitter())
            return (.queued, now.addingTimeInterval(delay), reason, status)
        case .retire(_, let reason, let status):
            return (.failed, now, "\(reason); the \(deviceNoun) is retired", status)
        case .failed(let reason, let status):
            return (.failed, now, reason, status)
        case .skipped(let reason):
            return (.skipped, now, reason.rawValue, nil)
        }
    }

    var isStopping: Bool { stopping.withLockedValue { $0 } }

    /// Stops taking new work; attempts under way finish and are recorded.
    func beginStopping() {
        stopping.withLockedValue { $0 = true }
    }
}

extension DeliveryResult {
    var isDelivered: Bool {
        if case .delivered = self { return true }
        return false
    }

    /// The attempt's outcome as the delivery log names it.
    var outcome: String {
        switch self {
        case .delivered: "sent"
        case .retry: "retry"
        case .retire, .failed: "failed"
        case .skipped: "skipped"
        }
    }
}
