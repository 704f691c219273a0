import BelfryTestSupport
import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import BelfryServer

/// Waits, yielding to the services' tasks, until `condition` holds; fails after many yields.
func eventually(_ what: Comment, _ condition: () -> Bool) async {
    for _ in 0..<100_000 {
        if condition() { return }
        await Task.yield()
    }
    Issue.record("never: \(what)")
}

@Suite("Background services on a test clock")
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

    static func service(_ steps: Steps, clock: TestClock, signal: WorkSignal = WorkSignal()) -> BackgroundService {
        BackgroundService(name: "test", interval: 1, signal: signal, clock: clock, logger: .init(label: "test")) {
            steps.step()
        }
    }

    @Test("while a step finds work the next runs at once; idle, it waits its interval on the clock")
    func pollsOnTheClock() async {
        let clock = TestClock()
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
        let clock = TestClock()
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
        let clock = TestClock()
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

    @Test("a step that throws is retried after a backoff that doubles, up to the interval")
    func failureRetried() async {
        let clock = TestClock()
        let attempts = NIOLockedValueBox(0)
        struct Failure: Error {}
        // The largest jitter: each wait is its whole ceiling.
        let service = BackgroundService(
            name: "test", interval: 0.3, clock: clock, logger: .init(label: "test"), jitter: { 0.999_999 }
        ) {
            attempts.withLockedValue { $0 += 1 }
            throw Failure()
        }
        service.start()
        for (attempt, wait) in [(1, 0.1), (2, 0.2), (3, 0.3), (4, 0.3)] {
            await eventually("attempt \(attempt), then a wait") {
                attempts.withLockedValue { $0 } == attempt && clock.sleeping == 1
            }
            clock.advance(by: wait * 0.99)
            #expect(attempts.withLockedValue { $0 } == attempt, "not before \(wait) s")
            clock.advance(by: wait * 0.01)
        }
        await eventually("the fifth") { attempts.withLockedValue { $0 } == 5 }
        await service.stop()
    }

    @Test("a step that outlasts its deadline is given up on, and the next one runs")
    func stuckStep() async {
        let clock = TestClock()
        let attempts = NIOLockedValueBox(0)
        let never = WorkSignal()
        let service = BackgroundService(
            name: "test", interval: 1, clock: clock, logger: .init(label: "test"), deadline: 10, jitter: { 0 }
        ) {
            // The first step waits for ever, as a query lost with its connection does.
            if attempts.withLockedValue({
                $0 += 1; return $0
            }) == 1 {
                await never.wait()
            }
            return false
        }
        service.start()
        await eventually("the first step waits on its deadline") { clock.sleeping == 1 }
        clock.advance(by: 10)
        await eventually("given up on, and retried after a backoff") {
            attempts.withLockedValue { $0 } == 1 && clock.sleeping == 1
        }
        clock.advance(by: 0.05)
        await eventually("the second step ran") { attempts.withLockedValue { $0 } == 2 }
        never.wake()
        await service.stop()
    }
}
