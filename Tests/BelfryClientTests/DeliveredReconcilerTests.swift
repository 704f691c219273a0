import BelfryCore
import Foundation
import Testing

@testable import BelfryClient

/// Issue 37 items 2–4: repeating and routable local notifications, the Notification Center
/// kept in step with the inbox, and background pushes.
@MainActor
@Suite("BelfryClient: local repeats, reconciling delivered notifications, background pushes")
struct DeliveredReconcilerTests {
    nonisolated static let now = Date(timeIntervalSince1970: 1_795_507_200)  // 2026-11-24 08:00 UTC, a Tuesday

    /// A push Belfry sent, as the system lists it delivered.
    static func pushed(_ id: UUID, system identifier: String) -> ScheduledNotification {
        ScheduledNotification(
            identifier: identifier, title: "Thanks", body: "Ada thanked you", fireDate: now, showing: [.alert],
            userInfo: ["belfry": .object(["notification_id": .string(id.uuidString.lowercased())])])
    }

    static func item(_ id: UUID, read: Bool = false, archived: Bool = false) -> InboxNotification {
        InboxNotification(
            id: id, category: "thanks", tenant: "enwiki", title: "Thanks", body: "b", url: nil, data: nil,
            actions: [], createdAt: now, seenAt: nil, readAt: read ? now : nil, archivedAt: archived ? now : nil)
    }

