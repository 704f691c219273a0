import BelfryCore
import Foundation

/// A local notification as handed to the OS: when it fires, whether it repeats, how it may
/// show, and what a tap on it carries back (its category, thread and user info). The system's
/// delivered list reads back into the same value, remote notifications included.
public struct ScheduledNotification: Sendable, Equatable {
    public var identifier: String
    public var title: String
    public var body: String
    /// The next time it fires.
    public var fireDate: Date
    /// For a repeating notification, its trigger (a repeating interval or calendar rule): the
    /// system fires it again at each next date, until it is removed.
    public var repeating: Trigger?
    public var showing: Set<LocalSchedule.LocalPresentation>
    public var badge: Int?
    /// The registered category whose actions it shows (see ``NotificationCategoryRegistration``).
    public var categoryIdentifier: String?
    /// Groups it with others in the Notification Center.
    public var threadIdentifier: String?
    /// What the app reads back when it is tapped: JSON values, as the system keeps them.
    public var userInfo: [String: JSONValue]

    public init(
        identifier: String, title: String, body: String, fireDate: Date,
        showing: Set<LocalSchedule.LocalPresentation>, badge: Int? = nil, repeating: Trigger? = nil,
        categoryIdentifier: String? = nil, threadIdentifier: String? = nil, userInfo: [String: JSONValue] = [:]
    ) {
        self.identifier = identifier
        self.title = title
        self.body = body
        self.fireDate = fireDate
        self.showing = showing
        self.badge = badge
        self.repeating = repeating
        self.categoryIdentifier = categoryIdentifier
        self.threadIdentifier = threadIdentifier
        self.userInfo = userInfo
    }

    /// The inbox notification it shows, for one Belfry pushed (`belfry.notification_id` in its
    /// user info); `nil` for the app's own local notifications and other senders' pushes.
    public var notificationID: UUID? {
        guard case .object(let belfry)? = userInfo["belfry"], case .string(let id)? = belfry["notification_id"]
        else { return nil }
        return UUID(uuidString: id)
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
    /// Sets the app icon's badge (Apple's `setBadgeCount`); 0 clears it.
    func setBadge(_ count: Int) async
}

/// `NotificationScheduling` in memory: what a test or a Linux build uses. `fire(until:)`
/// plays the OS's part, moving what has come due to the delivered list.
public actor InMemoryNotificationScheduler: NotificationScheduling {
    private var waiting: [String: ScheduledNotification] = [:]
    private var shown: [ScheduledNotification] = []
    /// The app icon's badge, as last set.
    public private(set) var badge: Int?
    /// Where repeating calendar rules are read.
    private let timeZone: TimeZone

    public init(timeZone: TimeZone = .current) {
        self.timeZone = timeZone
    }

    public func setBadge(_ count: Int) {
        badge = count
    }

    /// Puts a notification in the delivered list as the system does when a push arrives.
    public func deliver(_ notification: ScheduledNotification) {
        shown.removeAll { $0.identifier == notification.identifier }
        shown.append(notification)
    }

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
        var fired: [ScheduledNotification] = []
        while let next = pending().first(where: { $0.fireDate <= date }) {
            waiting[next.identifier] = nil
            // A notification shown again replaces the earlier one with its identifier.
            deliver(next)
            fired.append(next)
            // A repeating one waits for its next date.
            if let trigger = next.repeating, let again = trigger.nextDate(after: next.fireDate, in: timeZone) {
                var repeated = next
                repeated.fireDate = again
                waiting[next.identifier] = repeated
            }
        }
        return fired
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
                showing: showing, badge: showing.contains(.badge) ? request.badge : nil,
                repeating: request.trigger.repeats ? request.trigger : nil,
                categoryIdentifier: request.categoryIdentifier, threadIdentifier: request.threadIdentifier,
                userInfo: request.systemUserInfo))
        return plan
    }

    /// What a tap on one of the app's local notifications asks the router for, read from the
    /// notification's user info (`userInfo` of the system's response): its target, or the
    /// target of the action chosen.
    /// - Returns: `nil` for a notification these did not schedule.
    public static func routeRequest(
        userInfo: [AnyHashable: Any], actionIdentifier: String? = nil
    ) -> RouteRequest? {
        guard let belfry = userInfo["belfry"] as? [String: Any], let identifier = belfry["local"] as? String
        else { return nil }
        let target = (belfry["url"] as? String).flatMap(URL.init(string:))
        if let actionIdentifier, !DeliveredNotification.systemActions.contains(actionIdentifier) {
            return .actionTapped(actionID: actionIdentifier, target: target)
        }
        return .localNotificationTapped(identifier: identifier, target: target)
    }

    /// Removes a request, whether it is still pending or already shown.
    public func cancel(identifier: String) async {
        await scheduler.removePending(identifiers: [identifier])
        await scheduler.removeDelivered(identifiers: [identifier])
    }

    public func pending() async -> [ScheduledNotification] { await scheduler.pending() }
    public func delivered() async -> [ScheduledNotification] { await scheduler.delivered() }
}
