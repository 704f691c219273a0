import Foundation
import NIOConcurrencyHelpers

/// One finished attempt, waiting to be recorded.
struct AttemptResult: Sendable {
    var delivery: Delivery
    var result: DeliveryResult
    var maxAttempts: Int
    var started: Date
    var finished: Date
}

/// Attempts finished but not yet recorded. Attempts add their results as they end; the queue's
/// recorder takes all that are waiting at once and records them in one transaction (group
/// commit), so the database sees one write per batch, not one per delivery. When `capacity`
/// results wait, attempts wait to add theirs: a slow database slows the sends, never the memory.
final class PendingResults: Sendable {
    private struct State {
        var results: [AttemptResult] = []
        var taker: CheckedContinuation<Void, Never>?
        var adders: [CheckedContinuation<Void, Never>] = []
        var finished = false
    }

    private let state = NIOLockedValueBox(State())
    let capacity: Int

    init(capacity: Int = 4096) {
        self.capacity = capacity
    }

    func add(_ result: AttemptResult) async {
        while true {
            let (added, taker) = state.withLockedValue {
                state -> (Bool, CheckedContinuation<Void, Never>?) in
                guard state.results.count < capacity else { return (false, nil) }
                state.results.append(result)
                defer { state.taker = nil }
                return (true, state.taker)
            }
            if added {
                taker?.resume()
                return
            }
            await withCheckedContinuation { (turn: CheckedContinuation<Void, Never>) in
                let roomNow = state.withLockedValue { state -> Bool in
                    guard state.results.count >= capacity else { return true }
                    state.adders.append(turn)
                    return false
                }
                if roomNow { turn.resume() }
            }
        }
    }

    /// Up to `limit` results, waiting for the first; empty once finished and all are taken.
    func take(upTo limit: Int) async -> [AttemptResult] {
        while true {
            let (batch, adders, done) = state.withLockedValue {
                state -> ([AttemptResult], [CheckedContinuation<Void, Never>], Bool) in
                guard !state.results.isEmpty else { return ([], [], state.finished) }
                let batch = Array(state.results.prefix(limit))
                state.results.removeFirst(batch.count)
                defer { state.adders = [] }
                return (batch, state.adders, false)
            }
            adders.forEach { $0.resume() }
            if !batch.isEmpty || done { return batch }
            await withCheckedContinuation { (turn: CheckedContinuation<Void, Never>) in
                let readyNow = state.withLockedValue { state -> Bool in
                    guard state.results.isEmpty && !state.finished else { return true }
                    state.taker = turn
                    return false
                }
                if readyNow { turn.resume() }
            }
        }
    }

    /// No more results will come: `take` returns what is left, then nothing.
    func finish() {
        let taker = state.withLockedValue { state -> CheckedContinuation<Void, Never>? in
            state.finished = true
            defer { state.taker = nil }
            return state.taker
        }
        taker?.resume()
    }
}
