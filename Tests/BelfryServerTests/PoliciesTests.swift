import BelfryCore
import BelfryTestSupport
import Foundation
import SQLKit
import Testing
import Vapor

@testable import BelfryServer

@Suite("Delivery policies: throttles and delayed fallbacks")
struct PoliciesTests {
    /// The demo workspace, with `mention` throttled to 3 an hour outside the inbox, and `reply`
    /// whose webhook waits 10 minutes unless read and whose email waits 10 minutes unless seen.
    static var workspace: WorkspaceConfig {
        var workspace = WorkspaceConfig.demo
        let mention = workspace.categories.firstIndex { $0.id == "mention" }!
        workspace.categories[mention].throttle = ThrottleRule(limit: 3, windowSeconds: 3600)
        workspace.categories[mention].channels = [.init(channel: "inbox"), .init(channel: "webhook")]
        workspace.categories.append(
            CategoryDefinition(
                id: "reply", name: "Replies", section: "talk",
                channels: [
                    .init(channel: "inbox"), .init(channel: "webhook", delaySeconds: 600, unless: .read),
                    .init(channel: "email", delaySeconds: 600, unless: .seen),
                ]))
        return workspace
    }

    static func send(_ app: Application, _ category: String, to users: [String]) async throws -> UUID {
        let id = try await app.send(
            .POST, "/v1/events", bearer: testAPIKey,
            json: EventRequest(category: category, recipients: users, content: .init(title: "T", body: "B"))
        ).decode(EventAccepted.self).eventID
        while try await app.belfryServices.fanout.processBatch(on: app.db) {}
        return id
    }

    @Test("a throttle lets the limit through per window outside the inbox, which keeps every notification")
    func throttle() async throws {
        let clock = TestClock()
        try await withBelfry(.sqlite, workspace: Self.workspace, clock: clock) { app in
            var events: [UUID] = []
            for _ in 0..<5 {
                events.append(try await Self.send(app, "mention", to: ["ada", "bob"]))
                clock.advance(by: 60)
            }
            var webhook = 0
            var throttled = 0
            for id in events {
                let status = try await APNsChannelTests.status(app, id)
                #expect(status.notifications == 2, "the inbox keeps every one")
                webhook += status.deliveries["webhook"]?["queued"] ?? 0
                throttled += status.skipped["webhook"]?["throttled"] ?? 0
            }
            #expect(webhook == 6, "3 each for ada and bob")
            #expect(throttled == 4)
            // The window slides: an hour after the first, one more gets through.
            clock.advance(by: 3600 - 5 * 60 + 1)
            let later = try await APNsChannelTests.status(app, try await Self.send(app, "mention", to: ["ada"]))
            #expect(later.deliveries["webhook"] == ["queued": 1])
            let again = try await APNsChannelTests.status(app, try await Self.send(app, "mention", to: ["ada"]))
            #expect(again.skipped["webhook"] == ["throttled": 1])
        }
    }

