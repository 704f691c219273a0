import BelfryCore
import NIOConcurrencyHelpers

/// How many deliveries may be under way at once: per channel kind, as each provider declares
/// (its connections or streams), and per origin within a kind, so that one slow host (a Web Push
/// service, a webhook receiver) holds only its own share and never the other kinds' slots.
final class DeliverySlots: Sendable {
    struct Limit: Sendable, Equatable {
        var perKind: Int
        var perOrigin: Int
    }

    private struct Waiter {
        var origin: String?
        var turn: CheckedContinuation<Void, Never>
    }

    private struct State {
        var running: [ChannelKind: Int] = [:]
        var byOrigin: [String: Int] = [:]
        /// Callers of `acquire` waiting for a slot, by kind, first come first served.
        var waiting: [ChannelKind: ArraySlice<Waiter>] = [:]
    }

    private let state = NIOLockedValueBox(State())
    let limits: [ChannelKind: Limit]
    /// Called when a kind has enough free slots for another claim to be worth its statement.
    private let onFree: @Sendable () -> Void

    init(limits: [ChannelKind: Limit], onFree: @escaping @Sendable () -> Void = {}) {
        self.limits = limits
        self.onFree = onFree
    }

    func limit(of kind: ChannelKind) -> Limit {
        limits[kind] ?? Limit(perKind: 16, perOrigin: 16)
    }

    /// Free slots below which a kind is not claimed for: a claim is a statement (on SQLite a
    /// write), so it waits until it can fetch a quarter of the kind's slots at once.
    private func lowWater(of kind: ChannelKind) -> Int {
        max(1, limit(of: kind).perKind / 4)
    }

    /// The kinds worth claiming for now, with how many each can start.
    func wanted(among kinds: some Sequence<ChannelKind>) -> [ChannelKind: Int] {
        state.withLockedValue { state in
            var wanted: [ChannelKind: Int] = [:]
            for kind in kinds {
                let free = limit(of: kind).perKind - state.running[kind, default: 0]
                if free >= lowWater(of: kind) { wanted[kind] = free }
            }
            return wanted
        }
    }

    /// Takes `count` of `kind`'s slots for deliveries claimed and not yet read (their origins
    /// unknown yet): the next claim then asks only for what is left. Each is later given its
    /// origin (`takeOrigin`) or given back (`release(kind, origin: nil)`).
    func reserve(_ kind: ChannelKind, count: Int) {
        guard count > 0 else { return }
        state.withLockedValue { $0.running[kind, default: 0] += count }
    }

    /// Takes up to `count` of `kind`'s free slots, as `reserve` does, for deliveries whose
    /// origins are not known to the slots yet. - Returns: how many it took.
    func reserve(upTo count: Int, of kind: ChannelKind) -> Int {
        state.withLockedValue { state in
            let taken = max(0, min(count, limit(of: kind).perKind - state.running[kind, default: 0]))
            state.running[kind, default: 0] += taken
            return taken
        }
    }

    /// Gives a reserved slot of `kind` its `origin`, if that origin has room.
    func takeOrigin(_ kind: ChannelKind, origin: String?) -> Bool {
        state.withLockedValue { state in takeOrigin(kind, origin, &state) }
    }

    /// Takes a slot for `kind` and `origin`, waiting for one to come free.
    func acquire(_ kind: ChannelKind, origin: String?) async {
        await withCheckedContinuation { (turn: CheckedContinuation<Void, Never>) in
            let now = state.withLockedValue { state -> Bool in
                if state.waiting[kind, default: []].isEmpty, take(kind, origin, &state) { return true }
                state.waiting[kind, default: []].append(Waiter(origin: origin, turn: turn))
                return false
            }
            if now { turn.resume() }
        }
    }

    /// Gives back a slot taken for `kind` and `origin`.
    func release(_ kind: ChannelKind, origin: String?) {
        let (turns, crossed) = state.withLockedValue { state -> ([CheckedContinuation<Void, Never>], Bool) in
            let before = limit(of: kind).perKind - state.running[kind, default: 0]
            state.running[kind, default: 0] -= 1
            if let origin {
                let key = Self.key(kind, origin)
                state.byOrigin[key, default: 1] -= 1
                if state.byOrigin[key] == 0 { state.byOrigin[key] = nil }
            }
            // The kind's waiters in turn, while it has a free slot: usually the first takes it
            // and the kind is full again. Those whose origin is full wait on.
            var turns: [CheckedContinuation<Void, Never>] = []
            if var waiting = state.waiting.removeValue(forKey: kind) {
                var index = waiting.startIndex
                while index < waiting.endIndex, state.running[kind, default: 0] < limit(of: kind).perKind {
                    if take(kind, waiting[index].origin, &state) {
                        turns.append(waiting[index].turn)
                        if index == waiting.startIndex {
                            waiting.removeFirst()
                            index = waiting.startIndex
                        } else {
                            waiting.remove(at: index)
                        }
                    } else {
                        index += 1
                    }
                }
                if !waiting.isEmpty { state.waiting[kind] = waiting }
            }
            let after = limit(of: kind).perKind - state.running[kind, default: 0]
            return (turns, before < lowWater(of: kind) && after >= lowWater(of: kind))
        }
        turns.forEach { $0.resume() }
        if crossed { onFree() }
    }

    /// Deliveries under way for `kind`.
    func running(_ kind: ChannelKind) -> Int {
        state.withLockedValue { $0.running[kind, default: 0] }
    }

    /// Callers waiting for a slot, of every kind.
    var waiting: Int {
        state.withLockedValue { $0.waiting.values.reduce(0) { $0 + $1.count } }
    }

    private func take(_ kind: ChannelKind, _ origin: String?, _ state: inout State) -> Bool {
        guard state.running[kind, default: 0] < limit(of: kind).perKind, takeOrigin(kind, origin, &state) else {
            return false
        }
        state.running[kind, default: 0] += 1
        return true
    }

    /// Counts `origin` in, if it has room within `kind`'s share (no origin: always).
    private func takeOrigin(_ kind: ChannelKind, _ origin: String?, _ state: inout State) -> Bool {
        guard let origin else { return true }
        let key = Self.key(kind, origin)
        guard state.byOrigin[key, default: 0] < limit(of: kind).perOrigin else { return false }
        state.byOrigin[key, default: 0] += 1
        return true
    }

    private static func key(_ kind: ChannelKind, _ origin: String) -> String {
        "\(kind.rawValue) \(origin)"
    }
}
