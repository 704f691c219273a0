import BelfryCore
import BelfryHTTP2
import Fluent
import Foundation
import Logging
import NIOConcurrencyHelpers
import SQLKit

/// The durable queue of deliveries. Under `belfry serve` it runs as a pipeline (`run`): it claims
/// due deliveries with a lease whenever a channel kind has free slots, starts each attempt as
/// soon as it is claimed, and records the results in batches, one transaction for all that
/// finished since the last (group commit). Several instances on PostgreSQL share the queue
/// (`FOR UPDATE SKIP LOCKED`); a delivery claimed by a process that died is claimed again once
/// its lease has expired. Deliveries are at least once: a receiver can recognise a repeat by
/// its delivery id, and a crash repeats only the attempts that were not yet recorded.
final class DeliveryQueue: Sendable {
    let database: @Sendable () -> any Database
    let storage: BelfryDatabase
    let workspace: WorkspaceConfig
    /// Each channel's kind, for the slots a claim reserves.
    private let kindOfChannel: [String: ChannelKind]
    let providers: [ChannelKind: any DeliveryProvider]
    let metrics: BelfryMetrics
    let now: @Sendable () -> Date
    /// A random number in 0..<1 for backoff jitter.
    let jitter: @Sendable () -> Double
    let logger: Logger
    /// This process, as recorded on the deliveries it claims.
    let name: String
    let lease: TimeInterval
    let backoff: Backoff
    /// Wakes `run` when deliveries are queued, a kind's slots come free, or the queue stops.
    let signal: WorkSignal
    let slots: DeliverySlots
    /// Hears of each claim or record that failed: the database monitor, which acts on lost queries.
    let onStorageFailure: @Sendable (any Error) -> Void
    /// Reports each delivery's end (sent, failed, dead, skipped) and retired devices to the
    /// workspace's `webhooks`, in the transaction that records them.
    let statusEvents: StatusEvents?
    /// Where a device a provider refused is retired.
    let devices: DeviceStore
    /// The users' inbox counts: an offered push's badge.
    let inbox: InboxStore
    /// The most deliveries of one kind a claim takes, and results a transaction records.
    static let claimBatch = 256
    static let recordBatch = 512
    /// Results that may wait to be recorded before attempts wait to add theirs: with the slots,
    /// what a crash can repeat.
    static let unrecordedResults = 512
    /// How long the pipeline waits for one claim or one batch of results before it gives up on
    /// it (see `withDeadline`) and tries again.
    static let storageDeadline: TimeInterval = 10
    private let stopping = NIOLockedValueBox(false)
    /// Deliveries the pipeline claimed and has not yet recorded (or returned): after a claim
    /// failed, running deliveries of this worker outside this set are claims whose answer was
    /// lost with its connection, and go back to the queue at once rather than after the lease.
    private let held = NIOLockedValueBox<Set<UUID>>([])
    /// When the pipeline last claimed deliveries.
    private let lastClaimed = NIOLockedValueBox<Date>(.distantPast)
    /// Set when the deliveries of a claim could not be read (or sent back): the pipeline then
    /// returns the running deliveries it does not hold before it claims again.
    private let readFailed = NIOLockedValueBox(false)
    /// Whether the pipeline runs: only then does it take fan-out's offers.
    private let running = NIOLockedValueBox(false)
    /// Offers taken that the pipeline has not yet started.
    private let offers = NIOLockedValueBox<[Offered]>([])
    /// Offered deliveries still waiting for a slot when the queue stopped: returned to the
    /// queue in one statement, not one each.
    private let unstartedAtStop = NIOLockedValueBox<[UUID]>([])
    /// Offered deliveries taken without a slot and not yet started, by kind: at most
    /// `offersWaiting(on:)` times the kind's slots.
    private let waitingOffers = NIOLockedValueBox<[ChannelKind: Int]>([:])
    /// How many times its slots a kind may have waiting: room for two whole pages of a big event
    /// with 128 slots (two of `Fanout.postgresPageSize` on PostgreSQL, more than two of
    /// `Fanout.batchSize` on SQLite), so that fan-out writes the next page claimed while the one
    /// before is being sent. What does not fit is written queued, to be claimed again: a third
    /// write of each row. On PostgreSQL, with room for one page, 6 000 to 7 700 of the webhook
    /// deliveries of an event to 20 000 recipients went that way, and the server's CPU a
    /// delivery was 71–98 µs against 48–67 µs with room for two (none claimed).
    static func offersWaiting(on database: BelfryDatabase.Kind) -> Int {
        database == .postgres ? 32 : 16
    }
    /// Offered deliveries this queue took and started: no search of the queue, no read.
    let offersTaken = NIOLockedValueBox(0)

    /// Whether deliveries are under way here, or were claimed in the last second: what the
    /// status event sender yields to.
    var isBusy: Bool {
        let now = self.now()
        return !held.withLockedValue(\.isEmpty) || now.timeIntervalSince(lastClaimed.withLockedValue { $0 }) < 1
    }

    init(
        database: @escaping @Sendable () -> any Database, storage: BelfryDatabase, workspace: WorkspaceConfig,
        providers: [ChannelKind: any DeliveryProvider], metrics: BelfryMetrics, now: @escaping @Sendable () -> Date,
        jitter: @escaping @Sendable () -> Double, logger: Logger, lease: TimeInterval = 120,
        signal: WorkSignal = WorkSignal(), backoff: Backoff = Backoff(),
        onStorageFailure: @escaping @Sendable (any Error) -> Void = { _ in }, statusEvents: StatusEvents? = nil,
        devices: DeviceStore, inbox: InboxStore
    ) {
        self.devices = devices
        self.inbox = inbox
        self.statusEvents = statusEvents
        self.backoff = backoff
        self.onStorageFailure = onStorageFailure
        self.database = database
        self.storage = storage
        self.workspace = workspace
        kindOfChannel = Dictionary(workspace.channels.map { ($0.id, $0.kind) }) { first, _ in first }
        self.providers = providers
        self.metrics = metrics
        self.now = now
        self.jitter = jitter
        self.logger = logger
        self.lease = lease
        self.signal = signal
        self.slots = DeliverySlots(
            limits: providers.mapValues {
                DeliverySlots.Limit(perKind: $0.concurrency, perOrigin: $0.concurrencyPerOrigin)
            },
            onFree: { [signal] in signal.wake() })
        self.name =
            "\(ProcessInfo.processInfo.hostName)-\(ProcessInfo.processInfo.processIdentifier)-\(UUID().uuidString.prefix(8))"
    }

