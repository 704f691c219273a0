import Fluent
import Foundation
import Logging
import NIOConcurrencyHelpers

/// Runs fan-out, the delivery queue and the inbox retention purge in the background under
/// `belfry serve`, waking on new work and polling each second for scheduled work.
final class BackgroundWork: Sendable {
    let fanout: Fanout
    let queue: DeliveryQueue
    let retention: InboxRetention
    let database: @Sendable () -> any Database
    let signal: WorkSignal
    let now: @Sendable () -> Date
    let logger: Logger
    private let task = NIOLockedValueBox<Task<Void, Never>?>(nil)
    private let lastPurge = NIOLockedValueBox<Date?>(nil)

    init(
        fanout: Fanout, queue: DeliveryQueue, retention: InboxRetention,
        database: @escaping @Sendable () -> any Database,
        signal: WorkSignal, now: @escaping @Sendable () -> Date, logger: Logger
    ) {
        self.fanout = fanout
        self.queue = queue
        self.retention = retention
        self.database = database
        self.signal = signal
        self.now = now
        self.logger = logger
    }

    func start() {
        let task = Task {
            while !self.queue.isStopping {
                // One fan-out batch, then one round of deliveries: neither starves the other,
                // and a failure in one does not stop the other.
                var worked = false
                do {
                    worked = try await self.fanout.processBatch(on: self.database())
                } catch {
                    self.logger.error("fan-out failed", metadata: ["belfry.error": "\(String(reflecting: error))"])
                }
                do {
                    if !self.queue.isStopping, try await self.queue.runOnce() > 0 { worked = true }
                } catch {
                    self.logger.error("delivery failed", metadata: ["belfry.error": "\(String(reflecting: error))"])
                }
                await self.purgeIfDue()
                if !worked && !self.queue.isStopping { await self.signal.wait(upTo: 1) }
            }
        }
        self.task.withLockedValue { $0 = task }
    }

    /// Runs the inbox retention purge at most once an hour.
    private func purgeIfDue() async {
        let now = self.now()
        let due = lastPurge.withLockedValue { last -> Bool in
            guard last.map({ now.timeIntervalSince($0) >= 3600 }) ?? true else { return false }
            last = now
            return true
        }
        guard due else { return }
        do {
            let purged = try await retention.purge(on: database())
            if purged > 0 { logger.info("purged old inbox notifications", metadata: ["belfry.purged": "\(purged)"]) }
        } catch {
            logger.error("inbox purge failed", metadata: ["belfry.error": "\(String(reflecting: error))"])
        }
    }

    /// Stops taking new work and waits for the attempts under way to finish and be recorded.
    func stop() async {
        queue.beginStopping()
        signal.wake()
        await task.withLockedValue { $0 }?.value
    }
}
