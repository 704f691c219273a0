import NIOConcurrencyHelpers

/// Runs work for one key at a time, in the order it arrived; different keys run side by side.
///
/// On PostgreSQL, writers of one row queue on its lock while each holds a pooled connection: a
/// burst of one user's changes can hold every connection, and the last in line waits for the
/// sum of the others, long enough to time out asking the pool for one. Queued here first,
/// they wait without a connection and take one each in turn, leaving the rest of the pool to
/// everyone else. The row lock still orders writers of other processes.
final class KeyedTurns<Key: Hashable & Sendable>: Sendable {
    private struct State {
        /// For each key with work running: the callers waiting for their turn, first in line first.
        var waiting: [Key: [CheckedContinuation<Void, Never>]] = [:]
    }

    private let state = NIOLockedValueBox(State())

    /// Runs `body` once no earlier caller with `key` is running.
    func run<T: Sendable>(_ key: Key, _ body: () async throws -> T) async throws -> T {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let first = state.withLockedValue { state -> Bool in
                guard state.waiting[key] != nil else {
                    state.waiting[key] = []
                    return true
                }
                state.waiting[key]?.append(continuation)
                return false
            }
            if first { continuation.resume() }
        }
        defer {
            let next = state.withLockedValue { state -> CheckedContinuation<Void, Never>? in
                guard var line = state.waiting[key], !line.isEmpty else {
                    state.waiting[key] = nil
                    return nil
                }
                let next = line.removeFirst()
                state.waiting[key] = line
                return next
            }
            next?.resume()
        }
        return try await body()
    }

    /// Callers of `key` running or in line: 0 once its work is done, when nothing of it is kept.
    func queued(_ key: Key) -> Int {
        state.withLockedValue { $0.waiting[key].map { $0.count + 1 } ?? 0 }
    }
}
