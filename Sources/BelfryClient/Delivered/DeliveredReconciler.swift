import BelfryCore
import Foundation

/// Keeps the system's Notification Center in step with the inbox: a notification read or
/// archived anywhere (in the app, on the web, on another device) leaves the delivered list, and
/// the app icon's badge follows the unread count. Feed it the live stream's updates, through
/// ``BelfryClient/followPreferenceChanges(reconciling:)`` or your own loop over
/// ``Inbox/updates()``.
public struct DeliveredReconciler: Sendable {
    let scheduler: any NotificationScheduling

    /// - Parameter scheduler: the system's notification center (`SystemNotificationScheduler`),
    ///   or `InMemoryNotificationScheduler` in tests.
    public init(scheduler: any NotificationScheduling) {
        self.scheduler = scheduler
    }

    /// Acts on one update: a notification read or archived is removed from the delivered list;
    /// new counts set the badge, and with nothing unread every Belfry notification still
    /// listed goes (they were read, as with "mark all read", or archived).
    /// - Returns: the system identifiers removed.
    @discardableResult
    public func apply(_ update: InboxUpdate) async -> [String] {
        switch update {
        case .updated(let item) where item.readAt != nil || item.archivedAt != nil:
            return await remove { $0 == item.id }
        case .counts(let counts):
            await scheduler.setBadge(counts.unread)
            return counts.unread == 0 ? await remove { _ in true } : []
        default:
            return []
        }
    }

    /// Removes the delivered notifications Belfry pushed whose inbox id matches `which`.
    private func remove(where which: (UUID) -> Bool) async -> [String] {
        let gone = await scheduler.delivered().filter { $0.notificationID.map(which) ?? false }.map(\.identifier)
        if !gone.isEmpty { await scheduler.removeDelivered(identifiers: gone) }
        return gone
    }
}
