import BelfryCore
import Fluent
import Foundation
import Logging
import NIOConcurrencyHelpers
import SQLKit

/// Runs queued deliveries: claims due ones with a lease, attempts them with bounded
/// concurrency, and records each attempt. Several instances on PostgreSQL share the queue
/// (`FOR UPDATE SKIP LOCKED`); a delivery claimed by a process that died is claimed again
/// once its lease has expired. Deliveries are at least once: a receiver can recognise a
/// repeat by its delivery id.
final class DeliveryWorker: Sendable {
    let context: BelfryContext
    let database: @Sendable () -> any Database
    let channels: [ChannelKind: any DeliveryChannel]
    let logger: Logger
    /// This process, as recorded on the deliveries it claims.
    let name: String
    let lease: TimeInterval
    let concurrency: Int
    let backoff = Backoff()
    private let loop = NIOLockedValueBox<(task: Task<Void, Never>?, stopping: Bool)>((nil, false))

    init(
        context: BelfryContext, database: @escaping @Sendable () -> any Database,
        channels: [ChannelKind: any DeliveryChannel], logger: Logger, lease: TimeInterval = 120, concurrency: Int = 16
    ) {
        self.context = context
        self.database = database
        self.channels = channels
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
        let jobs = try await claim(limit: limit)
        let unstarted = NIOLockedValueBox<[UUID]>([])
        await withTaskGroup(of: Void.self) { group in
            var running = 0
            for job in jobs {
                if running == concurrency {
                    await group.next()
                    running -= 1
                }
                // Once stopping, claimed deliveries not yet started go back to the queue for
                // another worker, so shutdown waits only for the attempts under way.
                if isStopping {
                    unstarted.withLockedValue { $0.append(job.id) }
                    continue
                }
                group.addTask { await self.attempt(job) }
                running += 1
            }
        }
        let released = unstarted.withLockedValue { $0 }
        if !released.isEmpty { try await release(released) }
        return jobs.count - released.count
    }

