import BelfryCore
import Foundation
import Testing

@testable import BelfryClient

/// Issue 17 item 2, seed 003's "process already delivered notifications".
@MainActor
@Suite("BelfryClient delivered notifications")
struct OpenedNotificationsTests {
    static let id = UUID(uuidString: "0190E0F0-0000-7000-8000-000000000042")!

    @Test("an APNs userInfo and a Web Push message read into the same typed value")
    func parsing() throws {
        let userInfo: [AnyHashable: Any] = [
            "aps": [
                "alert": ["title": "Edit reverted", "body": "Your edit to Bell was undone"], "badge": 3,
                "category": "reverted", "thread-id": "edits",
            ],
            "belfry": [
                "notification_id": Self.id.uuidString.lowercased(), "tenant": "enwiki",
                "url": "https://example.org/diff/1", "data": ["revision": 42, "minor": true],
            ],
        ]
        let apns = try #require(DeliveredNotification(apnsUserInfo: userInfo))
        #expect(apns.id == Self.id)
        #expect(apns.category == "reverted")
        #expect(apns.tenant == "enwiki")
        #expect(apns.title == "Edit reverted")
        #expect(apns.url == URL(string: "https://example.org/diff/1"))
        #expect(apns.badge == 3)
        #expect(apns.data == .object(["revision": .number(42), "minor": .bool(true)]))
        #expect(DeliveredNotification(apnsUserInfo: ["aps": ["alert": "someone else's"]]) == nil)

        let message = Data(
            #"""
            {"title": "Talk page message", "body": "Linus wrote", "url": "https://example.org/talk",
             "notification_id": "0190e0f0-0000-7000-8000-000000000042", "category": "edit-user-talk",
             "tenant": "dewiki", "actions": [{"action": "reply", "title": "Reply"}], "badge": 1}
            """#.utf8)
        let web = try #require(DeliveredNotification(webPushMessage: message))
        #expect(web.id == Self.id)
        // Without `opens_app` (a server before it was sent) an action opens the app, as it did.
        #expect(web.actions == [NotificationAction(id: "reply", title: "Reply", opensApp: true)])
        #expect(web.tenant == "dewiki")
        #expect(DeliveredNotification(webPushMessage: Data("{}".utf8)) == nil)

        // A plain tap asks for the notification; an action that opens the app, for its target.
        #expect(
            web.routeRequest(actionIdentifier: "com.apple.UNNotificationDefaultActionIdentifier")
                == .notificationTapped(notificationID: Self.id))
        #expect(
            web.routeRequest(actionIdentifier: "reply")
                == .actionTapped(actionID: "reply", target: URL(string: "https://example.org/talk")))
    }

    @Test("a digest reads with its batch: the count from APNs, the count and items from Web Push")
    func batches() throws {
        let userInfo: [AnyHashable: Any] = [
            "aps": ["alert": ["title": "12 thanks", "body": "Ada thanked you, and 11 more"], "thread-id": "thanks"],
            "belfry": ["notification_id": Self.id.uuidString, "tenant": "enwiki", "batch": ["count": 12]],
        ]
        let apns = try #require(DeliveredNotification(apnsUserInfo: userInfo))
        #expect(apns.batch == NotificationBatch(count: 12, items: []))

        let message = Data(
            #"""
            {"notification_id": "0190e0f0-0000-7000-8000-000000000042", "title": "2 thanks", "body": "…",
             "batch": {"count": 2, "items": [
               {"event_id": "0190e0f0-0000-7000-8000-000000000001", "title": "Ada thanked you", "body": "for Bell",
                "url": "https://example.org/1", "data": {"page": "Bell"}, "created_at": "2026-11-24T08:00:00Z"},
               {"event_id": "0190e0f0-0000-7000-8000-000000000002", "title": "Bob thanked you", "body": "for Bell",
                "url": null, "created_at": "2026-11-24T08:00:01.250Z"}]}}
            """#.utf8)
        let web = try #require(DeliveredNotification(webPushMessage: message))
        let batch = try #require(web.batch)
        #expect(batch.count == 2)
        #expect(batch.items.map(\.title) == ["Ada thanked you", "Bob thanked you"])
        #expect(batch.items[0].data == ["page": .string("Bell")])
        #expect(batch.items[0].url == "https://example.org/1" && batch.items[1].url == nil)
        #expect(batch.items[1].createdAt == Date(timeIntervalSince1970: 1_795_507_201.25))
        #expect(DeliveredNotification(webPushMessage: Data(#"{"notification_id": "\#(Self.id)"}"#.utf8))?.batch == nil)
    }

    @Test("opening marks it read once; offline it waits in the store, and a relaunch sends it")
    func markedReadOnce() async throws {
        let clock = ManualClock()
        let offline = Switch()
        let transport = FakeTransport { request in
            if offline.isOn { throw URLError(.notConnectedToInternet) }
            return (200, ["Content-Type": "application/json"], Data("{}".utf8))
        }
        let store = InMemoryKeyValueStore()
        func client() -> BelfryClient {
            BelfryClient(
                baseURL: URL(string: "https://belfry.test")!, tokenProvider: CountingTokens(), transport: transport,
                clock: clock, store: store)
        }
        let belfry = client()
        let notification = DeliveredNotification(id: Self.id, category: "mention")
        #expect(belfry.opened.opened(notification) == .notificationTapped(notificationID: Self.id))
        await belfry.opened.flush()
        belfry.opened.opened(notification)
        await belfry.opened.flush()
        let reads = transport.requests.filter { $0.path.hasSuffix("/read") }
        #expect(reads.map(\.path) == ["/v1/me/notifications/\(Self.id.uuidString.lowercased())/read"], "once")
        #expect(reads.first?.method == "POST")

        // Offline: the mark stays queued, in the store too.
        offline.isOn = true
        let second = DeliveredNotification(id: UUID())
        belfry.opened.opened(second)
        for _ in 0..<4 {  // the request's own retries (0.5, 1, 2 s), then the queue's wait
            while clock.sleeperCount == 0 { await Task.yield() }
            await clock.advance(by: 2)
        }
        #expect(belfry.opened.pending == [second.id])
        #expect(store.data(forKey: OpenedNotifications.storeKey) != nil)

        // The app is killed; on the next launch, online again, the mark goes out.
        let before = transport.requests.count
        offline.isOn = false
        let relaunched = client()
        await relaunched.opened.flush()
        #expect(relaunched.opened.pending.isEmpty)
        #expect(
            transport.requests.dropFirst(before).contains {
                $0.path == "/v1/me/notifications/\(second.id.uuidString.lowercased())/read"
            })
        #expect(store.data(forKey: OpenedNotifications.storeKey) == nil)
    }

    /// A workspace whose `thanks` category has a background action and one that opens the app.
    static func workspaceData() throws -> Data {
        let workspace = WorkspaceConfig(
            channels: [ChannelDefinition(id: "inbox", kind: .inbox, name: "Inbox")], sections: [],
            categories: [
                CategoryDefinition(
                    id: "thanks", name: "Thanks", channels: [CategoryChannelDefinition(channel: "inbox")],
                    actions: [
                        NotificationAction(id: "thank-back", title: "Thank back"),
                        NotificationAction(id: "view", title: "View", opensApp: true),
                    ])
            ], tenants: [TenantDefinition(id: "enwiki", name: "English Wikipedia")], defaultTenant: "enwiki")
        return try JSONEncoder().encode(workspace)
    }

    @Test("an action chosen on the notification is answered once; offline it waits; a background one opens nothing")
    func actionsAnswered() async throws {
        let clock = ManualClock()
        let offline = Switch()
        let transport = FakeTransport { request in
            if offline.isOn { throw URLError(.notConnectedToInternet) }
            return (200, ["Content-Type": "application/json"], Data("{}".utf8))
        }
        let store = InMemoryKeyValueStore()
        // The categories as `notificationCategories()` kept them: APNs names only the category.
        store.set(try Self.workspaceData(), forKey: BelfryClient.workspaceKey)
        func client() -> BelfryClient {
            BelfryClient(
                baseURL: URL(string: "https://belfry.test")!, tokenProvider: CountingTokens(), transport: transport,
                clock: clock, store: store)
        }
        let belfry = client()
        let url = URL(string: "https://example.org/wiki/Bell")!
        let thanked = DeliveredNotification(id: Self.id, category: "thanks", url: url)
        let answered = belfry.opened.opened(thanked, actionIdentifier: "thank-back")
        #expect(answered == .actionAnswered(actionID: "thank-back"))
        let plan = NotificationRouter.plan(for: answered, activity: .background, navigation: NavigationState())
        #expect(plan.steps.isEmpty, "a background action opens no screen")
        await belfry.opened.flush()
        let path = "/v1/me/notifications/\(Self.id.uuidString.lowercased())/actions/thank-back"
        #expect(transport.requests.filter { $0.path == path }.count == 1)
        // Answered twice (the system reported it again), or opened after: nothing more is sent.
        belfry.opened.opened(thanked, actionIdentifier: "thank-back")
        belfry.opened.opened(thanked)
        await belfry.opened.flush()
        #expect(transport.requests.filter { $0.path.contains(Self.id.uuidString.lowercased()) }.count == 1)

        // One that opens the app routes to the notification's target, and is answered too.
        let viewed = DeliveredNotification(id: UUID(), category: "thanks", url: url)
        let request = belfry.opened.opened(viewed, actionIdentifier: "view")
        #expect(request == .actionTapped(actionID: "view", target: url))
        #expect(
            NotificationRouter.plan(for: request, activity: .foreground, navigation: NavigationState()).steps == [
                .openTarget(url)
            ])
        await belfry.opened.flush()
        #expect(transport.requests.contains { $0.path.hasSuffix("\(viewed.id.uuidString.lowercased())/actions/view") })

        // Offline: the answer waits in the store, and a relaunch sends it.
        offline.isOn = true
        let later = DeliveredNotification(id: UUID(), category: "thanks")
        belfry.opened.opened(later, actionIdentifier: "thank-back")
        for _ in 0..<4 {
            while clock.sleeperCount == 0 { await Task.yield() }
            await clock.advance(by: 2)
        }
        #expect(belfry.opened.waiting == [.init(notificationID: later.id, action: "thank-back")])
        offline.isOn = false
        let relaunched = client()
        await relaunched.opened.flush()
        #expect(relaunched.opened.waiting.isEmpty)
        #expect(
            transport.requests.filter { $0.path.hasSuffix("\(later.id.uuidString.lowercased())/actions/thank-back") }
                .count >= 1)
        #expect(store.data(forKey: OpenedNotifications.storeKey) == nil)
    }

    @Test("a refused answer (an action the server does not know) is dropped, not retried for ever")
    func refusedAnswer() async throws {
        let transport = FakeTransport { request in
            (
                404, ["Content-Type": "application/json"],
                Data(#"{"error":{"code":"action_not_found","message":"no"}}"#.utf8)
            )
        }
        let belfry = BelfryClient(
            baseURL: URL(string: "https://belfry.test")!, tokenProvider: CountingTokens(), transport: transport,
            clock: ManualClock(), store: InMemoryKeyValueStore())
        // Web Push lists the actions with whether they open the app.
        let message = Data(
            #"{"notification_id": "\#(Self.id)", "actions": [{"action": "nope", "title": "Nope", "opens_app": false}]}"#
                .utf8)
        let delivered = try #require(DeliveredNotification(webPushMessage: message))
        #expect(belfry.opened.opened(delivered, actionIdentifier: "nope") == .actionAnswered(actionID: "nope"))
        await belfry.opened.flush()
        #expect(belfry.opened.waiting.isEmpty)
        #expect(transport.requests.count == 1)
    }

    @Test("marks kept by an earlier version (ids of opened notifications) are sent after an update")
    func legacyMarks() async throws {
        let transport = FakeTransport()
        let store = InMemoryKeyValueStore()
        store.set(try JSONEncoder().encode([Self.id]), forKey: OpenedNotifications.legacyStoreKey)
        let belfry = BelfryClient(
            baseURL: URL(string: "https://belfry.test")!, tokenProvider: CountingTokens(), transport: transport,
            clock: ManualClock(), store: store)
        await belfry.opened.flush()
        #expect(transport.requests.map(\.path) == ["/v1/me/notifications/\(Self.id.uuidString.lowercased())/read"])
        #expect(store.data(forKey: OpenedNotifications.legacyStoreKey) == nil)
        #expect(store.data(forKey: OpenedNotifications.storeKey) == nil)
    }
}
