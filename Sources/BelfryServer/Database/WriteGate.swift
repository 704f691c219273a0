import NIOConcurrencyHelpers

/// Lets one write transaction of this process run at a time. SQLite has a single writer,
/// so a second write transaction could only wait for the lock while holding one of the
/// few pooled connections; queueing here keeps those free for reads. PostgreSQL does not
/// need it.
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
