import BelfryCore
import Foundation

/// A notification the app generates itself (seed 003's local notifications).
public struct LocalNotificationRequest: Sendable, Equatable {
    public var identifier: String
    public var title: String
    public var body: String
    /// When it fires; a repeating interval or calendar rule fires again until cancelled.
    public var trigger: Trigger
    /// Whether to play a sound and set the badge, where the user allows it.
    public var sound: Bool
    public var badge: Int?
    /// A registered category, whose actions the notification shows.
    public var categoryIdentifier: String?
    /// Groups it with others in the Notification Center.
    public var threadIdentifier: String?
    /// Where a tap takes the user: ``LocalNotifications/routeRequest(userInfo:actionIdentifier:)``
    /// reads it back for the router.
    public var url: URL?
    /// The app's own values, handed back with the tap.
    public var userInfo: [String: JSONValue]

    public init(
        identifier: String, title: String, body: String, trigger: Trigger, sound: Bool = true, badge: Int? = nil,
        categoryIdentifier: String? = nil, threadIdentifier: String? = nil, url: URL? = nil,
        userInfo: [String: JSONValue] = [:]
    ) {
        self.identifier = identifier
        self.title = title
        self.body = body
        self.trigger = trigger
        self.sound = sound
        self.badge = badge
        self.categoryIdentifier = categoryIdentifier
        self.threadIdentifier = threadIdentifier
        self.url = url
        self.userInfo = userInfo
    }

    /// The user info the system keeps: the app's values, and under `belfry` what routing reads
    /// (the request's identifier and target).
    var systemUserInfo: [String: JSONValue] {
        var belfry: [String: JSONValue] = ["local": .string(identifier)]
        if let url { belfry["url"] = .string(url.absoluteString) }
        var info = userInfo
        info["belfry"] = .object(belfry)
        return info
    }
}

/// What scheduling a local notification comes to.
public enum LocalSchedule: Sendable, Equatable {
    /// Due at `fireDate`, shown in these ways.
    case scheduled(fireDate: Date, showing: Set<LocalPresentation>)
    /// The user's settings do not let it be shown; nothing is scheduled.
    case notAllowed(String)
    /// The trigger will not fire again (a date rule nothing matches, a zero interval).
    case willNotFire

    public enum LocalPresentation: String, Sendable, CaseIterable {
        case alert, sound, badge
    }
}

/// Plans local notifications with the same `Trigger` as the server's schedules, and checks the
/// OS's authorization and settings first: an alert-only user gets no sound or badge, a
/// denied user gets nothing scheduled.
public enum LocalSchedulePlanner {
    /// - Parameters:
    ///   - now: the moment of scheduling (for a repeating trigger, the last time it fired).
    ///   - timeZone: where calendar rules are read: the device's own.
    public static func plan(
        _ request: LocalNotificationRequest, settings: NotificationSettings, now: Date, timeZone: TimeZone
    ) -> LocalSchedule {
        guard settings.authorizationStatus.allowsDelivery else {
            return .notAllowed("notifications are \(settings.authorizationStatus.rawValue) for this app")
        }
        var showing: Set<LocalSchedule.LocalPresentation> = []
        if settings.alertSetting == .enabled || settings.notificationCenterSetting == .enabled {
            showing.insert(.alert)
        }
        // A provisional authorization delivers quietly to the Notification Center: it "doesn't
        // give your app permission to … play sounds, or badge the app icon" (seed 003).
        let quiet = settings.authorizationStatus == .provisional
        if request.sound, settings.soundSetting == .enabled, !quiet { showing.insert(.sound) }
        if request.badge != nil, settings.badgeSetting == .enabled, !quiet { showing.insert(.badge) }
        guard !showing.isEmpty else { return .notAllowed("the user's settings leave no way to show it") }
        // The system repeats an interval only from a minute up (`UNTimeIntervalNotificationTrigger`).
        if case .interval(let seconds, true) = request.trigger, seconds < 60 {
            return .notAllowed("a repeating interval must be at least 60 seconds, got \(seconds)")
        }
        guard let fireDate = request.trigger.nextDate(after: now, in: timeZone) else { return .willNotFire }
        return .scheduled(fireDate: fireDate, showing: showing)
    }
}