    @Test("a repeating interval and a calendar rule fire again and again; a tap is routed from the user info")
    func repeatingAndRoutable() async throws {
        let scheduler = InMemoryNotificationScheduler(timeZone: TimeZone(identifier: "UTC")!)
        let local = LocalNotifications(
            scheduler: scheduler, authorization: FakeAuthorizer(.authorized), now: { Self.now },
            timeZone: { TimeZone(identifier: "UTC")! })
        let target = URL(string: "https://example.org/wiki/Special:ReadingLists")!
        try await local.schedule(
            LocalNotificationRequest(
                identifier: "saved", title: "Saved articles", body: "3 to read",
                trigger: .interval(3600, repeats: true),
                categoryIdentifier: "reading", threadIdentifier: "saved", url: target,
                userInfo: ["list": .string("default")]))
        try await local.schedule(
            LocalNotificationRequest(
                identifier: "weekly", title: "This week", body: "b",
                trigger: .calendar(CalendarRule(weekday: 2, hour: 8, repeats: true))))
        let saved = try #require(await local.pending().first { $0.identifier == "saved" })
        #expect(saved.repeating == .interval(3600, repeats: true))
        #expect(saved.categoryIdentifier == "reading" && saved.threadIdentifier == "saved")
        #expect(saved.userInfo["list"] == .string("default"))
        #expect(saved.notificationID == nil, "the app's own, not one of Belfry's pushes")

        // Three hours: the hourly one fires three times and is still pending; the weekly one waits.
        let fired = await scheduler.fire(until: Self.now.addingTimeInterval(3 * 3600))
        #expect(fired.map(\.identifier) == ["saved", "saved", "saved"])
        #expect(await local.pending().map(\.identifier) == ["saved", "weekly"])
        // Monday 08:00 UTC (six days on), and the Monday after.
        let monday = Self.now.addingTimeInterval(6 * 86400)
        #expect(await local.pending().last?.fireDate == monday)
        let weeks = await scheduler.fire(until: monday.addingTimeInterval(7 * 86400)).filter {
            $0.identifier == "weekly"
        }
        #expect(weeks.map(\.fireDate) == [monday, monday.addingTimeInterval(7 * 86400)])

        // The system hands the user info back with the tap: the router opens the target.
        let request = try #require(
            LocalNotifications.routeRequest(userInfo: saved.systemUserInfo, actionIdentifier: nil))
        #expect(request == .localNotificationTapped(identifier: "saved", target: target))
        #expect(
            NotificationRouter.plan(for: request, activity: .foreground, navigation: NavigationState()).steps == [
                .openTarget(target)
            ])
        #expect(
            LocalNotifications.routeRequest(userInfo: saved.systemUserInfo, actionIdentifier: "snooze")
                == .actionTapped(actionID: "snooze", target: target))
        #expect(LocalNotifications.routeRequest(userInfo: ["aps": [:]], actionIdentifier: nil) == nil)
        let plain = try #require(
            LocalNotifications.routeRequest(
                userInfo: (await local.pending().last ?? saved).systemUserInfo, actionIdentifier: nil))
        #expect(NotificationRouter.plan(for: plain, activity: .coldLaunch, navigation: NavigationState()).steps.isEmpty)
    }

    @Test("the system trigger of a repeating rule is the rule's fields; a repeating interval under a minute is refused")
    func systemTriggers() throws {
        let weekly = ScheduledNotification(
            identifier: "w", title: "t", body: "b", fireDate: Self.now, showing: [.alert],
            repeating: .calendar(CalendarRule(weekday: 2, hour: 8, repeats: true)))
        let components = weekly.systemTriggerComponents(in: Calendar(identifier: .gregorian))
        #expect(components.weekday == 2 && components.hour == 8 && components.minute == 0 && components.second == 0)
        #expect(components.year == nil && components.day == nil)
        let once = ScheduledNotification(identifier: "o", title: "t", body: "b", fireDate: Self.now, showing: [.alert])
        var utc = Calendar(identifier: .gregorian)
        utc.timeZone = TimeZone(identifier: "UTC")!
        #expect(once.systemTriggerComponents(in: utc).year == 2026)
        #expect(once.systemRepeatingInterval == nil)
        #expect(
            ScheduledNotification(
                identifier: "i", title: "t", body: "b", fireDate: Self.now, showing: [.alert],
                repeating: .interval(120, repeats: true)
            ).systemRepeatingInterval == 120)

        let settings = NotificationSettings(
            authorizationStatus: .authorized, alertSetting: .enabled, soundSetting: .enabled, badgeSetting: .enabled,
            notificationCenterSetting: .enabled)
        let tooOften = LocalNotificationRequest(
            identifier: "x", title: "t", body: "b", trigger: .interval(30, repeats: true))
        guard
            case .notAllowed(let reason) = LocalSchedulePlanner.plan(
                tooOften, settings: settings, now: Self.now, timeZone: .current)
        else {
            Issue.record("a 30-second repeat was scheduled")
            return
        }
        #expect(reason.contains("60 seconds"))
    }

    @Test(
        "read or archived elsewhere: the delivered notification goes, the badge follows; nothing unread clears them all"
    )
    func reconciles() async throws {
        let scheduler = InMemoryNotificationScheduler()
        let (first, second, third) = (UUID(), UUID(), UUID())
        await scheduler.deliver(Self.pushed(first, system: "apns-1"))
        await scheduler.deliver(Self.pushed(second, system: "apns-2"))
        await scheduler.deliver(Self.pushed(third, system: "apns-3"))
        await scheduler.deliver(
            ScheduledNotification(identifier: "reminder", title: "t", body: "b", fireDate: Self.now, showing: [.alert]))
        let reconciler = DeliveredReconciler(scheduler: scheduler)

        #expect(await reconciler.apply(.updated(Self.item(first))).isEmpty, "seen or unread changes nothing")
        #expect(await reconciler.apply(.updated(Self.item(first, read: true))) == ["apns-1"])
        #expect(await reconciler.apply(.updated(Self.item(second, archived: true))) == ["apns-2"])
        #expect(await reconciler.apply(.counts(InboxCounts(unread: 1, unseen: 1))).isEmpty)
        #expect(await scheduler.badge == 1)
        #expect(await scheduler.delivered().map(\.identifier) == ["apns-3", "reminder"])
        // "Mark all read" elsewhere: the stream sends counts only.
        #expect(await reconciler.apply(.counts(InboxCounts(unread: 0, unseen: 0))) == ["apns-3"])
        #expect(await scheduler.badge == 0)
        #expect(await scheduler.delivered().map(\.identifier) == ["reminder"], "the app's own notifications stay")
    }

    static func backgroundPush() -> [AnyHashable: Any] {
        ["aps": ["content-available": 1], "belfry": ["notification_id": UUID().uuidString.lowercased()]]
    }

    @Test("a background push refreshes counts, badge and preferences once, however many arrive together")
    func backgroundPush() async throws {
        let gate = Switch()
        let unread = Switch()
        let clock = ManualClock()
        let transport = FakeTransport { request in
            switch request.path {
            case "/v1/me/notifications/counts":
                return (
                    200, ["Content-Type": "application/json"],
                    Data(#"{"unread": \#(unread.isOn ? 4 : 3), "unseen": 1}"#.utf8)
                )
            case "/v1/me/preferences":
                return (
                    200, ["Content-Type": "application/json", "ETag": gate.isOn ? "\"v2\"" : "\"v1\""],
                    Fixtures.json(PreferenceData(sections: []))
                )
            default:
                return (404, [:], Data())
            }
        }
        let belfry = BelfryClient(
            baseURL: URL(string: "https://belfry.test")!, tokenProvider: CountingTokens(), transport: transport,
            clock: clock, store: InMemoryKeyValueStore())
        _ = await belfry.preferences.getPreferences(args: .init(tenantId: "enwiki"))
        let scheduler = InMemoryNotificationScheduler()
        let push = Self.backgroundPush()
        #expect(BelfryClient.isBackgroundPush(userInfo: push))
        #expect(!BelfryClient.isBackgroundPush(userInfo: ["aps": ["alert": "hi"], "belfry": [:]]))
        #expect(BelfryClient.isBackgroundPush(userInfo: ["background": "1", "notification_id": "x"]), "FCM data")
        #expect(await belfry.handleBackgroundPush(userInfo: ["aps": ["alert": "hi"]]) == .noData)
        #expect(transport.requests.filter { $0.path.hasSuffix("/counts") }.isEmpty)

        // Three pushes at once: one refresh.
        let pushes = (0..<3).map { _ in
            Task { await belfry.handleBackgroundPush(userInfo: Self.backgroundPush(), badge: scheduler) }
        }
        var results: [BackgroundFetchResult] = []
        for push in pushes { results.append(await push.value) }
        #expect(results == [.newData, .newData, .newData])
        #expect(transport.requests.filter { $0.path.hasSuffix("/counts") }.count == 1)
        #expect(await scheduler.badge == 3)

        // Nothing changed since: no data. Then the preferences change on the server: new data.
        #expect(await belfry.handleBackgroundPush(userInfo: push, badge: scheduler) == .noData)
        gate.isOn = true
        #expect(await belfry.handleBackgroundPush(userInfo: push, badge: scheduler) == .newData)
        unread.isOn = true
        #expect(await belfry.handleBackgroundPush(userInfo: push, badge: scheduler) == .newData)
        #expect(await scheduler.badge == 4)
        // Offline: after the request's own retries (0.5, 1, 2 s on the client's clock), failed.
        transport.answer { _ in throw URLError(.notConnectedToInternet) }
        let failing = Task { await belfry.handleBackgroundPush(userInfo: Self.backgroundPush(), badge: scheduler) }
        for _ in 0..<3 {
            while clock.sleeperCount == 0 { await Task.yield() }
            await clock.advance(by: 2)
        }
        #expect(await failing.value == .failed)
    }
}
