import Foundation
import NIOConcurrencyHelpers

/// An operation that did not finish within its deadline.
struct DeadlineExceeded: Error, CustomStringConvertible {
    var what: String
    var seconds: TimeInterval

    var description: String { "\(what) did not finish within \(seconds) s" }
}

/// Runs `operation`, giving up on it after `seconds`: then it throws `DeadlineExceeded` and
/// leaves the operation behind (cancelled, still running until it ends by itself).
///
/// A database driver can lose a query for good: PostgresNIO drops one written to a connection
/// that closed a moment before (the server stopped), and its future never completes. A loop
/// awaiting it would wait for ever. So the background services and the delivery queue put a
/// deadline on their database work: past it they go on, and the `DatabaseMonitor` replaces
/// the connection pool that the lost query still holds a connection of.
///
/// Slow is not lost: with `alive`, the operation keeps its time past `seconds` for as long as
/// `alive` says it may still end (its connection is still open, say), up to `limit`.
func withDeadline<T: Sendable>(
    _ seconds: TimeInterval, _ what: String, clock: any ServiceClock = ServerClock(),
    extendedWhile alive: @escaping @Sendable () -> Bool = { false }, upTo limit: TimeInterval = 0,
    _ operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
        let waiting = NIOLockedValueBox<CheckedContinuation<T, any Error>?>(continuation)
        @Sendable func finish(_ result: Result<T, any Error>) {
            let continuation = waiting.withLockedValue { waiting in
                defer { waiting = nil }
                return waiting
            }
            continuation?.resume(with: result)
        }
        // The timer first, so that an operation that ends at once always finds it to cancel.
        let work = NIOLockedValueBox<Task<Void, Never>?>(nil)
        let timer = Task {
            try await clock.sleep(for: seconds)
            var waited = seconds
            while waited < limit && alive() {
                try await clock.sleep(for: 0.25)
                waited += 0.25
            }
            finish(.failure(DeadlineExceeded(what: what, seconds: waited)))
            work.withLockedValue { $0?.cancel() }
        }
        work.withLockedValue { work in
            work = Task {
                do {
                    finish(.success(try await operation()))
                } catch {
                    finish(.failure(error))
                }
                timer.cancel()
            }
        }
    }
}
