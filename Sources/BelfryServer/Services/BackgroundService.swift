import Foundation
import Logging
import NIOConcurrencyHelpers

/// One of the server's background loops (fan-out, the delivery queue, retention), started and
/// stopped with the server. It runs its step again at once while the step finds work, and
/// otherwise waits on its clock for a wake or its poll interval, whichever comes first. A step
/// that throws is logged and tried again after the interval: one failure stops nothing.
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

    private struct State {
        var task: Task<Void, Never>?
        var stopping = false
    }

    private let state = NIOLockedValueBox(State())

    init(
        name: String, interval: TimeInterval, signal: WorkSignal = WorkSignal(), clock: any ServiceClock,
        logger: Logger, beforeStopping: @escaping @Sendable () -> Void = {},
        step: @escaping @Sendable () async throws -> Bool
    ) {
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
            while !self.isStopping {
                var worked = false
                do {
                    worked = try await self.step()
                } catch {
                    self.logger.error(
                        "\(self.name) failed", metadata: ["belfry.error": "\(String(reflecting: error))"])
                }
                if !worked && !self.isStopping { await self.signal.wait(upTo: self.interval, on: self.clock) }
            }
        }
        state.withLockedValue { $0.task = task }
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
