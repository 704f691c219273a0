import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import BelfryServer

/// A clock the test moves: sleepers return when `advance` reaches their deadline.
final class ManualClock: ServiceClock {
    private struct Sleeper {
        var id: UUID
        var deadline: Date
        var continuation: CheckedContinuation<Void, any Error>
    }

    private let state = NIOLockedValueBox<(now: Date, sleepers: [Sleeper])>(
        (Date(timeIntervalSince1970: 1_800_000_000), []))

    var now: Date { state.withLockedValue { $0.now } }
    var sleeping: Int { state.withLockedValue { $0.sleepers.count } }

    func sleep(for seconds: TimeInterval) async throws {
        let id = UUID()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let resumeNow = state.withLockedValue { state -> Bool in
                    if Task.isCancelled { return true }
                    state.sleepers.append(
                        Sleeper(id: id, deadline: state.now.addingTimeInterval(seconds), continuation: continuation))
                    return false
                }
                if resumeNow { continuation.resume(throwing: CancellationError()) }
            }
        } onCancel: {
            let cancelled = state.withLockedValue { state -> Sleeper? in
                guard let index = state.sleepers.firstIndex(where: { $0.id == id }) else { return nil }
                return state.sleepers.remove(at: index)
            }
            cancelled?.continuation.resume(throwing: CancellationError())
        }
    }

    func advance(by seconds: TimeInterval) {
        let due = state.withLockedValue { state -> [Sleeper] in
            state.now.addTimeInterval(seconds)
            let now = state.now
            let due = state.sleepers.filter { $0.deadline <= now }
            state.sleepers.removeAll { $0.deadline <= now }
            return due
        }
        due.forEach { $0.continuation.resume() }
    }
}

/// Waits, yielding to the services' tasks, until `condition` holds; fails after many yields.
func eventually(_ what: Comment, _ condition: () -> Bool) async {
    for _ in 0..<100_000 {
        if condition() { return }
        await Task.yield()
    }
    Issue.record("never: \(what)")
}

@Suite("Background services on a manual clock")
struct BackgroundServiceTests {
    final class Steps: Sendable {
        private let count = NIOLockedValueBox(0)
        /// Steps that find work before the queue runs dry.
        private let pending: NIOLockedValueBox<Int>

        init(pending: Int = 0) {
            self.pending = NIOLockedValueBox(pending)
        }

        var taken: Int { count.withLockedValue { $0 } }

        func add(_ work: Int) { pending.withLockedValue { $0 += work } }

        func step() -> Bool {
            count.withLockedValue { $0 += 1 }
            return pending.withLockedValue { pending in
                guard pending > 0 else { return false }
                pending -= 1
                return true
            }
        }
    }

    static func service(_ steps: Steps, clock: ManualClock, signal: WorkSignal = WorkSignal()) -> BackgroundService {
        BackgroundService(name: "test", interval: 1, signal: signal, clock: clock, logger: .init(label: "test")) {
            steps.step()
        }
    }

    @Test("while a step finds work the next runs at once; idle, it waits its interval on the clock")
    func pollsOnTheClock() async {
        let clock = ManualClock()
        let steps = Steps(pending: 3)
        let service = Self.service(steps, clock: clock)
        service.start()
        await eventually("three steps with work, then one without, then a wait") {
            steps.taken == 4 && clock.sleeping == 1
        }
        clock.advance(by: 0.9)
        await Task.yield()
        #expect(steps.taken == 4, "not before the interval")
        clock.advance(by: 0.1)
        await eventually("the next poll") { steps.taken == 5 && clock.sleeping == 1 }
        await service.stop()
    }

    @Test("a wake runs the next step without waiting for the interval")
    func wakeSkipsTheWait() async {
        let clock = ManualClock()
        let signal = WorkSignal()
        let steps = Steps()
        let service = Self.service(steps, clock: clock, signal: signal)
        service.start()
        await eventually("idle") { steps.taken == 1 && clock.sleeping == 1 }
        steps.add(2)
        signal.wake()
        await eventually("the two pieces of work, then idle again") { steps.taken == 4 && clock.sleeping == 1 }
        #expect(clock.now == Date(timeIntervalSince1970: 1_800_000_000), "no time passed")
        await service.stop()
        #expect(clock.sleeping == 0, "stopping cancels the wait")
    }

    @Test("stop waits for the step under way, runs the stopping hook first, and starts no other")
    func stopDrains() async {
        let clock = ManualClock()
        let entered = NIOLockedValueBox(false)
        let release = WorkSignal()
        let finished = NIOLockedValueBox(0)
        let hooked = NIOLockedValueBox(false)
        let service = BackgroundService(
            name: "test", interval: 1, clock: clock, logger: .init(label: "test"),
            beforeStopping: { hooked.withLockedValue { $0 = true } }
        ) {
            entered.withLockedValue { $0 = true }
            await release.wait()
            finished.withLockedValue { $0 += 1 }
            return true
        }
        service.start()
        await eventually("the step started") { entered.withLockedValue { $0 } }
        let stopped = Task { await service.stop() }
        await eventually("the hook ran") { hooked.withLockedValue { $0 } }
        #expect(finished.withLockedValue { $0 } == 0)
        release.wake()
        await stopped.value
        #expect(finished.withLockedValue { $0 } == 1, "the step under way finished; no other started")
    }

    @Test("a step that throws is retried after the interval")
    func failureRetried() async {
        let clock = ManualClock()
        let attempts = NIOLockedValueBox(0)
        struct Failure: Error {}
        let service = BackgroundService(name: "test", interval: 5, clock: clock, logger: .init(label: "test")) {
            attempts.withLockedValue { $0 += 1 }
            throw Failure()
        }
        service.start()
        await eventually("the first attempt, then a wait") {
            attempts.withLockedValue { $0 } == 1 && clock.sleeping == 1
        }
        clock.advance(by: 5)
        await eventually("the second") { attempts.withLockedValue { $0 } == 2 && clock.sleeping == 1 }
        await service.stop()
    }
}
