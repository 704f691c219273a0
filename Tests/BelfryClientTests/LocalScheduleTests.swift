import BelfryCore
import Foundation
import Testing

@testable import BelfryClient

/// Seed 003's local notifications: the server's triggers, and the user's settings checked first.
@Suite("BelfryClient local schedules")
struct LocalScheduleTests {
    // 2027-03-27 12:00 UTC, the day before Europe/Berlin moves to summer time.
    let now = Date(timeIntervalSince1970: 1_806_148_800)
    let berlin = TimeZone(identifier: "Europe/Berlin")!

    func request(_ trigger: Trigger, sound: Bool = true, badge: Int? = 1) -> LocalNotificationRequest {
        LocalNotificationRequest(
            identifier: "digest", title: "Your digest", body: "b", trigger: trigger, sound: sound, badge: badge)
    }

    @Test("an interval and a calendar rule fire when the server's Trigger says, read in the device's time zone")
    func fireDates() {
        let settings = NotificationSettings(authorizationStatus: .authorized)
        #expect(
            LocalSchedulePlanner.plan(
                request(.interval(600, repeats: false)), settings: settings, now: now, timeZone: berlin)
                == .scheduled(fireDate: now.addingTimeInterval(600), showing: [.alert, .sound, .badge]))
        // 08:00 on Sunday 28 March in Berlin is already summer time: 06:00 UTC.
        let eight = LocalSchedulePlanner.plan(
            request(.calendar(CalendarRule(hour: 8))), settings: settings, now: now, timeZone: berlin)
        #expect(
            eight
                == .scheduled(fireDate: Date(timeIntervalSince1970: 1_806_213_600), showing: [.alert, .sound, .badge]))
        #expect(
            LocalSchedulePlanner.plan(
                request(.calendar(CalendarRule(month: 2, day: 30))), settings: settings, now: now, timeZone: berlin)
                == .willNotFire)
    }

    @Test(
        "alert-only users get no sound or badge; provisional never sounds or badges; nothing allowed, nothing scheduled"
    )
    func settingsFirst() {
        let trigger = Trigger.interval(60, repeats: false)
        let alertOnly = NotificationSettings(
            authorizationStatus: .authorized, soundSetting: .disabled, badgeSetting: .disabled)
        #expect(
            LocalSchedulePlanner.plan(request(trigger), settings: alertOnly, now: now, timeZone: berlin)
                == .scheduled(fireDate: now.addingTimeInterval(60), showing: [.alert]))
        let provisional = NotificationSettings(authorizationStatus: .provisional)
        #expect(
            LocalSchedulePlanner.plan(request(trigger), settings: provisional, now: now, timeZone: berlin)
                == .scheduled(fireDate: now.addingTimeInterval(60), showing: [.alert]))
        for status in [PushAuthorization.denied, .notDetermined] {
            guard
                case .notAllowed = LocalSchedulePlanner.plan(
                    request(trigger), settings: NotificationSettings(authorizationStatus: status), now: now,
                    timeZone: berlin)
            else {
                Issue.record("\(status) scheduled something")
                continue
            }
        }
        let silent = NotificationSettings(
            authorizationStatus: .authorized, alertSetting: .disabled, soundSetting: .enabled, badgeSetting: .enabled,
            notificationCenterSetting: .disabled)
        #expect(
            LocalSchedulePlanner.plan(
                request(trigger, sound: false, badge: nil), settings: silent, now: now, timeZone: berlin)
                == .notAllowed("the user's settings leave no way to show it"))
    }

    @Test("the OS settings become the device's push settings, and tokens are written as lower-case hex")
    func deviceFacts() {
        let settings = NotificationSettings(
            authorizationStatus: .authorized, soundSetting: .disabled, badgeSetting: .notSupported)
        #expect(settings.pushSettings == PushSettings(alert: .enabled, sound: .disabled, badge: .notSupported))
        // Seed 003: the Notification Center setting goes to the server with the others.
        let listedOnly = NotificationSettings(
            authorizationStatus: .authorized, alertSetting: .disabled, notificationCenterSetting: .enabled)
        #expect(listedOnly.pushSettings.notificationCenter == .enabled)
        #expect(listedOnly.pushSettings.showsText)
        #expect(Data([0x0A, 0xFF, 0x00]).hexToken == "0aff00")
        #expect(AuthorizationOptions([.alert, .provisional]).contains(.provisional))
    }

    @Test("scheduling goes through the OS seam with stable identifiers: again replaces, not allowed removes")
    func schedulingSeam() async throws {
        let scheduler = InMemoryNotificationScheduler()
        let authorizer = FakeAuthorizer(.authorized)
        let clock = now
        let local = LocalNotifications(
            scheduler: scheduler, authorization: authorizer, now: { clock },
            timeZone: { TimeZone(identifier: "Europe/Berlin")! })
        try await local.schedule(request(.interval(600, repeats: false)))
        try await local.schedule(
            LocalNotificationRequest(
                identifier: "reminder", title: "Read later", body: "b", trigger: .interval(60, repeats: false)))
        #expect(await local.pending().map(\.identifier) == ["reminder", "digest"])
        // The same identifier again replaces it: one digest, at the new time.
        try await local.schedule(request(.interval(1200, repeats: false)))
        let pending = await local.pending()
        #expect(pending.map(\.identifier) == ["reminder", "digest"])
        #expect(pending.last?.fireDate == now.addingTimeInterval(1200))
        #expect(pending.last?.badge == 1)

        // The OS shows what comes due; the app can list and clear what was shown.
        #expect(await scheduler.fire(until: now.addingTimeInterval(61)).map(\.identifier) == ["reminder"])
        #expect(await local.delivered().map(\.identifier) == ["reminder"])
        await local.cancel(identifier: "reminder")
        #expect(await local.delivered().isEmpty)

        // Provisional: quiet, no badge. Denied: the pending digest is taken out.
        authorizer.set(.provisional)
        try await local.schedule(request(.interval(600, repeats: false)))
        #expect(await local.pending().first?.showing == [.alert])
        #expect(await local.pending().first?.badge == nil)
        authorizer.set(.denied)
        guard case .notAllowed = try await local.schedule(request(.interval(600, repeats: false))) else {
            Issue.record("a denied user got a schedule")
            return
        }
        #expect(await local.pending().isEmpty)
    }
}
