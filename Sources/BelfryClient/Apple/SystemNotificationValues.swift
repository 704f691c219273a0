import BelfryCore
import Foundation

// The numbers Apple's UserNotifications framework uses for its options, statuses and settings
// (`UNAuthorizationOptions`, `UNAuthorizationStatus`, `UNNotificationSetting`). The adapters
// over `UNUserNotificationCenter` convert through these, so the mapping is compiled and tested
// on every platform while each adapter method stays one call into the system.

extension AuthorizationOptions {
    /// The same options as `UNAuthorizationOptions` bits: badge 1, sound 2, alert 4, provisional 64.
    var systemRawValue: UInt {
        var bits: UInt = 0
        if contains(.badge) { bits |= 1 << 0 }
        if contains(.sound) { bits |= 1 << 1 }
        if contains(.alert) { bits |= 1 << 2 }
        if contains(.provisional) { bits |= 1 << 6 }
        return bits
    }
}

extension PushAuthorization {
    /// From `UNAuthorizationStatus.rawValue`; a status newer than this SDK counts as not determined,
    /// so the app asks rather than assumes.
    init(systemRawValue: Int) {
        switch systemRawValue {
        case 1: self = .denied
        case 2: self = .authorized
        case 3: self = .provisional
        case 4: self = .ephemeral
        default: self = .notDetermined
        }
    }
}

extension PushSetting {
    /// From `UNNotificationSetting.rawValue`: 0 not supported, 1 disabled, 2 enabled.
    init(systemRawValue: Int) {
        switch systemRawValue {
        case 1: self = .disabled
        case 2: self = .enabled
        default: self = .notSupported
        }
    }
}

extension NotificationSettings {
    /// The settings from `UNNotificationSettings`' raw values.
    init(systemStatus: Int, alert: Int, sound: Int, badge: Int, notificationCenter: Int) {
        self.init(
            authorizationStatus: PushAuthorization(systemRawValue: systemStatus),
            alertSetting: PushSetting(systemRawValue: alert), soundSetting: PushSetting(systemRawValue: sound),
            badgeSetting: PushSetting(systemRawValue: badge),
            notificationCenterSetting: PushSetting(systemRawValue: notificationCenter))
    }
}

extension ScheduledNotification {
    /// The calendar fields a one-time system trigger matches to fire at `fireDate`; for a
    /// repeating calendar rule, the rule's own fields, those finer than the finest given zero
    /// (as `CalendarRule` reads them: `hour: 8` is 08:00:00).
    func systemTriggerComponents(in calendar: Calendar) -> DateComponents {
        guard case .calendar(let rule)? = repeating else {
            return calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: fireDate)
        }
        var components = DateComponents()
        components.month = rule.month
        components.day = rule.day
        components.weekday = rule.weekday
        components.hour = rule.hour ?? (rule.minute == nil ? 0 : nil)
        components.minute = rule.minute ?? 0
        components.second = 0
        return components
    }

    /// The interval of a repeating interval trigger; `nil` for any other.
    var systemRepeatingInterval: TimeInterval? {
        if case .interval(let seconds, true)? = repeating { seconds } else { nil }
    }

    /// The user info as the system keeps it and hands it back with a tap (property-list values
    /// from JSON): what ``LocalNotifications/routeRequest(userInfo:actionIdentifier:)`` reads.
    public var systemUserInfo: [AnyHashable: Any] {
        guard let data = try? JSONEncoder().encode(userInfo),
            let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
        else { return [:] }
        return object
    }

    /// A request the system lists back: how it shows follows from what its content carries.
    init(
        systemIdentifier identifier: String, title: String, body: String, fireDate: Date, hasSound: Bool,
        badge: Int?, categoryIdentifier: String = "", threadIdentifier: String = "",
        userInfo: [AnyHashable: Any] = [:]
    ) {
        var showing: Set<LocalSchedule.LocalPresentation> = []
        if !title.isEmpty || !body.isEmpty { showing.insert(.alert) }
        if hasSound { showing.insert(.sound) }
        if badge != nil { showing.insert(.badge) }
        var info: [String: JSONValue] = [:]
        for case (let key as String, let value) in userInfo {
            info[key] = JSONValue(foundation: value)
        }
        self.init(
            identifier: identifier, title: title, body: body, fireDate: fireDate, showing: showing, badge: badge,
            categoryIdentifier: categoryIdentifier.isEmpty ? nil : categoryIdentifier,
            threadIdentifier: threadIdentifier.isEmpty ? nil : threadIdentifier, userInfo: info)
    }
}