    /// The workspace's channels by kind: what a claim for a kind selects.
    private var channelsByKind: [ChannelKind: [String]] {
        Dictionary(grouping: workspace.channels, by: \.kind).mapValues { $0.map(\.id) }
    }

    // MARK: The pipeline

    /// Runs the queue until `beginStopping`: claims for every kind with free slots, starts each
    /// claimed delivery at once, and hands results to the recorder as they finish. When nothing
    /// is due it waits for a wake (new deliveries, free slots) or `interval`. A claim that fails
    /// (the database went away) is tried again after a capped, jittered backoff. On stopping,
    /// the attempts under way finish and every result is recorded before this returns.
    func run(clock: any ServiceClock, interval: TimeInterval = 1) async {
        await failDeliveriesOfRemovedChannels()
        let pending = PendingResults(capacity: Self.unrecordedResults)
        let channels = channelsByKind
        running.withLockedValue { $0 = true }
        defer { running.withLockedValue { $0 = false } }
        await withTaskGroup(of: Void.self) { recorder in
            recorder.addTask { await self.recordResults(from: pending, clock: clock) }
            await withDiscardingTaskGroup { attempts in
                var failures = 0
                var lostClaims = false
                var announced = Date.distantPast
                while !isStopping {
                    if now().timeIntervalSince(announced) >= 0.25 {
                        announced = now()
                        await announceDueInbox(clock: clock)
                    }
                    if lostClaims {
                        lostClaims = await !returnLostClaims(clock: clock)
                        // No claim before that is done: a new claim could be taken for a lost one.
                        if lostClaims {
                            try? await clock.sleep(for: retryDelay(afterFailures: failures))
                            continue
                        }
                    }
                    if readFailed.withLockedValue({ failed in
                        defer { failed = false }; return failed
                    }) {
                        // A claim whose read failed: its deliveries are running and held by no one.
                        failures += 1
                        lostClaims = true
                        continue
                    }
                    let drained: Bool
                    do {
                        let taken = await takeOffers(clock: clock)
                        if !taken.isEmpty {
                            attempts.addTask { await self.startOffered(taken, results: pending, clock: clock) }
                        }
                        let (claimed, isDrained) = try await claimDue(channels, failures: failures, clock: clock)
                        if !claimed.isEmpty {
                            attempts.addTask { await self.readAndStart(claimed, results: pending, clock: clock) }
                        }
                        failures = 0
                        drained = isDrained
                    } catch {
                        failures += 1
                        lostClaims = true
                        try? await clock.sleep(for: retryDelay(afterFailures: failures))
                        continue
                    }
                    if drained && !isStopping { await signal.wait(upTo: interval, on: clock) }
                }
            }
            // Offers not yet taken: their places go back, and those written claimed return to
            // the queue with the others that did not start.
            let left = offers.withLockedValue { offers in
                defer { offers = [] }; return offers
            }
            left.forEach(giveBack)
            let unstarted =
                unstartedAtStop.withLockedValue { $0 } + left.filter { $0.claimedAt != nil }.map(\.delivery.id)
            if !unstarted.isEmpty { await requeue(unstarted, clock: clock) }
            pending.finish()
        }
    }

    /// Takes the offers waiting: those fan-out wrote claimed as they are, the others claimed
    /// by id. - Returns: those claimed, to start. Should the claim fail, its offers give back
    /// their slots, and the pipeline returns its lost claims next (the claim may have
    /// committed); those written claimed start all the same.
    private func takeOffers(clock: any ServiceClock) async -> [Offered] {
        let offered = offers.withLockedValue { offers in
            defer { offers = [] }; return offers
        }
        guard !offered.isEmpty else { return [] }
        let now = self.now()
        var taken = offered.filter { $0.claimedAt != nil }
        let unclaimed = offered.filter { $0.claimedAt == nil }
        if !unclaimed.isEmpty {
            do {
                taken += try await withDeadline(Self.storageDeadline, "taking offers", clock: clock) {
                    try await self.take(unclaimed, at: now)
                }
            } catch {
                unclaimed.forEach(giveBack)
                onStorageFailure(error)
                logger.error(
                    "the delivery queue could not take the deliveries fan-out offered",
                    metadata: ["belfry.error": "\(String(reflecting: error))"])
                readFailed.withLockedValue { $0 = true }
            }
        }
        if !taken.isEmpty {
            lastClaimed.withLockedValue { $0 = now }
            offersTaken.withLockedValue { $0 += taken.count }
        }
        return taken
    }

    /// Claims due deliveries for every kind with free slots, and reserves their slots, so that
    /// the next claim, made while these are read and sent, asks only for the rest.
    /// - Returns: the claimed ids and kinds, and whether the queue is drained for now: only
    ///   when every kind got less than it asked for (one that got all may have more due).
    ///   Throws when the claim failed (the claim may have committed).
    private func claimDue(
        _ channels: [ChannelKind: [String]], failures: Int, clock: any ServiceClock
    ) async throws -> (claimed: [(id: UUID, kind: ChannelKind)], drained: Bool) {
        let wanted = slots.wanted(among: channels.keys).mapValues { min($0, Self.claimBatch) }
        guard !wanted.isEmpty else { return ([], true) }
        let claimed: [(id: UUID, kind: ChannelKind)]
        do {
            let groups = wanted.map { (channels[$0.key] ?? [], $0.value) }
            claimed = try await withDeadline(Self.storageDeadline, "a claim", clock: clock) {
                try await self.claimIDs(groups)
            }
        } catch {
            onStorageFailure(error)
            logger.error(
                "the delivery queue could not claim deliveries",
                metadata: ["belfry.error": "\(String(reflecting: error))", "belfry.failures": "\(failures + 1)"])
            throw error
        }
        held.withLockedValue { $0.formUnion(claimed.map(\.id)) }
        if !claimed.isEmpty { lastClaimed.withLockedValue { $0 = self.now() } }
        let claimedByKind = Dictionary(grouping: claimed, by: \.kind).mapValues(\.count)
        for (kind, count) in claimedByKind { slots.reserve(kind, count: count) }
        return (claimed, !wanted.contains { kind, asked in claimedByKind[kind, default: 0] >= asked })
    }

