import Foundation
import Logging
import NIOConcurrencyHelpers

/// One of the server's background loops (fan-out, the delivery queue, retention), started and
/// stopped with the server. It runs its step again at once while the step finds work, and
/// otherwise waits on its clock for a wake or its poll interval, whichever comes first. A step
/// that throws, or outlasts its deadline (a query lost with its connection), is logged and tried
/// again after a backoff that doubles with each failure in a row, jittered, up to the interval
/// and never past 5 s: one failure stops nothing, and a database that comes back is used within
/// seconds.
final class BackgroundService: Sendable {
    let name: String
    let interval: TimeInterval
    let signal: WorkSignal
    let clock: any ServiceClock
    let logger: Logger
    /// Does one piece of work; `true` when there was some, so that more may be waiting.
    let step: @Sendable () async throws -> Bool
    /// Runs before the loop is told to stop: the delivery queue returns unstarted claims here.
    let beforeStopping: @Sendable () -> Void
    /// How long one step may take before the loop gives up on it; nil for a step that runs
    /// until the service stops (it keeps deadlines of its own).
    let deadline: TimeInterval?
    /// A random number in 0..<1 for the backoff's jitter.
    let jitter: @Sendable () -> Double
    /// Hears of each failed step: the database monitor, which acts on lost queries.
    let onFailure: @Sendable (any Error) -> Void

    private struct State {
        var task: Task<Void, Never>?
        var stopping = false
    }

    private let state = NIOLockedValueBox(State())

    init(
        name: String, interval: TimeInterval, signal: WorkSignal = WorkSignal(), clock: any ServiceClock,
        logger: Logger, onFailure: @escaping @Sendable (any Error) -> Void = { _ in }, deadline: TimeInterval? = 30,
        jitter: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) },
        beforeStopping: @escaping @Sendable () -> Void = {}, step: @escaping @Sendable () async throws -> Bool
    ) {
        self.deadline = deadline
        self.jitter = jitter
        self.onFailure = onFailure
        self.name = name
        self.interval = interval
        self.signal = signal
        self.clock = clock
        self.logger = logger
        self.beforeStopping = beforeStopping
        self.step = step
    }

    var isStopping: Bool { state.withLockedValue { $0.stopping } }

    func start() {
        let task = Task {
            var failures = 0
            while !self.isStopping {
                var worked = false
                do {
                    if let deadline = self.deadline {
                        worked = try await withDeadline(deadline, self.name, clock: self.clock, self.step)
                    } else {
                        worked = try await self.step()
                    }
                    failures = 0
                } catch {
                    failures += 1
                    self.onFailure(error)
                    self.logger.error(
                        "\(self.name) failed",
                        metadata: ["belfry.error": "\(String(reflecting: error))", "belfry.failures": "\(failures)"])
                }
                if failures > 0 && !self.isStopping {
                    await self.signal.wait(upTo: self.retryDelay(afterFailures: failures), on: self.clock)
                } else if !worked && !self.isStopping {
                    await self.signal.wait(upTo: self.interval, on: self.clock)
                }
            }
        }
        state.withLockedValue { $0.task = task }
    }

    /// The loops' backoff, never longer than the interval.
    func retryDelay(afterFailures failures: Int) -> TimeInterval {
        loopBackoff(afterFailures: failures, upTo: interval, jitter: jitter())
    }

    /// Starts no new step, and waits for the one under way to finish.
    func stop() async {
        beforeStopping()
        let task = state.withLockedValue { state -> Task<Void, Never>? in
            state.stopping = true
            return state.task
        }
        signal.wake()
        await task?.value
    }
}

/// How long a loop waits after `failures` failures in a row: 0.1 s, doubling with each, at most
/// `ceiling` and 5 s, and from half to all of that by `jitter` (0..<1), so that loops that failed
/// together do not try again together.
func loopBackoff(afterFailures failures: Int, upTo ceiling: TimeInterval = 5, jitter: Double) -> TimeInterval {
    min(ceiling, 5, 0.1 * pow(2, Double(min(max(failures, 1) - 1, 10)))) * (0.5 + jitter / 2)
}
