import NIOConcurrencyHelpers

/// Lets one write transaction run at a time. SQLite has a single writer: two deferred
/// transactions that both upgrade to writing fail with `SQLITE_BUSY` instead of waiting,
/// so writes queue here. PostgreSQL does not need it.
final class WriteGate: Sendable {
    private struct State {
        var busy = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = NIOLockedValueBox(State())

    func run<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        await acquire()
        defer { release() }
        return try await body()
    }

    private func acquire() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let enter = state.withLockedValue { state -> Bool in
                guard state.busy else {
                    state.busy = true
                    return true
                }
                state.waiters.append(continuation)
                return false
            }
            if enter { continuation.resume() }
        }
    }

    private func release() {
        let next = state.withLockedValue { state -> CheckedContinuation<Void, Never>? in
            guard !state.waiters.isEmpty else {
                state.busy = false
                return nil
            }
            // The gate stays busy: it passes straight to the next waiter.
            return state.waiters.removeFirst()
        }
        next?.resume()
    }
}