    /// Reads claimed deliveries whole and starts an attempt for each whose origin has a free
    /// slot (its kind's slot was reserved at the claim); the others go back to the queue for a
    /// little while, their origin busy with slower sends. Runs beside the next claim. A read
    /// that fails gives the slots back and leaves the deliveries to `returnLostClaims`.
    private func readAndStart(
        _ claimed: [(id: UUID, kind: ChannelKind)], results: PendingResults, clock: any ServiceClock
    ) async {
        let deliveries: [Delivery]
        do {
            deliveries = try await withDeadline(Self.storageDeadline, "reading claims", clock: clock) {
                try await self.read(claimed: claimed.map(\.id), now: self.now())
            }
        } catch {
            held.withLockedValue { $0.subtract(claimed.map(\.id)) }
            for item in claimed { slots.release(item.kind, origin: nil) }
            onStorageFailure(error)
            logger.error(
                "the delivery queue could not read the deliveries it claimed",
                metadata: ["belfry.error": "\(String(reflecting: error))"])
            readFailed.withLockedValue { $0 = true }
            signal.wake()
            return
        }
        // Claimed rows the read did not return (failed as orphans, or erased with their user
        // meanwhile) give their slots back.
        let read = Set(deliveries.map(\.id))
        for item in claimed where !read.contains(item.id) {
            held.withLockedValue { _ = $0.remove(item.id) }
            slots.release(item.kind, origin: nil)
        }
        await start(deliveries, results: results, clock: clock)
    }

    /// Starts an attempt for each claimed delivery whose origin has a free slot (its kind's slot
    /// is reserved already); the others go back to the queue for a little while, their origin
    /// busy with slower sends.
    private func start(_ deliveries: [Delivery], results: PendingResults, clock: any ServiceClock) async {
        var busyOrigins: [UUID] = []
        await withDiscardingTaskGroup { attempts in
            for delivery in deliveries {
                let kind = delivery.channel.kind
                let origin = providers[kind]?.origin(of: delivery)
                guard slots.takeOrigin(kind, origin: origin) else {
                    slots.release(kind, origin: nil)
                    busyOrigins.append(delivery.id)
                    continue
                }
                attempts.addTask(runningOn: providers[kind]?.sendLoop) {
                    let result = await self.perform(delivery)
                    await results.add(result)
                    self.slots.release(kind, origin: origin)
                }
            }
            if !busyOrigins.isEmpty { await requeue(busyOrigins, postponedBy: min(lease / 4, 5), clock: clock) }
        }
    }

    /// Claims offered deliveries by id, those still queued (a claim may have taken some first):
    /// one statement, as a claim is, but no search of the queue and no read to follow. Those it
    /// did not get give back their slots or places. - Returns: the deliveries claimed.
    private func take(_ offered: [Offered], at now: Date) async throws -> [Offered] {
        let claimed = try await claim(ids: offered.map(\.delivery.id))
        held.withLockedValue { $0.formUnion(claimed) }
        var taken: [Offered] = []
        for var item in offered {
            if claimed.contains(item.delivery.id) {
                item.claimedAt = now
                taken.append(item)
            } else {
                giveBack(item)
            }
        }
        return taken
    }

    /// Gives back what an offered delivery that will not start here holds: its slot, or its
    /// place among those waiting for one.
    private func giveBack(_ item: Offered) {
        let kind = item.delivery.channel.kind
        if item.hasSlot {
            slots.release(kind, origin: nil)
        } else {
            waitingOffers.withLockedValue { $0[kind, default: 0] -= 1 }
        }
    }

    /// Starts offered deliveries once claimed, a push's badge counted first as the read counts
    /// it: those with a slot at once, the others as slots come free (before any claim gets
    /// them). Should the count fail, they go back to the queue, for a claim to read them.
    private func startOffered(_ taken: [Offered], results: PendingResults, clock: any ServiceClock) async {
        let badged: [Delivery]
        do {
            badged = try await withDeadline(Self.storageDeadline, "counting badges", clock: clock) {
                try await self.withBadges(taken.map(\.delivery))
            }
        } catch {
            onStorageFailure(error)
            logger.error(
                "the delivery queue could not count the badges of offered pushes",
                metadata: ["belfry.error": "\(String(reflecting: error))"])
            taken.forEach(giveBack)
            await requeue(taken.map(\.delivery.id), clock: clock)
            return
        }
        await withDiscardingTaskGroup { group in
            let ready = zip(taken, badged).filter { $0.0.hasSlot }.map(\.1)
            group.addTask { await self.start(ready, results: results, clock: clock) }
            for (item, delivery) in zip(taken, badged) where !item.hasSlot {
                group.addTask(runningOn: providers[delivery.channel.kind]?.sendLoop) {
                    await self.startWhenFree(
                        delivery, claimedAt: item.claimedAt ?? self.now(), results: results, clock: clock)
                }
            }
        }
    }

    /// Starts an offered delivery once a slot of its kind and origin comes free. One that
    /// waited half its lease goes back to the queue: an attempt takes at most the other half,
    /// so no worker claims a delivery while it is being attempted. So does one still waiting
    /// when the queue stops.
    private func startWhenFree(
        _ delivery: Delivery, claimedAt: Date, results: PendingResults, clock: any ServiceClock
    ) async {
        let kind = delivery.channel.kind
        let origin = providers[kind]?.origin(of: delivery)
        await slots.acquire(kind, origin: origin)
        waitingOffers.withLockedValue { $0[kind, default: 0] -= 1 }
        defer { slots.release(kind, origin: origin) }
        if isStopping {
            // Returned together once the attempts under way have ended (`run`).
            unstartedAtStop.withLockedValue { $0.append(delivery.id) }
            return
        }
        if now().timeIntervalSince(claimedAt) > lease / 2 {
            await requeue([delivery.id], clock: clock)
            return
        }
        await results.add(await perform(delivery))
    }

    /// Returns claimed deliveries that will not start here to the queue, due again after
    /// `delay`, no longer held. Should that fail, the next sweep for lost claims returns them.
    private func requeue(_ ids: [UUID], postponedBy delay: TimeInterval = 0, clock: any ServiceClock) async {
        held.withLockedValue { $0.subtract(ids) }
        do {
            try await withDeadline(Self.storageDeadline, "returning claims", clock: clock) {
                try await self.release(ids, postponedBy: delay)
            }
        } catch {
            onStorageFailure(error)
            logger.error(
                "the delivery queue could not return claims it did not start",
                metadata: ["belfry.error": "\(String(reflecting: error))", "belfry.deliveries": "\(ids.count)"])
            readFailed.withLockedValue { $0 = true }
            signal.wake()
        }
    }

