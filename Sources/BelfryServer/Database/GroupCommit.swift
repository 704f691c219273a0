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
///
/// With `spareAfter`, lanes beyond the first are spares: one opens only once every lane in use
/// has been committing for that long (one stuck on a lost connection, say), and closes as soon
/// as another lane is moving again. A busy spell then shares one lane, in groups as large as the
/// callers waiting make them, rather than splitting them into as many small groups as lanes.
final class GroupCommit<Item: Sendable>: Sendable {
    /// Commits a group: each item's error (nil: committed) in order, or throws when the group as a
    /// whole failed to commit. `begun`, called once the group's commit has started for good,
    /// hands its lane to the next group at once (calling it again does nothing).
    typealias Commit =
        @Sendable (_ items: [Item], _ begun: @escaping @Sendable () -> Void) async throws -> [(any Error)?]

    /// A lane, by number; `State.lanes` holds when the group it commits began.
    private typealias Lane = UInt64

    private enum Turn: Sendable {
        /// Commit the next group, in `Lane`: this caller's item and those waiting.
        case lead(Lane)
        /// The group holding this caller's item has ended, with this item's error if any.
        case done((any Error)?)
    }

    private struct Waiter {
        let item: Item
        let turn: CheckedContinuation<Turn, Never>
    }

    private struct State {
        /// Lanes committing a group, by when their group began.
        var lanes: [Lane: ContinuousClock.Instant] = [:]
        var nextLane: Lane = 0
        var waiting: [Waiter] = []
        /// Whether a check for opening a spare lane is due.
        var spareCheck = false

        /// Groups being committed.
        var committing: Int { lanes.count }

        mutating func open(at now: ContinuousClock.Instant) -> Lane {
            nextLane += 1
            lanes[nextLane] = now
            return nextLane
        }

        /// Whether every lane but `except` has committed its group for `spareAfter` or longer.
        func allStuck(for spareAfter: Duration, at now: ContinuousClock.Instant, except: Lane? = nil) -> Bool {
            lanes.allSatisfy { $0.key == except || now - $0.value >= spareAfter }
        }
    }

    private let state = NIOLockedValueBox(State())
    /// The most items one commit takes, so that a crowd of callers is not one huge rollback.
    let maxGroup: Int

    /// How many groups may be committing at once: one for a single writer, more where each
    /// group has a connection of its own.
    let lanes: Int

    /// Lanes after the first open only once every lane in use has committed for this long;
    /// nil: every lane is open to the next group.
    let spareAfter: Duration?

    /// What times the spare lanes: the server's real clock; a test's, moved by hand.
    private let clock: any ServiceClock
    private let now: @Sendable () -> ContinuousClock.Instant

    init(
        maxGroup: Int, lanes: Int = 1, spareAfter: Duration? = nil,
        clock: any ServiceClock = ServerClock(), now: @escaping @Sendable () -> ContinuousClock.Instant = { .now }
    ) {
        precondition(lanes > 0, "a group commit needs a lane")
        self.maxGroup = maxGroup
        self.lanes = lanes
        self.spareAfter = spareAfter
        self.clock = clock
        self.now = now
    }

    /// Callers waiting for their group's turn.
    var waiting: Int { state.withLockedValue { $0.waiting.count } }

    /// Commits `item` with those waiting beside it, through the `commit` of whoever leads its group.
    func run(_ item: Item, commit: Commit) async throws {
        let turn = await withCheckedContinuation { (continuation: CheckedContinuation<Turn, Never>) in
            let now = self.now()
            let (lane, check) = state.withLockedValue { state -> (Lane?, ContinuousClock.Instant?) in
                if state.committing == 0
                    || (state.committing < lanes && spareAfter.map { state.allStuck(for: $0, at: now) } ?? true)
                {
                    return (state.open(at: now), nil)
                }
                state.waiting.append(Waiter(item: item, turn: continuation))
                return (nil, armSpareCheck(&state))
            }
            if let lane { continuation.resume(returning: .lead(lane)) }
            if let check { checkSpare(at: check) }
        }
        let error: (any Error)? =
            switch turn {
            case .done(let error): error
            case .lead(let lane): await lead(with: item, in: lane, commit)
            }
        if let error { throw error }
    }

    /// Commits `own` and the items waiting as one group, tells their callers, and hands the turn
    /// to the next caller waiting (or gives it up), unless the commit did so when it began.
    private func lead(with own: Item, in lane: Lane, _ commit: Commit) async -> (any Error)? {
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
            if first { self.handOn(lane) }
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

    /// Hands `lane` straight to the next caller waiting, who leads the next group; or closes it
    /// when none waits, or when it is a spare no longer needed (another lane is moving and will
    /// take the callers waiting).
    private func handOn(_ lane: Lane) {
        let now = self.now()
        let (next, check) = state.withLockedValue { state -> (Waiter?, ContinuousClock.Instant?) in
            let spareNotNeeded =
                state.committing > 1 && spareAfter.map { !state.allStuck(for: $0, at: now, except: lane) } ?? false
            guard !state.waiting.isEmpty, !spareNotNeeded else {
                state.lanes[lane] = nil
                // Those still waiting have a lane free for them, should the one moving stick.
                return (nil, state.waiting.isEmpty ? nil : armSpareCheck(&state))
            }
            state.lanes[lane] = now
            return (state.waiting.removeFirst(), nil)
        }
        next?.turn.resume(returning: .lead(lane))
        if let check { checkSpare(at: check) }
    }

    /// When a caller waits with a spare lane free: the moment to see whether to open it (when the
    /// youngest lane in use will have committed for `spareAfter`), unless a check is due already.
    private func armSpareCheck(_ state: inout State) -> ContinuousClock.Instant? {
        guard let spareAfter, !state.spareCheck, state.committing < lanes,
            let youngest = state.lanes.values.max()
        else { return nil }
        state.spareCheck = true
        return youngest + spareAfter
    }

    /// At `moment`, opens a spare lane for the first caller waiting if every lane in use is still
    /// committing the group it had then; else looks again when the youngest will have been.
    private func checkSpare(at moment: ContinuousClock.Instant) {
        Task {
            let wait = moment - self.now()
            if wait > .zero {
                try? await clock.sleep(for: wait.inSeconds)
            }
            let now = self.now()
            let (lead, again) = state.withLockedValue { state -> ((Waiter, Lane)?, ContinuousClock.Instant?) in
                state.spareCheck = false
                guard let spareAfter, !state.waiting.isEmpty, state.committing < lanes else { return (nil, nil) }
                guard state.allStuck(for: spareAfter, at: now) else { return (nil, armSpareCheck(&state)) }
                return ((state.waiting.removeFirst(), state.open(at: now)), nil)
            }
            if let (waiter, lane) = lead { waiter.turn.resume(returning: .lead(lane)) }
            if let again { checkSpare(at: again) }
        }
    }
}