    /// Returns claimed deliveries that were never attempted to the queue, as if never claimed.
    func release(_ ids: [UUID]) async throws {
        try await context.database.write(database()) { db in
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

    /// Marks up to `limit` due deliveries as running under this worker's lease and returns them.
    func claim(limit: Int) async throws -> [DeliveryJob] {
        let now = context.now()
        let ids: [UUID] = try await context.database.write(database()) { db in
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
            let ids = try await self.context.database.lockingSkipLocked(due).all()
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
        let rows = try await database().sql.select()
            .column(SQLColumn("id", table: "deliveries"), as: "delivery_id")
            .column(SQLColumn("event_id", table: "deliveries"))
            .column(SQLColumn("notification_id", table: "deliveries"))
            .column(SQLColumn("channel", table: "deliveries"))
            .column(SQLColumn("attempts", table: "deliveries"))
            .column(SQLColumn("kind", table: "deliveries"))
            .column(SQLColumn("action_id", table: "deliveries"))
            .column(SQLColumn("user_id", table: "deliveries"))
            .column(SQLColumn("device_id", table: "deliveries"))
            .column(SQLColumn("external_id", table: UserModel.schema))
            .columns(
                SQLColumn("category", table: "notifications"), SQLColumn("tenant", table: "notifications"),
                SQLColumn("title", table: "notifications"), SQLColumn("body", table: "notifications"),
                SQLColumn("url", table: "notifications"), SQLColumn("data", table: "notifications"),
                SQLColumn("created_at", table: "notifications")
            )
            .from("deliveries")
            .join(
                "notifications", on: SQLColumn("id", table: "notifications"), .equal,
                SQLColumn("notification_id", table: "deliveries")
            )
            .join(
                UserModel.schema, on: SQLColumn("id", table: UserModel.schema), .equal,
                SQLColumn("user_id", table: "deliveries")
            )
            .where(SQLColumn("id", table: "deliveries"), .in, SQLBind.group(ids))
            .all()
        var orphans: [UUID] = []
        let jobs: [DeliveryJob] = try rows.compactMap { row in
            let channelID = try row.decode(column: "channel", as: String.self)
            guard let channel = context.workspace.channel(channelID) else {
                orphans.append(try row.decode(column: "delivery_id", as: UUID.self))
                return nil
            }
            let category = try row.decode(column: "category", as: String.self)
            let actionID = try row.decode(column: "action_id", as: String?.self)
            return DeliveryJob(
                id: try row.decode(column: "delivery_id", as: UUID.self),
                kind: DeliveryJob.Kind(rawValue: try row.decode(column: "kind", as: String.self)) ?? .notification,
                action: actionID.flatMap { id in context.workspace.category(category)?.actions.first { $0.id == id } }
                    ?? actionID.map { NotificationAction(id: $0, title: $0) },
                eventID: try row.decode(column: "event_id", as: UUID.self),
                notificationID: try row.decode(column: "notification_id", as: UUID.self),
                channel: channel,
                attempt: try row.decode(column: "attempts", as: Int.self),
                userID: try row.decode(column: "user_id", as: UUID.self),
                deviceID: try row.decode(column: "device_id", as: UUID?.self),
                externalUserID: try row.decode(column: "external_id", as: String.self),
                category: category,
                tenant: try row.decode(column: "tenant", as: String.self),
                title: try row.decode(column: "title", as: String.self),
                body: try row.decode(column: "body", as: String.self),
                url: try row.decode(column: "url", as: String?.self),
                data: try row.decode(column: "data", as: String?.self),
                createdAt: try row.decode(column: "created_at", as: Date.self))
        }
        if !orphans.isEmpty {
            // The workspace config no longer has their channel: fail them visibly instead of
            // leaving them to be claimed again for ever.
            let ids = orphans
            try await context.database.write(database()) { db in
                try await db.sql.update("deliveries")
                    .set("status", to: DeliveryStatus.failed.rawValue)
                    .set("last_error", to: "the channel is no longer in the workspace config")
                    .set("lease_expires_at", to: Date?.none)
                    .set("updated_at", to: now)
                    .where("id", .in, ids)
                    .run()
            }
        }
        return jobs
    }

    private func attempt(_ job: DeliveryJob) async {
        let started = context.now()
        let outcome: DeliveryOutcome
        let maxAttempts: Int
        if let channel = channels[job.channel.kind], job.attempt > channel.maxAttempts {
            // Claimed again after its last attempts never finished (the process died each time):
            // stop here rather than let one delivery take workers down for ever.
            outcome = .retry(
                status: nil, retryAfter: nil,
                error: "gave up after \(channel.maxAttempts) attempts; the last ones did not finish")
            maxAttempts = channel.maxAttempts
        } else if let channel = channels[job.channel.kind] {
            outcome = await channel.deliver(job)
            maxAttempts = channel.maxAttempts
        } else {
            outcome = .permanentFailure(
                status: nil, error: "no provider for \(job.channel.kind.rawValue) channels is configured")
            maxAttempts = 1
        }
        do {
            try await record(job, outcome: outcome, maxAttempts: maxAttempts, started: started)
        } catch {
            // The lease runs out and another attempt follows: at least once, never lost.
            logger.error(
                "could not record a delivery attempt",
                metadata: ["belfry.delivery.id": "\(job.id)", "belfry.error": "\(String(reflecting: error))"])
        }
    }

    private func record(_ job: DeliveryJob, outcome: DeliveryOutcome, maxAttempts: Int, started: Date) async throws {
        let now = context.now()
        let (final, next, error, code, outcomeName) = resolve(outcome, of: job, maxAttempts: maxAttempts, now: now)
        let recorded = try await context.database.write(database()) { db in
            let updated = try await db.sql.update("deliveries")
                .set("status", to: final.rawValue)
                .set("next_attempt_at", to: next)
                .set("lease_expires_at", to: Date?.none)
                .set("last_error", to: error)
                .set("last_status", to: code)
                .set("updated_at", to: now)
                .where("id", .equal, job.id)
                .where("worker", .equal, self.name)
                .where("status", .equal, DeliveryStatus.running.rawValue)
                .returning("id")
                .all()
            // A worker whose lease expired meanwhile lost the delivery to another: its result is history only.
            try await db.sql.insert(into: "delivery_attempts")
                .columns("id", "delivery_id", "attempt", "started_at", "finished_at", "outcome", "status_code", "error")
                .values(UUID(), job.id, job.attempt, started, now, outcomeName, code, error)
                .run()
            if updated.isEmpty {
                self.logger.warning(
                    "a delivery's lease expired during its attempt", metadata: ["belfry.delivery.id": "\(job.id)"])
            }
            return !updated.isEmpty
        }
        if recorded, final == .sent, job.kind == .notification, job.channel.kind == .inbox {
            // A scheduled notification just became visible in the inbox.
            await context.inboxEvents.becameAvailable(event: job.eventID, user: job.userID, on: database())
        }
        logger.log(
            level: final == .sent ? .debug : .info, "delivery attempt",
            metadata: [
                "belfry.delivery.id": "\(job.id)", "belfry.channel": "\(job.channel.id)",
                "belfry.attempt": "\(job.attempt)", "belfry.outcome": "\(final.rawValue)",
            ])
    }

    /// The delivery's new status, next attempt time, error, provider status code and attempt outcome.
    private func resolve(
        _ outcome: DeliveryOutcome, of job: DeliveryJob, maxAttempts: Int, now: Date
    )
        -> (DeliveryStatus, Date, String?, Int?, String)
    {
        switch outcome {
        case .sent(let code):
            return (.sent, now, nil, code, "sent")
        case .retry(let code, let retryAfter, let error):
            guard job.attempt < maxAttempts else { return (.dead, now, error, code, "retry") }
            let delay = backoff.delay(afterAttempt: job.attempt, retryAfter: retryAfter, jitter: context.jitter())
            return (.queued, now.addingTimeInterval(delay), error, code, "retry")
        case .permanentFailure(let code, let error):
            return (.failed, now, error, code, "failed")
        }
    }

    // MARK: Running in the background

    /// Starts fan-out and delivery in the background, waking on new work and polling each second for scheduled work.
    func start() {
        let task = Task {
            let fanout = Fanout(context: context)
            while !self.isStopping {
                // One fan-out batch, then one round of deliveries: neither starves the other,
                // and a failure in one does not stop the other.
                var worked = false
                do {
                    worked = try await fanout.processBatch(on: self.database())
                } catch {
                    self.logger.error("fan-out failed", metadata: ["belfry.error": "\(String(reflecting: error))"])
                }
                do {
                    if !self.isStopping, try await self.runOnce() > 0 { worked = true }
                } catch {
                    self.logger.error("delivery failed", metadata: ["belfry.error": "\(String(reflecting: error))"])
                }
                await self.purgeIfDue()
                if !worked && !self.isStopping { await self.context.workSignal.wait(upTo: 1) }
            }
        }
        loop.withLockedValue { $0.task = task }
    }

    var isStopping: Bool { loop.withLockedValue { $0.stopping } }

    private let lastPurge = NIOLockedValueBox<Date?>(nil)

    /// Runs the inbox retention purge at most once an hour.
    private func purgeIfDue() async {
        let now = context.now()
        let due = lastPurge.withLockedValue { last -> Bool in
            guard last.map({ now.timeIntervalSince($0) >= 3600 }) ?? true else { return false }
            last = now
            return true
        }
        guard due else { return }
        do {
            let purged = try await InboxRetention(context: context).purge(on: database())
            if purged > 0 { logger.info("purged old inbox notifications", metadata: ["belfry.purged": "\(purged)"]) }
        } catch {
            logger.error("inbox purge failed", metadata: ["belfry.error": "\(String(reflecting: error))"])
        }
    }

    /// Stops taking new work without waiting (`stop()` waits too).
    func beginStopping() {
        loop.withLockedValue { $0.stopping = true }
    }

    /// Stops taking new work and waits for the attempts under way to finish and be recorded.
    func stop() async {
        let task = loop.withLockedValue { state -> Task<Void, Never>? in
            state.stopping = true
            return state.task
        }
        context.workSignal.wake()
        await task?.value
    }
}
