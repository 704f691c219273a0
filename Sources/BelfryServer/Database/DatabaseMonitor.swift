import Foundation
import Logging
import NIOConcurrencyHelpers

/// Watches whether the database answers, for `/readyz`, and heals the connection pool after an
/// outage. It asks `SELECT 1` every second (four times a second while the database is down).
///
/// A pool can come out of an outage holding connections it will never get back: a query lost
/// with its connection (see `withDeadline`) keeps its connection checked out for ever, and once
/// every connection of an event loop is held so, each request on that loop waits for one in
/// vain. So when checks fail twice running, or a query outlives its deadline anywhere, the
/// monitor has the pool replaced by a new, empty one (at most every 2 s): while the database is
/// down that costs nothing, and once it is back the next query opens a fresh connection.
///
/// The parts that meet database failures report them here (`noteFailure`): for 30 s after one,
/// requests that wait on the database longer than 3 s (`DatabaseDeadlineMiddleware`) are answered
/// 503 rather than left to wait on a query that may never end.
final class DatabaseMonitor: Sendable {
    private struct State {
        var ready = true
        var failures = 0
        var lastReplaced: Date = .distantPast
        var since: Date?
        var lastFailure: Date = .distantPast
    }

    private let state = NIOLockedValueBox(State())
    /// One quick query.
    let check: @Sendable () async throws -> Void
    /// Replaces the connection pool.
    let replacePool: @Sendable () async -> Void
    let now: @Sendable () -> Date
    let logger: Logger
    static let checkDeadline: TimeInterval = 2

    init(
        check: @escaping @Sendable () async throws -> Void, replacePool: @escaping @Sendable () async -> Void,
        now: @escaping @Sendable () -> Date, logger: Logger
    ) {
        self.check = check
        self.replacePool = replacePool
        self.now = now
        self.logger = logger
    }

    /// Whether the last check found the database answering.
    var isReady: Bool { state.withLockedValue { $0.ready } }

    /// Whether the database failed someone in the last 30 s.
    var isTroubled: Bool {
        let now = self.now()
        return state.withLockedValue { !$0.ready || now.timeIntervalSince($0.lastFailure) < 30 }
    }

    /// A database failure met elsewhere. A query that outlived its deadline may have been lost
    /// with its connection, which the pool then never gets back: the pool is replaced.
    func noteFailure(_ error: any Error) {
        guard DatabaseFailure.isUnavailable(error) else { return }
        let now = self.now()
        let replace = state.withLockedValue { state -> Bool in
            state.lastFailure = now
            return error is DeadlineExceeded && Self.mayReplace(&state, now: now)
        }
        if replace {
            logger.warning("a database query outlived its deadline; replacing the connection pool")
            Task { await replacePool() }
        }
    }

    /// Whether the pool may be replaced now (at most every 2 s); if so, notes that it is.
    private static func mayReplace(_ state: inout State, now: Date) -> Bool {
        guard now.timeIntervalSince(state.lastReplaced) >= 2 else { return false }
        state.lastReplaced = now
        return true
    }

    /// Checks once; returns how long to wait before the next check.
    func step() async -> TimeInterval {
        do {
            try await withDeadline(Self.checkDeadline, "the database check", check)
            let wasDown = state.withLockedValue { state -> Date? in
                defer { state = State(lastReplaced: state.lastReplaced, lastFailure: state.lastFailure) }
                return state.ready ? nil : state.since
            }
            if let since = wasDown {
                logger.notice(
                    "the database answers again",
                    metadata: ["belfry.down_seconds": "\(String(format: "%.1f", now().timeIntervalSince(since)))"])
            }
            return 1
        } catch {
            let now = self.now()
            let (replace, first) = state.withLockedValue { state -> (Bool, Bool) in
                let first = state.ready
                state.ready = false
                state.failures += 1
                state.lastFailure = now
                if state.since == nil { state.since = now }
                return (state.failures >= 2 && Self.mayReplace(&state, now: now), first)
            }
            if first {
                logger.error(
                    "the database does not answer", metadata: ["belfry.error": "\(String(reflecting: error))"])
            }
            if replace { await replacePool() }
            return 0.25
        }
    }
}
