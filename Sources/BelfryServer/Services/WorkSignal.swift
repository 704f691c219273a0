import Foundation
import NIOConcurrencyHelpers

/// Wakes a background service when new work is stored for it, so it need not poll often.
/// Wakes that arrive while the service is busy are remembered as one. One service waits on
/// each signal.
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

    /// Returns at the next wake, or after `seconds` on `clock` at the latest.
    func wait(upTo seconds: TimeInterval, on clock: any ServiceClock) async {
        let timer = Task {
            do {
                try await clock.sleep(for: seconds)
                self.wake()
            } catch {
                // Cancelled: the wake came first.
            }
        }
        await wait()
        timer.cancel()
    }
}
