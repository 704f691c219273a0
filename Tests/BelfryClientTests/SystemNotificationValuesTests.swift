import BelfryCore
import Foundation
import Testing

@testable import BelfryClient

/// The numbers the adapters over Apple's notification center convert through, checked against
/// the framework's published values (`UNAuthorizationOptions`, `UNAuthorizationStatus`,
/// `UNNotificationSetting`).
@Suite("BelfryClient system notification values")
struct SystemNotificationValuesTests {
    @Test("options map to UNAuthorizationOptions bits: badge 1, sound 2, alert 4, provisional 64")
    func options() {
        #expect(AuthorizationOptions.badge.systemRawValue == 1)
        #expect(AuthorizationOptions.sound.systemRawValue == 2)
        #expect(AuthorizationOptions.alert.systemRawValue == 4)
        #expect(AuthorizationOptions.provisional.systemRawValue == 64)
        #expect(AuthorizationOptions([.alert, .sound, .badge, .provisional]).systemRawValue == 71)
        #expect(AuthorizationOptions([]).systemRawValue == 0)
    }

    @Test("statuses and settings map from the system's raw values; unknown ones ask rather than assume")
    func statusesAndSettings() {
        let statuses = (0...5).map { PushAuthorization(systemRawValue: $0) }
        #expect(statuses == [.notDetermined, .denied, .authorized, .provisional, .ephemeral, .notDetermined])
        let settings = (0...3).map { PushSetting(systemRawValue: $0) }
        #expect(settings == [.notSupported, .disabled, .enabled, .notSupported])
        let read = NotificationSettings(systemStatus: 3, alert: 1, sound: 2, badge: 0, notificationCenter: 2)
        #expect(
            read
                == NotificationSettings(
                    authorizationStatus: .provisional, alertSetting: .disabled, soundSetting: .enabled,
                    badgeSetting: .notSupported, notificationCenterSetting: .enabled))
    }

    @Test("a scheduled notification fires at its calendar fields, and reads back as it showed")
    func scheduledRoundTrip() throws {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = try #require(TimeZone(identifier: "Europe/Berlin"))
        let fireDate = try Date("2026-03-29T01:59:30Z", strategy: .iso8601)
        let notification = ScheduledNotification(
            identifier: "reminder", title: "Reading list", body: "3 articles", fireDate: fireDate,
            showing: [.alert, .badge], badge: 3)
        let components = notification.systemTriggerComponents(in: calendar)
        #expect(calendar.date(from: components) == fireDate, "the day DST starts in Berlin")
        let listed = ScheduledNotification(
            systemIdentifier: "reminder", title: "Reading list", body: "3 articles", fireDate: fireDate,
            hasSound: false, badge: 3)
        #expect(listed == notification)
        let badgeOnly = ScheduledNotification(
            systemIdentifier: "b", title: "", body: "", fireDate: fireDate, hasSound: true, badge: nil)
        #expect(badgeOnly.showing == [.sound])
    }
}
