import Foundation
import NIOConcurrencyHelpers

/// Live inbox events for the streams open on this process, by user.
///
/// Each stream has a bounded buffer (the newest events win), so a slow client never holds up
/// publishers or other streams. Recent events of users with an open stream (or one closed in the
/// last few minutes) are kept for a short window, so a reconnecting client sends `Last-Event-ID`
/// and gets what it missed. Event ids are per process.
final class InboxHub: Sendable {
    struct Event: Sendable, Equatable {
        var id: Int
        var name: String
        /// The event's JSON.
        var data: String
    }

    private struct State {
        var nextID = 1
        var subscribers: [UUID: [UUID: AsyncStream<Event>.Continuation]] = [:]
        var recent: [UUID: [(event: Event, at: Date)]] = [:]
        /// When each user's last stream closed, to keep their recent events a while longer.
        var lastClosed: [UUID: Date] = [:]
        var finished = false
    }

    static let replayWindow: TimeInterval = 300
    static let replayLimit = 200
    static let bufferPerStream = 256

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

    /// Opens a stream of `user`'s events, with what they missed since `lastEventID` first.
    func subscribe(user: UUID, lastEventID: Int?) -> (events: AsyncStream<Event>, close: @Sendable () -> Void) {
        let now = self.now()
        let key = UUID()
        let (stream, continuation) = AsyncStream<Event>.makeStream(
            bufferingPolicy: .bufferingNewest(Self.bufferPerStream))
        let finished = state.withLockedValue { state -> Bool in
            if let lastEventID {
                for (event, at) in state.recent[user] ?? []
                where event.id > lastEventID && now.timeIntervalSince(at) < Self.replayWindow {
                    continuation.yield(event)
                }
            }
            guard !state.finished else { return true }
            state.subscribers[user, default: [:]][key] = continuation
            return false
        }
        if finished { continuation.finish() }
        let close: @Sendable () -> Void = { [weak self] in
            guard let self else { return }
            let now = self.now()
            self.state.withLockedValue { state in
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
            continuation.finish()
        }
        continuation.onTermination = { _ in close() }
        return (stream, close)
    }

    func publish(to user: UUID, name: String, data: String) {
        let now = self.now()
        let (event, targets) = state.withLockedValue { state -> (Event, [AsyncStream<Event>.Continuation]) in
            let event = Event(id: state.nextID, name: name, data: data)
            state.nextID += 1
            var recent = (state.recent[user] ?? []).filter { now.timeIntervalSince($0.at) < Self.replayWindow }
            recent.append((event, now))
            state.recent[user] = Array(recent.suffix(Self.replayLimit))
            return (event, Array((state.subscribers[user] ?? [:]).values))
        }
        for continuation in targets { continuation.yield(event) }
    }

    /// Ends every stream, at shutdown.
    func finishAll() {
        let all = state.withLockedValue { state -> [AsyncStream<Event>.Continuation] in
            state.finished = true
            return state.subscribers.values.flatMap { Array($0.values) }
        }
        all.forEach { $0.finish() }
    }
}
