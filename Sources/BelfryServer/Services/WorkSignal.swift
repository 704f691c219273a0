import NIOConcurrencyHelpers

/// Wakes the delivery worker when new work is stored, so it need not poll often.
/// Wakes that arrive while the worker is busy are remembered as one.
final class WorkSignal: Sendable {
    private struct State {
        var pending = false
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let state = NIOLockedValueBox(State())

    func wake() {
        let waiter = state.withLockedValue { state -> CheckedContinuation<Void, Never>? in
            guard let waiter = state.waiter else {
                state.pending = true
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    /// Returns at the next wake, or at once if one came since the last wait.
    func wait() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resumeNow = state.withLockedValue { state -> Bool in
                if state.pending {
                    state.pending = false
                    return true
                }
                state.waiter = continuation
                return false
            }
            if resumeNow { continuation.resume() }
        }
    }

    /// Returns at the next wake, or after `seconds` at the latest.
    func wait(upTo seconds: Double) async {
        let timer = Task {
            try? await Task.sleep(for: .seconds(seconds))
            if !Task.isCancelled { self.wake() }
        }
        await wait()
        timer.cancel()
    }
}