    @Test("fan-out workers racing on one PostgreSQL database still hold the throttle's limit")
    func throttleAcrossWorkers() async throws {
        try await withBelfry(.postgres, workspace: Self.workspace) { app in
            var events: [UUID] = []
            for _ in 0..<12 {
                let id = try await app.send(
                    .POST, "/v1/events", bearer: testAPIKey,
                    json: EventRequest(category: "mention", recipients: ["ada"], content: .init(title: "T", body: "B"))
                ).decode(EventAccepted.self).eventID
                events.append(id)
            }
            // Four workers, each with its own connections, as four instances would be.
            let fanout = app.belfryServices.fanout
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<4 {
                    group.addTask { while try await fanout.processBatch(on: app.db) {} }
                }
                try await group.waitForAll()
            }
            var webhook = 0
            var throttled = 0
            for id in events {
                let status = try await APNsChannelTests.status(app, id)
                #expect(status.state == .done)
                webhook += status.deliveries["webhook"]?["queued"] ?? 0
                throttled += status.skipped["webhook"]?["throttled"] ?? 0
            }
            #expect(webhook == 3)
            #expect(throttled == 9)
        }
    }

    @Test(
        "a delayed fallback is skipped when its notification was read (or seen) in time, and sent otherwise",
        arguments: TestDatabase.allCases)
    func fallback(database: TestDatabase) async throws {
        let receiver = try await WebhookReceiver(answers: "200")
        defer { receiver.stop() }
        let clock = TestClock()
        try await withBelfry(database, workspace: Self.workspace, clock: clock, webhook: receiver.webhook) { app in
            let ada = try await app.userToken("ada")
            let carol = try await app.userToken("carol")
            for user in ["ada", "bob", "carol"] {
                _ = try await app.putUser(user, UserUpsert(email: "\(user)@example.org"))
            }
            let id = try await Self.send(app, "reply", to: ["ada", "bob", "carol"])
            let queue = try #require(app.deliveryQueue)
            #expect(try await queue.runOnce() == 0, "nothing is due before the delay")
            // Ada reads hers one second before the delay runs out; Carol only sees hers.
            clock.advance(by: 599)
            let adaItem = try #require(try await InboxAPITests.page(app, ada).notifications.first)
            #expect(try await app.send(.POST, "/v1/me/notifications/\(adaItem.id)/read", bearer: ada).status.code < 300)
            let carolItem = try #require(try await InboxAPITests.page(app, carol).notifications.first)
            #expect(
                try await app.send(.POST, "/v1/me/notifications/\(carolItem.id)/seen", bearer: carol).status.code < 300)
            #expect(try await queue.runOnce() == 0)
            clock.advance(by: 1)
            while try await queue.runOnce() > 0 {}
            let status = try await APNsChannelTests.status(app, id)
            // Webhook (unless read): ada read it; bob and carol get it.
            #expect(status.deliveries["webhook"] == ["sent": 2])
            // Email (unless seen): ada (read counts as seen) and carol saw it; bob's has no provider here.
            #expect(status.deliveries["email"] == ["failed": 1])
            #expect(
                status.skipped["webhook"]?["read_before_fallback"] == 1
                    && status.skipped["email"]?["seen_before_fallback"] == 2,
                "\(status.skipped)")
            let delivered = try receiver.entries().compactMap { entry -> String? in
                if case .object(let body) = entry.body, case .object(let user)? = body["user"],
                    case .string(let id)? = user["id"]
                {
                    return id
                }
                return nil
            }
            #expect(delivered.sorted() == ["bob", "carol"])
        }
    }

    @Test("policy settings are checked when the workspace is read")
    func configChecks() throws {
        let file = """
            {
              "channels": [{ "id": "inbox", "kind": "inbox" }, { "id": "email", "kind": "email" }],
              "categories": [
                { "id": "a", "name": "A", "throttle": { "limit": 0, "window_seconds": 60 },
                  "channels": [{ "channel": "inbox", "delay_seconds": 60 }, { "channel": "email", "unless": "read" }] },
                { "id": "b", "name": "B", "throttle": { "limit": 3 },
                  "channels": [{ "channel": "email", "delay_seconds": 60, "unless": "read" }] },
                { "id": "c", "name": "C", "channels": ["inbox", { "channel": "email", "delay_seconds": 60, "unless": "clicked" }] }
              ],
              "tenants": [{ "id": "main" }]
            }
            """
        let error = try #require(throws: ConfigError.self) {
            try ServerConfigurationTests.resolve(env: ["BELFRY_CONFIG": "belfry.json"], file: file)
        }
        #expect(
            Set(error.issues.map(\.path)) == [
                "categories[0].throttle.limit", "categories[0].channels[0].delay_seconds",
                "categories[0].channels[1].unless", "categories[1].throttle.window_seconds",
                "categories[1].channels[0].unless", "categories[2].channels[1].unless",
            ], "\(error)")
    }
}
