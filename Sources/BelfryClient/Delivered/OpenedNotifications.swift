import BelfryCore
import Foundation

/// Notifications the user opened or answered from the system. An open marks the notification
/// read (and seen) on the server once; an action chosen on the notification itself (seed 003:
/// "respond to user-selected actions") is posted as the user's answer, which the server records
/// once, marks read and forwards to the app's webhook. Both wait in the key-value store until
/// the server has them, so one made offline, or just before the app was killed, still reaches
/// the server; a lost network is retried with backoff on the client's clock. The bell follows
/// through the live stream, and the next push carries the new badge.
@MainActor
public final class OpenedNotifications {
    /// One thing the server has yet to hear about a delivered notification.
    public struct Mark: Codable, Sendable, Equatable {
        public var notificationID: UUID
        /// The action the user chose; `nil`: the notification was opened.
        public var action: String?

        enum CodingKeys: String, CodingKey {
            case notificationID = "notification_id"
            case action
        }
    }

    private let api: BelfryAPI
    private let store: any KeyValueStore
    private let clock: any ClientClock
    /// Waiting for the server, oldest first.
    public private(set) var waiting: [Mark]
    /// Sent already (the most recent ones): a second open or answer does not send again.
    private var sent: [Mark] = []
    private var sending: Task<Void, Never>?
    static let storeKey = "belfry.inbox.opened.v2"
    /// Where versions before answers kept their marks: the ids of opened notifications.
    static let legacyStoreKey = "belfry.inbox.opened.v1"
    static let rememberedMarks = 200
    /// Waits between tries while the network is gone.
    static let retryDelays: [TimeInterval] = [2, 5, 15, 60]
    /// The workspace's categories as last fetched, for the actions an APNs payload only names.
    private let categories: () -> [CategoryDefinition]

    init(
        api: BelfryAPI, store: any KeyValueStore, clock: any ClientClock,
        categories: @escaping () -> [CategoryDefinition] = { [] }
    ) {
        self.api = api
        self.store = store
        self.clock = clock
        self.categories = categories
        var waiting =
            store.data(forKey: Self.storeKey).flatMap { try? JSONDecoder().decode([Mark].self, from: $0) } ?? []
        if let legacy = store.data(forKey: Self.legacyStoreKey) {
            let ids = (try? JSONDecoder().decode([UUID].self, from: legacy)) ?? []
            waiting += ids.map { Mark(notificationID: $0) }
            store.set(nil, forKey: Self.legacyStoreKey)
        }
        self.waiting = waiting
        if !waiting.isEmpty {
            save()
            startSending()
        }
    }

    /// The notifications waiting to be marked read or answered, oldest first.
    public var pending: [UUID] { waiting.map(\.notificationID) }

    /// The user opened `notification` (tapped it), or chose one of its actions on the
    /// notification itself: marks it read, or sends the answer, once, and says where to go.
    ///
    /// An action that runs in the background (its `opens_app` is false: "Thank", "Mark as read")
    /// asks for nothing to open: ``RouteRequest/actionAnswered(actionID:)``, whose plan has no
    /// steps. One that opens the app asks for its target.
    /// - Parameter actionIdentifier: the action the system reports, if any.
    /// - Returns: the request for `NotificationRouter.plan`.
    @discardableResult
    public func opened(_ notification: DeliveredNotification, actionIdentifier: String? = nil) -> RouteRequest {
        var notification = notification
        if notification.actions.isEmpty, let category = notification.category {
            // APNs names the category; its actions are the workspace's, as the app registered them.
            notification.actions = categories().first { $0.id == category }?.actions ?? []
        }
        let request = notification.routeRequest(actionIdentifier: actionIdentifier)
        let action: String? =
            switch request {
            case .actionTapped(let id, _), .actionAnswered(let id): id
            default: nil
            }
        enqueue(Mark(notificationID: notification.id, action: action))
        return request
    }

    /// Returns when every waiting mark has been sent, or the network is gone (they stay queued).
    public func flush() async {
        await sending?.value
    }

    private func enqueue(_ mark: Mark) {
        // An answer marks read as well: after one, an open has nothing left to tell.
        let known = waiting + sent
        if known.contains(mark) || (mark.action == nil && known.contains { $0.notificationID == mark.notificationID }) {
            return
        }
        waiting.append(mark)
        save()
        startSending()
    }

    private func startSending() {
        guard sending == nil else { return }
        sending = Task { [weak self] in
            await self?.sendWaiting()
            self?.sending = nil
        }
    }

    private func sendWaiting() async {
        var failures = 0
        while let mark = waiting.first {
            let id = mark.notificationID.uuidString.lowercased()
            do throws(BelfryClientError) {
                // The server keeps one answer per notification: a repeat (this retry after a
                // lost answer) records nothing and forwards nothing, so both are safe to retry.
                if let action = mark.action {
                    _ = try await api.send("POST", "v1/me/notifications/\(id)/actions/\(action)", idempotent: true)
                } else {
                    _ = try await api.send("POST", "v1/me/notifications/\(id)/read", idempotent: true)
                }
            } catch {
                guard error.code == .network || (error.status ?? 0) >= 500 else {
                    // Gone from the inbox (404), an action it does not have, or refused for good.
                    done(mark, sent: false)
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
            done(mark, sent: true)
        }
    }

    private func done(_ mark: Mark, sent wasSent: Bool) {
        waiting.removeAll { $0 == mark }
        if wasSent {
            sent.append(mark)
            if sent.count > Self.rememberedMarks { sent.removeFirst(sent.count - Self.rememberedMarks) }
        }
        save()
    }

    private func save() {
        store.set(waiting.isEmpty ? nil : try? JSONEncoder().encode(waiting), forKey: Self.storeKey)
    }
}
