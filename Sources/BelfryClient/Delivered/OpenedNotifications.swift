import BelfryCore
import Foundation

/// Notifications the user opened from the system: each is marked read (and seen) on the server
/// once. The marks wait in the key-value store until the server has them, so an open made
/// offline, or just before the app was killed, still reaches the server; a lost network is
/// retried with backoff on the client's clock. The bell follows through the live stream, and
/// the next push carries the new badge.
@MainActor
public final class OpenedNotifications {
    private let api: BelfryAPI
    private let store: any KeyValueStore
    private let clock: any ClientClock
    /// Waiting to be marked read, oldest first.
    public private(set) var pending: [UUID]
    /// Marked already (the most recent ones): a second open does not mark again.
    private var marked: [UUID] = []
    private var sending: Task<Void, Never>?
    static let storeKey = "belfry.inbox.opened.v1"
    static let rememberedMarks = 200
    /// Waits between tries while the network is gone.
    static let retryDelays: [TimeInterval] = [2, 5, 15, 60]

    init(api: BelfryAPI, store: any KeyValueStore, clock: any ClientClock) {
        self.api = api
        self.store = store
        self.clock = clock
        pending =
            store.data(forKey: Self.storeKey).flatMap { try? JSONDecoder().decode([UUID].self, from: $0) } ?? []
        if !pending.isEmpty { startSending() }
    }

    /// The user opened `notification` (tapped it, or one of its actions): marks it read once and
    /// says where to go.
    /// - Parameter actionIdentifier: the action the system reports, if any.
    /// - Returns: the request for `NotificationRouter.plan`.
    @discardableResult
    public func opened(_ notification: DeliveredNotification, actionIdentifier: String? = nil) -> RouteRequest {
        if !pending.contains(notification.id) && !marked.contains(notification.id) {
            pending.append(notification.id)
            save()
            startSending()
        }
        return notification.routeRequest(actionIdentifier: actionIdentifier)
    }

    /// Returns when every waiting mark has been sent, or the network is gone (they stay queued).
    public func flush() async {
        await sending?.value
    }

    private func startSending() {
        guard sending == nil else { return }
        sending = Task { [weak self] in
            await self?.sendPending()
            self?.sending = nil
        }
    }

    private func sendPending() async {
        var failures = 0
        while let id = pending.first {
            do throws(BelfryClientError) {
                _ = try await api.send("POST", "v1/me/notifications/\(id.uuidString)/read", idempotent: true)
            } catch {
                guard error.code == .network || (error.status ?? 0) >= 500 else {
                    // Gone from the inbox (404), or refused for good: nothing left to mark.
                    done(id, marked: false)
                    continue
                }
                let delay = Self.retryDelays[min(failures, Self.retryDelays.count - 1)]
                failures += 1
                do {
                    try await clock.sleep(for: delay)
                } catch {
                    return  // Cancelled: the marks stay queued for the next launch.
                }
                continue
            }
            failures = 0
            done(id, marked: true)
        }
    }

    private func done(_ id: UUID, marked wasMarked: Bool) {
        pending.removeAll { $0 == id }
        if wasMarked {
            marked.append(id)
            if marked.count > Self.rememberedMarks { marked.removeFirst(marked.count - Self.rememberedMarks) }
        }
        save()
    }

    private func save() {
        store.set(pending.isEmpty ? nil : try? JSONEncoder().encode(pending), forKey: Self.storeKey)
    }
}
