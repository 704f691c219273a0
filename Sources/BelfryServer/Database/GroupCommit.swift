import NIOConcurrencyHelpers

/// Commits the items of concurrent callers in groups, up to `lanes` groups at a time. A caller
/// arriving while every lane is committing waits, and then everyone who waited goes in the next
/// group (up to `maxGroup`): under load a commit holds many items, and alone a caller commits at
/// once. Every caller returns only once the group holding its item has committed, with its own
/// item's error if any. There is no thread of its own: a caller whose turn it is commits the
/// group, then hands the turn to the next caller waiting.
///
/// A commit may hand its lane on before it ends, by calling `begun`: where commits queue for one
/// writer of their own (SQLite's write gate), the next group then gathers and queues while this
/// one is written, and the writer finds it waiting instead of idling until it arrives.
final class GroupCommit<Item: Sendable>: Sendable {
    /// Commits a group: each item's error (nil: committed) in order, or throws when the group as a
    /// whole failed to commit. `begun`, called once the group's commit has started for good,
    /// hands its lane to the next group at once (calling it again does nothing).
    typealias Commit =
        @Sendable (_ items: [Item], _ begun: @escaping @Sendable () -> Void) async throws -> [(any Error)?]

    private enum Turn: Sendable {
        /// Commit the next group: this caller's item and those waiting.
        case lead
        /// The group holding this caller's item has ended, with this item's error if any.
        case done((any Error)?)
    }

    private struct Waiter {
        let item: Item
        let turn: CheckedContinuation<Turn, Never>
    }

    private struct State {
        /// Groups being committed.
        var committing = 0
        var waiting: [Waiter] = []
    }

    private let state = NIOLockedValueBox(State())
    /// The most items one commit takes, so that a crowd of callers is not one huge rollback.
    let maxGroup: Int

    /// How many groups may be committing at once: one for a single writer, more where each
    /// group has a connection of its own.
    let lanes: Int

    init(maxGroup: Int, lanes: Int = 1) {
        precondition(lanes > 0, "a group commit needs a lane")
        self.maxGroup = maxGroup
        self.lanes = lanes
    }

    /// Callers waiting for their group's turn.
    var waiting: Int { state.withLockedValue { $0.waiting.count } }

    /// Commits `item` with those waiting beside it, through the `commit` of whoever leads its group.
    func run(_ item: Item, commit: Commit) async throws {
        let turn = await withCheckedContinuation { (continuation: CheckedContinuation<Turn, Never>) in
            let leads = state.withLockedValue { state -> Bool in
                guard state.committing == lanes else {
                    state.committing += 1
                    return true
                }
                state.waiting.append(Waiter(item: item, turn: continuation))
                return false
            }
            if leads { continuation.resume(returning: .lead) }
        }
        let error: (any Error)? =
            switch turn {
            case .done(let error): error
            case .lead: await lead(with: item, commit)
            }
        if let error { throw error }
    }

    /// Commits `own` and the items waiting as one group, tells their callers, and hands the turn
    /// to the next caller waiting (or gives it up), unless the commit did so when it began.
    private func lead(with own: Item, _ commit: Commit) async -> (any Error)? {
        let others = state.withLockedValue { state -> [Waiter] in
            let group = Array(state.waiting.prefix(maxGroup - 1))
            state.waiting.removeFirst(group.count)
            return group
        }
        let handed = NIOLockedValueBox(false)
        let handOn: @Sendable () -> Void = {
            let first = handed.withLockedValue { handed -> Bool in
                defer { handed = true }
                return !handed
            }
            if first { self.handOn() }
        }
        let errors: [(any Error)?]
        do {
            errors = try await commit([own] + others.map(\.item), handOn)
        } catch {
            errors = Array(repeating: error, count: others.count + 1)
        }
        for (waiter, error) in zip(others, errors.dropFirst()) { waiter.turn.resume(returning: .done(error)) }
        handOn()
        return errors[0]
    }

    /// Hands the lane straight to the next caller waiting, who leads the next group, or gives it
    /// up when none waits.
    private func handOn() {
        let next = state.withLockedValue { state -> Waiter? in
            guard !state.waiting.isEmpty else {
                state.committing -= 1
                return nil
            }
            return state.waiting.removeFirst()
        }
        next?.turn.resume(returning: .lead)
    }
}
