import BelfryCore
import Foundation

/// A local notification as handed to the OS: when it fires and how it may show.
public struct ScheduledNotification: Sendable, Equatable {
    public var identifier: String
    public var title: String
    public var body: String
    public var fireDate: Date
    public var showing: Set<LocalSchedule.LocalPresentation>
    public var badge: Int?

    public init(
        identifier: String, title: String, body: String, fireDate: Date,
        showing: Set<LocalSchedule.LocalPresentation>, badge: Int? = nil
    ) {
        self.identifier = identifier
        self.title = title
        self.body = body
        self.fireDate = fireDate
        self.showing = showing
        self.badge = badge
    }
}

/// The OS's store of local notifications (Apple's `UNUserNotificationCenter`: `add`,
/// `pendingNotificationRequests`, `removePendingNotificationRequests`,
/// `deliveredNotifications`, `removeDeliveredNotifications`), behind a protocol so that the
/// SDK schedules the same way on Linux and in tests. Adding a request whose identifier is
/// pending replaces it, as the OS does.
public protocol NotificationScheduling: Sendable {
    func add(_ notification: ScheduledNotification) async throws
    func pending() async -> [ScheduledNotification]
    func removePending(identifiers: [String]) async
    /// Notifications shown and still in the Notification Center.
    func delivered() async -> [ScheduledNotification]
    func removeDelivered(identifiers: [String]) async
}

/// `NotificationScheduling` in memory: what a test or a Linux build uses. `fire(until:)`
/// plays the OS's part, moving what has come due to the delivered list.
public actor InMemoryNotificationScheduler: NotificationScheduling {
    private var waiting: [String: ScheduledNotification] = [:]
    private var shown: [ScheduledNotification] = []

    public init() {}

    public func add(_ notification: ScheduledNotification) {
        waiting[notification.identifier] = notification
    }

    public func pending() -> [ScheduledNotification] {
        waiting.values.sorted { ($0.fireDate, $0.identifier) < ($1.fireDate, $1.identifier) }
    }

    public func removePending(identifiers: [String]) {
        identifiers.forEach { waiting[$0] = nil }
    }

    public func delivered() -> [ScheduledNotification] { shown }

    public func removeDelivered(identifiers: [String]) {
        shown.removeAll { identifiers.contains($0.identifier) }
    }

    /// Shows every pending notification due by `date`, as the OS would.
    /// - Returns: what was shown, in order.
    @discardableResult
    public func fire(until date: Date) -> [ScheduledNotification] {
        let due = pending().filter { $0.fireDate <= date }
        for notification in due {
            waiting[notification.identifier] = nil
            // A notification shown again replaces the earlier one with its identifier.
            shown.removeAll { $0.identifier == notification.identifier }
            shown.append(notification)
        }
        return due
    }
}

/// Local notifications scheduled through the OS seam after the user's settings are checked
/// (`LocalSchedulePlanner`). The identifier is the request's own and stable: scheduling the
/// same one again replaces it, and a request the settings no longer allow is taken out.
public struct LocalNotifications: Sendable {
    let scheduler: any NotificationScheduling
    let authorization: any NotificationAuthorizing
    let now: @Sendable () -> Date
    let timeZone: @Sendable () -> TimeZone

    /// - Parameters:
    ///   - scheduler: the OS's store (or `InMemoryNotificationScheduler`).
    ///   - authorization: where the current settings come from.
    ///   - now: the clock; `timeZone`: the device's, where calendar rules are read.
    public init(
        scheduler: any NotificationScheduling, authorization: any NotificationAuthorizing,
        now: @escaping @Sendable () -> Date = { Date() }, timeZone: @escaping @Sendable () -> TimeZone = { .current }
    ) {
        self.scheduler = scheduler
        self.authorization = authorization
        self.now = now
        self.timeZone = timeZone
    }

    /// Plans `request` against the current settings and schedules it, replacing any pending
    /// request with its identifier; when it cannot be shown or will not fire, removes it.
    /// - Returns: what the planner decided.
    /// - Throws: what the OS's `add` throws.
    @discardableResult
    public func schedule(_ request: LocalNotificationRequest) async throws -> LocalSchedule {
        let plan = LocalSchedulePlanner.plan(
            request, settings: await authorization.notificationSettings(), now: now(), timeZone: timeZone())
        guard case .scheduled(let fireDate, let showing) = plan else {
            await scheduler.removePending(identifiers: [request.identifier])
            return plan
        }
        try await scheduler.add(
            ScheduledNotification(
                identifier: request.identifier, title: request.title, body: request.body, fireDate: fireDate,
                showing: showing, badge: showing.contains(.badge) ? request.badge : nil))
        return plan
    }

    /// Removes a request, whether it is still pending or already shown.
    public func cancel(identifier: String) async {
        await scheduler.removePending(identifiers: [identifier])
        await scheduler.removeDelivered(identifiers: [identifier])
    }

    public func pending() async -> [ScheduledNotification] { await scheduler.pending() }
    public func delivered() async -> [ScheduledNotification] { await scheduler.delivered() }
}