    /// Marks these deliveries running under this worker's lease, those still queued for their
    /// first attempt. - Returns: the ids it marked.
    private func claim(ids: [UUID]) async throws -> Set<UUID> {
        let now = now()
        return try await storage.write(database()) { db in
            var claimed: Set<UUID> = []
            for chunk in ids.chunked(500) {
                let update = db.sql.update(Tables.deliveries)
                    .set("status", to: DeliveryStatus.running.rawValue)
                    .set("attempts", to: 1)
                    .set("lease_expires_at", to: now.addingTimeInterval(self.lease))
                    .set("worker", to: self.name)
                    .set("updated_at", to: now)
                    .where("id", .in, Array(chunk))
                    .whereStatus(is: DeliveryStatus.queued.rawValue)
                    .where("attempts", .equal, 0)
                    .returning("id")
                let rows = try await self.storage.rows(update.query, on: db.sql)
                for row in rows { claimed.insert(try row.decode(column: "id", as: UUID.self)) }
            }
            return claimed
        }
    }

    /// The offered pushes with the badge the read gives: each user's unread inbox now.
    private func withBadges(_ offered: [Delivery]) async throws -> [Delivery] {
        let users = Set(offered.filter { $0.channel.kind.isPush }.map(\.userID))
        guard !users.isEmpty else { return offered }
        let counts = try await inbox.counts(of: Array(users), on: database())
        return offered.map { delivery in
            guard case .push(let device, _) = delivery.payload else { return delivery }
            var badged = delivery
            badged.payload = .push(device, unread: counts[delivery.userID]?.unread ?? 0)
            return badged
        }
    }

    /// Records results in batches until the pipeline has stopped and every result is recorded.
    /// A batch that cannot be recorded (the database went away) is tried again after a backoff:
    /// its deliveries stay claimed meanwhile, and the check on the worker and status keeps a
    /// late record from overwriting a delivery another worker claimed after the lease.
    private func recordResults(from pending: PendingResults, clock: any ServiceClock) async {
        while true {
            let batch = await pending.take(upTo: Self.recordBatch)
            if batch.isEmpty { return }
            var failures = 0
            let firstTry = now()
            while true {
                do {
                    try await withDeadline(Self.storageDeadline, "recording attempts", clock: clock) {
                        try await self.record(batch)
                    }
                    held.withLockedValue { $0.subtract(batch.map(\.delivery.id)) }
                    break
                } catch {
                    failures += 1
                    onStorageFailure(error)
                    logger.error(
                        "could not record delivery attempts",
                        metadata: ["belfry.error": "\(String(reflecting: error))", "belfry.attempts": "\(batch.count)"])
                    // After the lease the deliveries are another worker's to attempt again (and
                    // a server stopping waits a few seconds at most): at least once, never lost.
                    let waited = now().timeIntervalSince(firstTry)
                    if waited > lease || (isStopping && waited > 5) {
                        held.withLockedValue { $0.subtract(batch.map(\.delivery.id)) }
                        break
                    }
                    try? await clock.sleep(for: retryDelay(afterFailures: failures))
                }
            }
        }
    }

    /// Returns to the queue this worker's running deliveries that it does not hold: claims
    /// committed whose answer never came back. - Returns: whether that is done.
    private func returnLostClaims(clock: any ServiceClock) async -> Bool {
        let kept = Array(held.withLockedValue { $0 })
        // Only claims made before this look: one made later (should this statement commit late,
        // past its deadline) is being sent.
        let before = now()
        do {
            let returned = try await withDeadline(Self.storageDeadline, "returning lost claims", clock: clock) {
                try await self.storage.write(self.database()) { db in
                    let update = self.requeueing(on: db).where("status", .equal, DeliveryStatus.running.rawValue)
                        .where("updated_at", .lessThan, before)
                    if !kept.isEmpty { update.where("id", .notIn, kept) }
                    return try await update.returning("id").all().count
                }
            }
            if returned > 0 {
                logger.notice("returned claims whose answer was lost", metadata: ["belfry.deliveries": "\(returned)"])
            }
            return true
        } catch {
            onStorageFailure(error)
            return false
        }
    }

    /// The pipeline's backoff after `failures` failures in a row (see `loopBackoff`).
    func retryDelay(afterFailures failures: Int) -> TimeInterval {
        loopBackoff(afterFailures: failures, jitter: jitter())
    }

    /// Deliveries whose channel has left the workspace config can never be claimed for a kind:
    /// they fail, visibly, instead of waiting for ever.
    private func failDeliveriesOfRemovedChannels() async {
        let known = workspace.channels.map(\.id)
        do {
            try await withDeadline(Self.storageDeadline, "failing deliveries of removed channels") {
                try await self.storage.write(self.database()) { db in
                    try await db.sql.update(Tables.deliveries)
                        .set("status", to: DeliveryStatus.failed.rawValue)
                        .set("last_error", to: "the channel is no longer in the workspace config")
                        .set("lease_expires_at", to: Date?.none)
                        .where("status", .in, [DeliveryStatus.queued.rawValue, DeliveryStatus.running.rawValue])
                        .where("channel", .notIn, known)
                        .run()
                }
            }
        } catch {
            logger.error(
                "could not fail the deliveries of removed channels",
                metadata: ["belfry.error": "\(String(reflecting: error))"])
        }
    }

    // MARK: One round at a time

    /// Announces the inbox notifications now due, claims the deliveries due now (at most
    /// `limit`), attempts them with each kind's concurrency, and records every result in one
    /// transaction: what tests and the benchmarks drive by hand.
    /// - Returns: how many notifications were announced and deliveries attempted.
    @discardableResult
    func runOnce(limit: Int = 64) async throws -> Int {
        guard !isStopping else { return 0 }
        let announced = try await announceDueInbox()
        let claimedAt = now()
        let deliveries = try await claim(limit: limit)
        let finished = NIOLockedValueBox<[AttemptResult]>([])
        let unstarted = NIOLockedValueBox<[UUID]>([])
        await withDiscardingTaskGroup { group in
            for delivery in deliveries {
                let kind = delivery.channel.kind
                let origin = providers[kind]?.origin(of: delivery)
                group.addTask {
                    await self.slots.acquire(kind, origin: origin)
                    defer { self.slots.release(kind, origin: origin) }
                    // Once stopping, claimed deliveries not yet started go back to the queue for
                    // another worker, so shutdown waits only for the attempts under way. So do those
                    // that waited half their lease behind slow ones: an attempt takes at most the
                    // other half, so no worker claims a delivery while it is being attempted.
                    if self.isStopping || self.now().timeIntervalSince(claimedAt) > self.lease / 2 {
                        unstarted.withLockedValue { $0.append(delivery.id) }
                        return
                    }
                    let result = await self.perform(delivery)
                    finished.withLockedValue { $0.append(result) }
                }
            }
        }
        do {
            try await record(finished.withLockedValue { $0 })
        } catch {
            // The leases run out and other attempts follow: at least once, never lost.
            logger.error(
                "could not record delivery attempts", metadata: ["belfry.error": "\(String(reflecting: error))"])
        }
        let released = unstarted.withLockedValue { $0 }
        if !released.isEmpty { try await release(released) }
        return announced + deliveries.count - released.count
    }

