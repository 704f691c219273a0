import BelfryTestSupport
import Fluent
import Foundation
import NIOConcurrencyHelpers
import SQLKit
import Testing

@testable import BelfryServer

@Suite("Deadlines tell a slow operation from a lost one")
struct DeadlineTests {
    /// An operation that ends when the test says so.
    final class Gate: Sendable {
        private let waiting = NIOLockedValueBox<CheckedContinuation<Int, Never>?>(nil)

        var isWaiting: Bool { waiting.withLockedValue { $0 != nil } }

        func wait() async -> Int {
            await withCheckedContinuation { continuation in waiting.withLockedValue { $0 = continuation } }
        }

        func open(_ value: Int) {
            waiting.withLockedValue { waiting in
                waiting?.resume(returning: value)
                waiting = nil
            }
        }
    }

    /// Starts `withDeadline` on `clock` over a gated operation; the task's result is the
    /// operation's value or the deadline's error.
    static func start(
        clock: TestClock, gate: Gate, alive: @escaping @Sendable () -> Bool
    ) -> Task<Result<Int, any Error>, Never> {
        Task {
            do {
                return .success(
                    try await withDeadline(4, "the test", clock: clock, extendedWhile: alive, upTo: 20) {
                        await gate.wait()
                    })
            } catch {
                return .failure(error)
            }
        }
    }

    @Test("an operation that may no longer end fails at the deadline")
    func lostFailsAtTheDeadline() async {
        let clock = TestClock()
        let gate = Gate()
        let running = Self.start(clock: clock, gate: gate, alive: { false })
        await eventually("the operation runs and the timer waits") { gate.isWaiting && clock.sleeping == 1 }
        clock.advance(by: 4)
        guard case .failure(let error) = await running.value else {
            Issue.record("the operation should have failed")
            return
        }
        #expect((error as? DeadlineExceeded)?.seconds == 4)
        gate.open(0)
    }

    @Test("an operation that may still end keeps its time past the deadline, up to the limit")
    func slowKeepsItsTime() async throws {
        let clock = TestClock()
        let gate = Gate()
        let running = Self.start(clock: clock, gate: gate, alive: { true })
        await eventually("the operation runs and the timer waits") { gate.isWaiting && clock.sleeping == 1 }
        for _ in 0..<40 {
            clock.advance(by: 0.25)
            await eventually("the timer waits again") { clock.sleeping == 1 }
        }
        gate.open(7)
        guard case .success(let value) = await running.value else {
            Issue.record("the slow operation should have ended well")
            return
        }
        #expect(value == 7)

        let stuck = Gate()
        let waiting = Self.start(clock: clock, gate: stuck, alive: { true })
        await eventually("the second operation runs") { stuck.isWaiting && clock.sleeping == 1 }
        while clock.sleeping == 1 {
            clock.advance(by: 0.25)
            for _ in 0..<1000 { await Task.yield() }
        }
        guard case .failure(let error) = await waiting.value else {
            Issue.record("an operation that never ends fails at the limit")
            return
        }
        #expect((error as? DeadlineExceeded)?.seconds == 20)
        stuck.open(0)
    }

    @Test("a write whose connection the server closes fails within the deadline, not the limit")
    func watchSeesTheConnectionClose() async throws {
        guard ProcessInfo.processInfo.environment["BELFRY_TEST_POSTGRES_URL"] != nil else { return }
        try await withTestStorage(.postgres) { location in
            guard case .postgres(let url) = location else { return }
            try await withBelfryApp(location: location) { app, _ in
                let watch = ConnectionWatch()
                #expect(watch.mayEnd, "waiting for a connection, the work may still end")
                let storage = BelfryDatabase(location: location)
                let sawClose = NIOLockedValueBox(false)
                let started = Date()
                do {
                    try await withDeadline(4, "the test write", extendedWhile: { watch.mayEnd }, upTo: 20) {
                        try await storage.write(app.db) { tx in
                            await watch.note(tx)
                            #expect(watch.mayEnd, "on an open connection")
                            let pid = try await tx.sql.raw("SELECT pg_backend_pid() AS pid").first()!
                                .decode(column: "pid", as: Int.self)
                            try await PostgresTestServer.shared.psql(url, "SELECT pg_terminate_backend(\(pid))")
                            for _ in 0..<200 where watch.mayEnd { try await Task.sleep(for: .milliseconds(10)) }
                            sawClose.withLockedValue { $0 = !watch.mayEnd }
                            try await tx.sql.raw("SELECT 1").run()
                        }
                    }
                    Issue.record("a write on a closed connection cannot succeed")
                } catch {}
                #expect(sawClose.withLockedValue { $0 }, "the watch saw its connection close")
                let waited = Date().timeIntervalSince(started)
                #expect(waited < 10, "the write ended \(waited) s after it began")
            }
        }
    }
}
