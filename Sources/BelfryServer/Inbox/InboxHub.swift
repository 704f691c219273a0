import Foundation
import NIOConcurrencyHelpers

/// Live inbox events for the streams open on this process, by user.
///
/// Publishing hands each stream its items and returns: a stream writes on its own connection's
/// event loop, and one that stops reading ends (``InboxStreamWriter``), so a slow client never
/// holds up publishers or other streams. Recent events of users with an open stream (or one closed in the
/// last few minutes) are kept for a short window, so a reconnecting client sends `Last-Event-ID`
/// and gets what it missed. Event ids are per process.
final class InboxHub: Sendable {
    struct Event: Sendable, Equatable {
        var id: Int
        var name: String
        /// The event's JSON.
        var data: String
    }

    /// What a stream is handed: events published together (written in one go), a heartbeat,
    /// or the end of its token's life.
    enum Item: Sendable, Equatable {
        case events([Event])
        case heartbeat
        case tokenExpired(Date)
    }

    private struct Subscriber {
        var stream: InboxStreamWriter
        var expiresAt: Date
    }

    private struct State {
        var nextID = 1
        var subscribers: [UUID: [UUID: Subscriber]] = [:]
        var recent: [UUID: [(event: Event, at: Date)]] = [:]
        /// When each user's last stream closed, to keep their recent events a while longer.
        var lastClosed: [UUID: Date] = [:]
        var finished = false
        var tickerStarted = false
    }

    static let replayWindow: TimeInterval = 300
    static let replayLimit = 200
    /// Writes a stream may have waiting for its socket (or items waiting for its response to
    /// start) before it ends.
    static let bufferPerStream = 256
    /// Every open stream gets a comment this often, so that proxies keep it open and a client
    /// that went away is noticed.
    static let heartbeatSeconds = 15

    private let state = NIOLockedValueBox(State())
    /// The server's clock.
    private let now: @Sendable () -> Date

    init(now: @escaping @Sendable () -> Date) {
        self.now = now
    }

    /// Whether anyone may want `user`'s events: publishers skip building them otherwise.
    func isFollowed(_ user: UUID) -> Bool {
        let now = self.now()
        return state.withLockedValue { state in
            !(state.subscribers[user]?.isEmpty ?? true)
                || state.lastClosed[user].map { now.timeIntervalSince($0) < Self.replayWindow } ?? false
        }
    }

    /// Users with an open stream here.
    func followedUsers() -> [UUID] {
        state.withLockedValue { Array($0.subscribers.keys) }
    }

    /// Streams open on this instance.
    var openStreams: Int {
        state.withLockedValue { state in state.subscribers.values.reduce(0) { $0 + $1.count } }
    }

    /// Adds `stream` to `user`'s streams, with what they missed since `lastEventID` first. The
    /// stream gets a heartbeat every 15 seconds, and `tokenExpired` once `expiresAt` has passed;
    /// when it ends, for whatever reason, it leaves the hub.
    /// - Returns: false, adding nothing, when `user` has `limit` streams open here already.
    @discardableResult
    func subscribe(
        user: UUID, lastEventID: Int?, expiresAt: Date = .distantFuture, limit: Int = .max, stream: InboxStreamWriter
    ) -> Bool {
        let now = self.now()
        let key = UUID()
        let (opened, finished, startTicker) = state.withLockedValue { state -> (Bool, Bool, Bool) in
            guard (state.subscribers[user]?.count ?? 0) < limit else { return (false, false, false) }
            if let lastEventID {
                let missed = (state.recent[user] ?? []).filter {
                    $0.event.id > lastEventID && now.timeIntervalSince($0.at) < Self.replayWindow
                }
                // Under the lock, so that no event published meanwhile is written before these.
                // (The stream cannot call back into the hub yet: `onEnd` comes below.)
                if !missed.isEmpty { stream.send(.events(missed.map(\.event))) }
            }
            guard !state.finished else { return (true, true, false) }
            state.subscribers[user, default: [:]][key] = Subscriber(stream: stream, expiresAt: expiresAt)
            defer { state.tickerStarted = true }
            return (true, false, !state.tickerStarted)
        }
        guard opened else { return false }
        stream.onEnd { [weak self] in self?.remove(key, of: user) }
        if finished { stream.finish() }
        if startTicker { startTicking() }
        return true
    }

    private func remove(_ key: UUID, of user: UUID) {
        let now = self.now()
        state.withLockedValue { state in
            state.subscribers[user]?[key] = nil
            if state.subscribers[user]?.isEmpty ?? false { state.subscribers[user] = nil }
            state.lastClosed[user] = now
            // Forget users whose replay window has passed and who have no stream open.
            for (other, closed) in state.lastClosed
            where now.timeIntervalSince(closed) >= Self.replayWindow && state.subscribers[other] == nil {
                state.lastClosed[other] = nil
                state.recent[other] = nil
            }
        }
    }

    /// Sends events to `user`'s streams together: each stream writes them in one go.
    func publish(to user: UUID, _ events: [(name: String, data: String)]) {
        guard !events.isEmpty else { return }
        let now = self.now()
        let (batch, targets) = state.withLockedValue { state -> ([Event], [InboxStreamWriter]) in
            let batch = events.map { name, data in
                defer { state.nextID += 1 }
                return Event(id: state.nextID, name: name, data: data)
            }
            var recent = (state.recent[user] ?? []).filter { now.timeIntervalSince($0.at) < Self.replayWindow }
            recent.append(contentsOf: batch.map { ($0, now) })
            state.recent[user] = Array(recent.suffix(Self.replayLimit))
            return (batch, (state.subscribers[user] ?? [:]).values.map(\.stream))
        }
        for stream in targets { stream.send(.events(batch)) }
    }

    /// One task for every stream's timers: a second's tick ends the streams whose token expired,
    /// and every 15th sends all of them a heartbeat. (A task or two per stream cost more memory
    /// than the stream itself.)
    private func startTicking() {
        Task { [weak self] in
            var tick = 0
            while true {
                try? await Task.sleep(for: .seconds(1))
                guard let self, self.tick(heartbeat: tick % Self.heartbeatSeconds == Self.heartbeatSeconds - 1) else {
                    return
                }
                tick += 1
            }
        }
    }

    /// - Returns: whether to go on ticking.
    private func tick(heartbeat: Bool) -> Bool {
        let now = self.now()
        let (running, expired, beating) = state.withLockedValue {
            state -> (Bool, [(InboxStreamWriter, Date)], [InboxStreamWriter]) in
            guard !state.finished else { return (false, [], []) }
            var expired: [(InboxStreamWriter, Date)] = []
            var beating: [InboxStreamWriter] = []
            for streams in state.subscribers.values {
                for subscriber in streams.values {
                    if subscriber.expiresAt <= now {
                        expired.append((subscriber.stream, subscriber.expiresAt))
                    } else if heartbeat {
                        beating.append(subscriber.stream)
                    }
                }
            }
            return (true, expired, beating)
        }
        for (stream, at) in expired { stream.send(.tokenExpired(at)) }
        for stream in beating { stream.send(.heartbeat) }
        return running
    }

    /// Ends every stream, at shutdown.
    func finishAll() {
        let all = state.withLockedValue { state -> [InboxStreamWriter] in
            state.finished = true
            return state.subscribers.values.flatMap { $0.values.map(\.stream) }
        }
        all.forEach { $0.finish() }
    }
}