    // MARK: Claims

    /// Returns claimed deliveries that were never attempted to the queue, as if never claimed,
    /// due again after `delay`.
    func release(_ ids: [UUID], postponedBy delay: TimeInterval = 0) async throws {
        let due = now().addingTimeInterval(delay)
        try await storage.write(database()) { db in
            try await self.requeueing(on: db).set("next_attempt_at", to: due).where("id", .in, ids)
                .whereStatus(is: DeliveryStatus.running.rawValue).run()
        }
    }

    /// An update that puts this worker's deliveries back in the queue as if never claimed; the
    /// caller narrows it to the running ones it means: by id with ``SQLPredicateBuilder/
    /// whereStatus(is:)``, else with the status itself, which leads to them.
    private func requeueing(on db: any Database) -> SQLUpdateBuilder {
        db.sql.update(Tables.deliveries)
            .set("status", to: DeliveryStatus.queued.rawValue)
            .set("attempts", to: SQLRaw("attempts - 1"))
            .set("lease_expires_at", to: Date?.none)
            .set("worker", to: String?.none)
            .where("worker", .equal, name)
    }

    /// Claims up to `limit` due deliveries of any channel and returns them read whole.
    func claim(limit: Int) async throws -> [Delivery] {
        try await claim([(nil, limit)])
    }

    /// Marks due deliveries as running under this worker's lease, up to a limit for each group
    /// of channels (nil: any channel), in one statement; then reads them whole (content,
    /// device, badge) in one query.
    func claim(_ wanted: [(channels: [String]?, limit: Int)]) async throws -> [Delivery] {
        let claimed = try await claimIDs(wanted)
        guard !claimed.isEmpty else { return [] }
        return try await read(claimed: claimed.map(\.id), now: now())
    }

    /// Marks due deliveries as running under this worker's lease, as `claim` does, and returns
    /// their ids and channel kinds, not yet read.
    func claimIDs(_ wanted: [(channels: [String]?, limit: Int)]) async throws -> [(id: UUID, kind: ChannelKind)] {
        let statement = claimStatement(wanted, now: now())
        return try await storage.write(database()) { db in
            try await self.storage.rows(statement, on: db.sql).map { row in
                let channel = try row.decode(column: "channel", as: String.self)
                // A channel that left the config is failed by the read, as an orphan.
                return (try row.decode(column: "id", as: UUID.self), self.kindOfChannel[channel] ?? .inbox)
            }
        }
    }

    /// `UPDATE … WHERE id IN (the due rows of each group) RETURNING id`. Each group's rows are
    /// its queued deliveries in the order they fell due, then those whose lease expired, each
    /// branch read along an index so that a claim costs the same however long the queue is (the
    /// statuses are written out: SQLite uses a partial index only for a literal). On
    /// PostgreSQL the rows are locked with `SKIP LOCKED`, so instances claiming at once take
    /// different ones.
    private func claimStatement(_ wanted: [(channels: [String]?, limit: Int)], now: Date) -> SQLQueryString {
        let locking = storage.kind == .postgres ? " FOR UPDATE SKIP LOCKED" : ""
        let isSQLite = storage.kind == .sqlite
        var due: [SQLQueryString] = []
        for (index, group) in wanted.enumerated() {
            let channels: SQLQueryString = group.channels.map { "AND channel IN (\(binds: $0))" } ?? ""
            // SQLite, without statistics, would read `deliveries_due` and skip the other
            // channels' queued rows one by one; for any channel, that index is the right one.
            let queuedIndex = isSQLite && group.channels != nil ? " INDEXED BY deliveries_claim" : ""
            let leaseIndex = isSQLite ? " INDEXED BY deliveries_lease" : ""
            let limit = String(group.limit)
            due.append(
                """
                SELECT id FROM (SELECT id FROM (
                  SELECT id FROM (SELECT id FROM deliveries\(unsafeRaw: queuedIndex)
                    WHERE status = '\(unsafeRaw: DeliveryStatus.queued.rawValue)' \(channels) AND next_attempt_at <= \(bind: now)
                    ORDER BY next_attempt_at LIMIT \(unsafeRaw: limit)\(unsafeRaw: locking)) AS queued\(unsafeRaw: String(index))
                  UNION ALL
                  SELECT id FROM (SELECT id FROM deliveries\(unsafeRaw: leaseIndex)
                    WHERE status = '\(unsafeRaw: DeliveryStatus.running.rawValue)' \(channels) AND lease_expires_at < \(bind: now)
                    LIMIT \(unsafeRaw: limit)\(unsafeRaw: locking)) AS expired\(unsafeRaw: String(index))
                ) AS due\(unsafeRaw: String(index)) LIMIT \(unsafeRaw: limit)) AS claim\(unsafeRaw: String(index))
                """)
        }
        return """
            UPDATE deliveries SET status = \(bind: DeliveryStatus.running.rawValue), attempts = attempts + 1,
              lease_expires_at = \(bind: now.addingTimeInterval(lease)), worker = \(bind: name), updated_at = \(bind: now)
            WHERE id IN (\(due.joined(separator: " UNION ALL ")))
            RETURNING id, channel
            """
    }

    /// Claimed deliveries read whole. Those whose channel or category the workspace config no
    /// longer has fail, visibly, instead of being claimed again for ever.
    private func read(claimed ids: [UUID], now: Date) async throws -> [Delivery] {
        var orphans: [(UUID, String)] = []
        var deliveries: [Delivery] = []
        for row in try await storage.rows(claimed(ids, now: now), on: database().sql) {
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
            deliveries.append(try delivery(row, id: id, channel: channel, category: category))
        }
        if !orphans.isEmpty {
            try await storage.write(database()) { [orphans] db in
                for (id, error) in orphans {
                    try await db.sql.update(Tables.deliveries)
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

    private func delivery(
        _ row: DirectRow, id: UUID, channel: ChannelDefinition, category: CategoryDefinition
    ) throws -> Delivery {
        Delivery(
            id: id,
            eventID: try row.decode(column: "event_id", as: UUID.self),
            channel: channel,
            attempt: try row.decode(column: "attempts", as: Int.self),
            userID: try row.decode(column: "user_id", as: UUID.self),
            externalUserID: try row.decode(column: "external_id", as: String.self),
            content: DeliveryContent(
                deliveryID: id, notificationID: try row.decode(column: "notification_id", as: UUID.self),
                category: category, tenant: try row.decode(column: "tenant", as: String.self), on: channel.kind,
                title: try row.decode(column: "title", as: String.self),
                body: try row.decode(column: "body", as: String.self),
                pushTitle: try row.decode(column: "push_title", as: String?.self),
                pushBody: try row.decode(column: "push_body", as: String?.self),
                url: try row.decode(column: "url", as: String?.self),
                imageURL: try row.decode(column: "image_url", as: String?.self),
                data: try row.decode(column: "data", as: String?.self),
                createdAt: try row.decode(column: "created_at", as: Date.self),
                eventTTL: try row.decode(column: "ttl_seconds", as: Int?.self),
                contentAvailable: try row.decode(column: "content_available", as: Bool?.self),
                batch: NotificationBatch(stored: try row.decode(column: "batch", as: String?.self)),
                locale: try row.decode(column: "locale", as: String?.self)),
            payload: try payload(row, channel: channel, category: category),
            condition: try row.decode(column: "condition", as: String?.self).flatMap(
                CategoryChannelDefinition.Condition.init(rawValue:)),
            readAt: try row.decode(column: "read_at", as: Date?.self),
            seenAt: try row.decode(column: "seen_at", as: Date?.self),
            acceptedAt: try row.decode(column: "event_created_at", as: Date.self))
    }

    /// What the row's channel kind needs, from the claim's columns.
    private func payload(
        _ row: DirectRow, channel: ChannelDefinition, category: CategoryDefinition
    ) throws -> Delivery.Payload {
        let action = try row.decode(column: "action_id", as: String?.self).map { id in
            category.actions.first { $0.id == id } ?? NotificationAction(id: id, title: id)
        }
        let isAction = Delivery.Kind(rawValue: try row.decode(column: "kind", as: String.self)) == .action
        if isAction && channel.kind != .webhook {
            return .unsupported(
                reason: "\(channel.kind.rawValue) channels deliver notifications, not answers to actions")
        }
        switch channel.kind {
        case .inbox:
            return .inbox
        case .webhook:
            return .webhook(action: isAction ? action : nil)
        case .apns, .fcm, .webPush:
            let hasDevice = try row.decode(column: "device_row_id", as: UUID?.self) != nil
            return .push(
                hasDevice ? try devices.device(row, prefix: "device_").pushDevice : nil,
                unread: try row.decode(column: "unread", as: Int.self))
        case .email:
            return .email(
                address: try row.decode(column: "user_email", as: String?.self),
                locale: try row.decode(column: "user_locale", as: String?.self))
        }
    }

    /// Claimed deliveries with everything their providers need: the notification's content,
    /// the event's image and time to live, the device, and for push the user's unread count.
    func claimed(_ ids: [UUID], now: Date) -> SQLQueryString {
        """
        SELECT deliveries.id AS delivery_id, deliveries.event_id, deliveries.notification_id, deliveries.channel,
          deliveries.attempts, deliveries.kind, deliveries.action_id, deliveries.user_id, users.external_id,
          users.email AS user_email, users.locale AS user_locale,
          deliveries.condition, notifications.read_at, notifications.seen_at,
          notifications.category, notifications.tenant, notifications.title, notifications.body, notifications.url,
          notifications.push_title, notifications.push_body, notifications.locale,
          notifications.data, notifications.batch, notifications.created_at, events.image_url, events.ttl_seconds,
          events.content_available,
          events.created_at AS event_created_at,
          devices.id AS device_row_id, \(unsafeRaw: devices.prefixedColumns(of: "devices", prefix: "device_")),
          CASE WHEN deliveries.device_id IS NULL THEN 0 ELSE (
            SELECT COUNT(*) FROM notifications AS inbox
            WHERE inbox.user_id = deliveries.user_id
              AND \(unsafeRaw: InboxStore.counted(postgres: storage.kind == .postgres, table: "inbox"))
              AND inbox.read_at IS NULL AND inbox.available_at <= \(bind: now)
          ) END AS unread
        FROM deliveries
        \(unsafeRaw: storage.keyJoin("notifications", on: "notifications.id = deliveries.notification_id"))
        \(unsafeRaw: storage.keyJoin("events", on: "events.id = deliveries.event_id"))
        \(unsafeRaw: storage.keyJoin("users", on: "users.id = deliveries.user_id"))
        \(unsafeRaw: storage.keyJoin("devices", on: "devices.id = deliveries.device_id", optional: true))
        WHERE deliveries.id IN (\(binds: ids))
        """
    }

    // MARK: Attempts

    /// Attempts one claimed delivery; never throws: every outcome is a result to record.
    private func perform(_ delivery: Delivery) async -> AttemptResult {
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
        // A retry on the last attempt is the delivery's end: it is logged as what it is.
        let last = if case .retry = result, delivery.attempt >= maxAttempts { true } else { false }
        logger.log(
            level: result.isDelivered ? .debug : last ? .warning : .info, "delivery attempt",
            metadata: [
                "belfry.delivery.id": "\(delivery.id)", "belfry.channel": "\(delivery.channel.id)",
                "belfry.attempt": "\(delivery.attempt)", "belfry.outcome": "\(last ? "dead" : result.outcome)",
            ])
        return AttemptResult(
            delivery: delivery, result: result, maxAttempts: maxAttempts, started: started, finished: now())
    }

    /// What stands between a claimed delivery and its provider: the attempt limit, and for
    /// push channels a device that still exists and takes deliveries.
    private func attempt(_ delivery: Delivery, with provider: any DeliveryProvider) async -> DeliveryResult {
        if delivery.attempt > provider.maxAttempts {
            // Claimed again after its last attempts never finished (the process died each time):
            // stop here rather than let one delivery take workers down for ever.
            return .retry(reason: "gave up after \(provider.maxAttempts) attempts; the last ones did not finish")
        }
        if case .unsupported(let reason) = delivery.payload { return .failed(reason: reason) }
        if case .push(let device, _) = delivery.payload {
            let noun = delivery.channel.kind.deviceNoun
            guard let device else { return .failed(reason: "the \(noun) was removed") }
            if device.retiredAt != nil {
                return .failed(reason: "the \(noun) was retired: \(device.retiredReason ?? "no reason given")")
            }
        }
        // The send runs where the provider asks; the queue's attempts start there already
        // (`start`), and so pay no hop. The queue's statements (claims, badges, the recorder)
        // run in tasks of their own, not all on the one loop (and its one SQLite connection) of
        // APNs; only a rare requeue of an offer that waited too long runs on the send loop.
        return await runningOn(provider.sendLoop) { await provider.deliver(delivery) }
    }

    // MARK: Results

    /// A delivery's state after an attempt, as recorded.
    private struct Resolution: Hashable {
        var status: DeliveryStatus
        var next: Date
        var error: String?
        var providerStatus: Int?
    }

    /// Records a batch of results in one transaction: each delivery's new state (one statement
    /// for all that end alike, as sent ones do), the attempt log rows, retired devices and the
    /// events' skips. A delivery whose lease this worker lost meanwhile keeps its new owner's
    /// state: the result is history only.
    func record(_ results: [AttemptResult]) async throws {
        guard !results.isEmpty else { return }
        let now = self.now()
        let resolved = results.map { attempt in
            (attempt, resolve(attempt, now: now))
        }
        var groups: [Resolution: [UUID]] = [:]
        for (attempt, resolution) in resolved { groups[resolution, default: []].append(attempt.delivery.id) }
        let recorded: Set<UUID> = try await storage.write(database()) { [groups] db in
            let recorded = try await self.setStates(groups, now: now, on: db)
            try await self.logAttempts(resolved, recorded: recorded, on: db)
            try await self.applyEffects(resolved, recorded: recorded, now: now, on: db)
            return recorded
        }
        for (attempt, resolution) in resolved {
            let channel = attempt.delivery.channel.id
            metrics.delivered(channel: channel, outcome: resolution.status == .dead ? "dead" : attempt.result.outcome)
            if resolution.status == .sent, let acceptedAt = attempt.delivery.acceptedAt {
                metrics.deliveredAfter(attempt.finished.timeIntervalSince(acceptedAt), channel: channel)
            }
            if !recorded.contains(attempt.delivery.id) {
                logger.warning(
                    "a delivery's lease expired during its attempt",
                    metadata: ["belfry.delivery.id": "\(attempt.delivery.id)"])
            }
        }
    }

    /// Each delivery's new state, one statement for all that end alike; the ids this worker
    /// still held (the others' leases passed to another worker meanwhile).
    private func setStates(
        _ groups: [Resolution: [UUID]], now: Date, on db: any Database
    ) async throws -> Set<UUID> {
        var recorded: Set<UUID> = []
        for (resolution, ids) in groups {
            for chunk in ids.chunked(500) {
                let update = db.sql.update(Tables.deliveries)
                    .set("status", to: resolution.status.rawValue)
                    .set("next_attempt_at", to: resolution.next)
                    .set("lease_expires_at", to: Date?.none)
                    .set("last_error", to: resolution.error)
                    .set("last_status", to: resolution.providerStatus)
                    .set("updated_at", to: now)
                    .where("id", .in, Array(chunk))
                    .where("worker", .equal, self.name)
                    .whereStatus(is: DeliveryStatus.running.rawValue)
                    .returning("id")
                let rows = try await storage.rows(update.query, on: db.sql)
                for row in rows { recorded.insert(try row.decode(column: "id", as: UUID.self)) }
            }
        }
        return recorded
    }

    /// The attempt log's rows, for every delivery still there.
    private func logAttempts(
        _ resolved: [(AttemptResult, Resolution)], recorded: Set<UUID>, on db: any Database
    ) async throws {
        // A delivery erased with its user during the attempt has nowhere to log it. Those still
        // there are held until this commits (the updated ones already are), so that an erasure
        // or a purge, which holds them before deleting their attempts, sees these rows.
        let unrecorded = resolved.map(\.0.delivery.id).filter { !recorded.contains($0) }
        var existing = recorded
        if !unrecorded.isEmpty {
            let held: SQLQueryString =
                "SELECT id FROM deliveries WHERE id IN (\(binds: unrecorded))\(unsafeRaw: storage.forKeyShare)"
            for row in try await storage.rows(held, on: db.sql) {
                existing.insert(try row.decode(column: "id", as: UUID.self))
            }
        }
        // The rows' ids from one seeded generator: the system's, asked for each id, cost two
        // system calls an attempt on the writer's thread.
        var random = IDRandomness()
        let logged: [[BulkValue]] = resolved.filter { existing.contains($0.0.delivery.id) }.map {
            attempt, resolution in
            [
                .id(UUID.timeOrdered(at: attempt.finished, using: &random)), .id(attempt.delivery.id),
                .integer(attempt.delivery.attempt), .date(attempt.started),
                .date(attempt.finished), .text(attempt.result.outcome), .integer(resolution.providerStatus),
                .text(resolution.error),
            ]
        }
        try await storage.insert(
            into: Tables.deliveryAttempts,
            columns: ["id", "delivery_id", "attempt", "started_at", "finished_at", "outcome", "status_code", "error"],
            rows: logged, rowsPerStatement: 500, on: db)
    }

    /// What the results change beyond their deliveries: devices retired, the events' skips, and
    /// the status events.
    private func applyEffects(
        _ resolved: [(AttemptResult, Resolution)], recorded: Set<UUID>, now: Date, on db: any Database
    ) async throws {
        var skips: [UUID: [String: [SkipReason: Int]]] = [:]
        for (attempt, _) in resolved {
            switch attempt.result {
            case .retire(let device, let reason, _):
                try await devices.retire(device, reason: reason, now: now, on: db.sql)
            case .skipped(let reason) where recorded.contains(attempt.delivery.id):
                skips[attempt.delivery.eventID, default: [:]][attempt.delivery.channel.id, default: [:]][
                    reason, default: 0] += 1
            default:
                break
            }
        }
        try await EventSkips.add(skips, storage: storage, on: db)
        if let statusEvents {
            let events = resolved.filter { recorded.contains($0.0.delivery.id) }.flatMap(Self.statusEvents)
            try await statusEvents.queue(events.filter { statusEvents.wants($0.type) }, on: db)
        }
    }

    /// What the workspace's `webhooks` hear of a recorded attempt: the delivery's end, and a
    /// device the provider refused for good. A retry still to come is not reported.
    private static func statusEvents(_ attempt: AttemptResult, _ resolution: Resolution) -> [StatusEvent] {
        let delivery = attempt.delivery
        let type: StatusEventType? =
            switch resolution.status {
            case .sent: .messageSent
            case .failed: .messageFailed
            case .dead: .messageDead
            case .skipped: .messageSkipped
            case .queued, .running: nil
            }
        var extra: [String: JSONValue] = ["attempt": .number(Double(delivery.attempt))]
        if let error = resolution.error { extra["reason"] = .string(error) }
        if let status = resolution.providerStatus { extra["provider_status"] = .number(Double(status)) }
        func event(_ type: StatusEventType) -> StatusEvent {
            .message(
                type, message: delivery.id, notification: delivery.content.notificationID,
                user: delivery.externalUserID, event: delivery.eventID, category: delivery.content.category.id,
                tenant: delivery.content.tenant, channel: delivery.channel.id, device: delivery.device?.id,
                extra: extra)
        }
        var events = type.map { [event($0)] } ?? []
        if case .retire(_, let reason, _) = attempt.result {
            extra["reason"] = .string(reason)
            events.append(event(.deviceRetired))
        }
        return events
    }

    /// The delivery's state after `attempt`: its status, next attempt time, error and the
    /// provider's status code.
    private func resolve(_ attempt: AttemptResult, now: Date) -> Resolution {
        let (number, maxAttempts) = (attempt.delivery.attempt, attempt.maxAttempts)
        switch attempt.result {
        case .delivered(let status):
            return Resolution(status: .sent, next: now, error: nil, providerStatus: status)
        case .retry(let after, let reason, let status):
            guard number < maxAttempts else {
                return Resolution(status: .dead, next: now, error: reason, providerStatus: status)
            }
            let delay = backoff.delay(afterAttempt: number, retryAfter: after, jitter: jitter())
            return Resolution(
                status: .queued, next: now.addingTimeInterval(delay), error: reason, providerStatus: status)
        case .retire(_, let reason, let status):
            let noun = attempt.delivery.channel.kind.deviceNoun
            return Resolution(
                status: .failed, next: now, error: "\(reason); the \(noun) is retired", providerStatus: status)
        case .failed(let reason, let status):
            return Resolution(status: .failed, next: now, error: reason, providerStatus: status)
        case .skipped(let reason):
            return Resolution(status: .skipped, next: now, error: reason.rawValue, providerStatus: nil)
        }
    }

    var isStopping: Bool { stopping.withLockedValue { $0 } }

    /// Stops taking new work; attempts under way finish and are recorded.
    func beginStopping() {
        stopping.withLockedValue { $0 = true }
        signal.wake()
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

/// A delivery fan-out offered and the queue took: with a slot of its kind reserved, or
/// waiting for one; claimed when its row was written so, or by the queue once taken.
struct Offered: Sendable {
    var delivery: Delivery
    var hasSlot: Bool
    var claimedAt: Date? = nil
}

/// The deliveries a queue took before fan-out wrote them, and the claim their rows are written
/// with: running under the queue's worker and lease, as if claimed already.
struct OfferReservation: Sendable {
    fileprivate(set) var taken: [Offered]
    let worker: String
    let leaseExpiresAt: Date

    var ids: Set<UUID> { Set(taken.map(\.delivery.id)) }
}

/// Where fan-out offers the deliveries it writes that are due now on webhook and push
/// channels: this instance's queue, which takes as many as its kinds have free slots for and
/// starts them without searching the queue or reading them back. The rest wait for a claim.
protocol DeliveryOffers: Sendable {
    /// Whether offers are taken now; when not, fan-out builds none.
    var takesOffers: Bool { get }
    /// Offers deliveries whose rows have committed, queued for their first attempt.
    func offer(_ deliveries: [Delivery])
    /// Takes what it has room for among deliveries about to be written, for fan-out to write
    /// them claimed; `nil` when it takes none. Once the rows commit, ``offer(_:)-(OfferReservation)``
    /// starts them; should they not, ``cancel(_:)`` gives the room back.
    func reserve(_ deliveries: [Delivery]) -> OfferReservation?
    func offer(_ reservation: OfferReservation)
    func cancel(_ reservation: OfferReservation)
}

extension DeliveryQueue: DeliveryOffers {
    var takesOffers: Bool { running.withLockedValue { $0 } && !isStopping }

    /// Takes as many as each kind has free slots for, and then as many as may wait for one.
    func offer(_ deliveries: [Delivery]) {
        guard takesOffers, let taken = room(for: deliveries) else { return }
        offers.withLockedValue { $0 += taken }
        signal.wake()
    }

    func reserve(_ deliveries: [Delivery]) -> OfferReservation? {
        let now = self.now()
        guard takesOffers, let taken = room(for: deliveries, claimedAt: now) else { return nil }
        // Held from now: the pipeline's return of lost claims must not take these rows back.
        held.withLockedValue { $0.formUnion(taken.map(\.delivery.id)) }
        return OfferReservation(taken: taken, worker: name, leaseExpiresAt: now.addingTimeInterval(lease))
    }

    /// Starts what was reserved, its rows committed. A queue that stopped meanwhile returns
    /// them to the queue (should that fail, their lease runs out).
    func offer(_ reservation: OfferReservation) {
        guard takesOffers else {
            cancel(reservation)
            let ids = Array(reservation.ids)
            Task { try? await self.release(ids) }
            return
        }
        offers.withLockedValue { $0 += reservation.taken }
        signal.wake()
    }

    func cancel(_ reservation: OfferReservation) {
        held.withLockedValue { $0.subtract(reservation.ids) }
        reservation.taken.forEach(giveBack)
    }

    /// As many of `deliveries` as each kind has free slots for, and then as many as may wait for
    /// one, with their slots reserved, claimed at `claimedAt` when written so; `nil` for none.
    private func room(for deliveries: [Delivery], claimedAt: Date? = nil) -> [Offered]? {
        var taken: [Offered] = []
        for (kind, offered) in Dictionary(grouping: deliveries, by: \.channel.kind) {
            let reserved = slots.reserve(upTo: offered.count, of: kind)
            let waiting = waitingOffers.withLockedValue { waiting in
                let room =
                    Self.offersWaiting(on: storage.kind) * slots.limit(of: kind).perKind - waiting[kind, default: 0]
                let count = max(0, min(offered.count - reserved, room))
                waiting[kind, default: 0] += count
                return count
            }
            taken += offered.prefix(reserved).map { Offered(delivery: $0, hasSlot: true, claimedAt: claimedAt) }
            taken += offered.dropFirst(reserved).prefix(waiting).map {
                Offered(delivery: $0, hasSlot: false, claimedAt: claimedAt)
            }
        }
        return taken.isEmpty ? nil : taken
    }
}

extension SQLPredicateBuilder {
    /// `status = value`, checked on the rows the statement's ids find rather than used to find
    /// them. Given `status = ?`, both planners read every row of that status through a status
    /// index and tested each against the ids: a status looks rare without fresh statistics,
    /// and SQLite has none. Recording 250 results then read all the deliveries under way, each
    /// time (19 µs a row on SQLite, against 6 µs through the primary key). PostgreSQL did the
    /// same for the status event sender's results, through `status_events_lease`. An expression
    /// of the column is in no index, so the ids lead.
    @discardableResult
    func whereStatus(is value: String) -> Self {
        self.where(SQLFunction("COALESCE", args: SQLColumn("status"), SQLLiteral.string("")), .equal, SQLBind(value))
    }
}
