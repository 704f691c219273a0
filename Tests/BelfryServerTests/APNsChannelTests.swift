import BelfryCore
import BelfryTestServers
import BelfryTestSupport
import Foundation
import NIOConcurrencyHelpers
import Testing
import Vapor

@testable import BelfryServer

/// The APNs channel against a local TLS + HTTP/2 server that checks requests as Apple's does.
@Suite("APNs channel", .serialized)
struct APNsChannelTests {
    static func settings(_ server: APNsTestServer) -> (inout ServerConfiguration) -> Void {
        { settings in
            settings.apns = .init(
                keyPEM: server.keyPEM, keyID: server.keyID, teamID: server.teamID, topic: "org.example.reader",
                url: server.url)
            settings.extraCertificatesPEM = server.authority.certificatePEM
        }
    }

    static func withAPNs(
        _ database: TestDatabase = .sqlite, clock: TestClock = TestClock(),
        _ body: (Application, APNsTestServer) async throws -> Void
    ) async throws {
        let server = try await APNsTestServer(now: { clock.now })
        do {
            try await withBelfry(database, clock: clock, jitter: 0.5, settings: settings(server)) { app in
                try await body(app, server)
            }
        } catch {
            await server.shutdown()
            throw error
        }
        await server.shutdown()
    }

    static func register(
        _ app: Application, _ bearer: String, token: String = DevicesAPITests.token,
        authorization: PushAuthorization = .authorized, settings: PushSettings = PushSettings()
    ) async throws -> DeviceRecord {
        try await app.send(
            .POST, "/v1/me/devices", bearer: bearer,
            json: DevicesAPITests.registration(token, authorization: authorization, settings: settings)
        ).decode(DeviceRecord.self)
    }

    static func status(_ app: Application, _ id: UUID) async throws -> EventStatus {
        try await app.send(.GET, "/v1/events/\(id)", bearer: testAPIKey).decode(EventStatus.self)
    }

    @available(macOS 15, iOS 18, tvOS 18, watchOS 11, *)
    @Test("the queue runs APNs sends on the loop of the APNs connection")
    func attemptsOnTheConnectionsLoop() async throws {
        try await Self.withAPNs { app, server in
            let ada = try await app.userToken("ada")
            _ = try await Self.register(app, ada)
            let worker = try #require(app.deliveryQueue)
            let channel = try #require(worker.providers[.apns] as? APNsChannel)
            let loop = try #require(channel.sendLoop)
            let probe = LoopProbe(channel: channel, loop: loop)
            let probing = DeliveryQueue(
                database: worker.database, storage: worker.storage, workspace: worker.workspace,
                providers: [.apns: probe], metrics: worker.metrics, now: worker.now, jitter: worker.jitter,
                logger: worker.logger, devices: app.belfryServices.devices,
                inbox: app.belfryServices.inboxStore)
            _ = try await InboxAPITests.notify(app, ["ada"], title: "On the loop", category: "reverted")
            while try await probing.runOnce() > 0 {}
            #expect(server.received.map(\.status) == [200])
            #expect(probe.onLoop.withLockedValue { $0 } == [true, true], "before and after the send")
        }
    }

    /// The APNs channel, noting whether each send runs on `loop`, before and after.
    private struct LoopProbe: DeliveryProvider {
        let channel: APNsChannel
        let loop: any EventLoop
        let onLoop = NIOLockedValueBox<[Bool]>([])

        var maxAttempts: Int { channel.maxAttempts }
        var sendLoop: (any EventLoop)? { channel.sendLoop }

        func deliver(_ delivery: Delivery) async -> DeliveryResult {
            onLoop.withLockedValue { $0.append(loop.inEventLoop) }
            let result = await channel.deliver(delivery)
            onLoop.withLockedValue { $0.append(loop.inEventLoop) }
            return result
        }
    }

    @Test(
        "a registered device gets a signed request shaped to it, with the unread count as badge",
        arguments: TestDatabase.allCases)
    func endToEnd(database: TestDatabase) async throws {
        try await Self.withAPNs(database) { app, server in
            let ada = try await app.userToken("ada")
            let device = try await Self.register(app, ada)
            try await InboxAPITests.notify(app, ["ada"], title: "Earlier", category: "edit-thank")
            let event = EventRequest(
                category: "reverted", recipients: ["ada"],
                content: .init(
                    title: "Edit reverted", body: "Your edit to Bell was undone", url: "https://example.org/diff/1",
                    imageURL: "https://example.org/bell.png"),
                data: ["revision": .number(42)], ttlSeconds: 3600)
            let id = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: event).decode(EventAccepted.self)
                .eventID
            while try await app.belfryServices.fanout.processBatch(on: app.db) {}
            let worker = try #require(app.deliveryQueue)
            while try await worker.runOnce() > 0 {}

            let received = server.received
            #expect(received.count == 2)
            // Both went out in one round of the worker, in either order.
            let request = try #require(received.first { $0.aps["category"] as? String == "reverted" })
            #expect(request.status == 200, "the server accepted the provider token: \(request.reason ?? "")")
            #expect(request.deviceToken == device.token)
            #expect(request.headers["apns-topic"] == "org.example.reader")
            #expect(request.headers["apns-push-type"] == "alert")
            #expect(request.headers["apns-priority"] == "10")
            #expect(request.headers["apns-collapse-id"] == "reverted")
            #expect(request.headers["apns-expiration"] == String(Int(app.belfry.now().timeIntervalSince1970) + 3600))
            let alert = request.aps["alert"] as? [String: Any]
            #expect(alert?["title"] as? String == "Edit reverted")
            #expect(alert?["body"] as? String == "Your edit to Bell was undone")
            #expect(request.aps["badge"] as? Int == 2, "two unread notifications in the inbox")
            #expect(request.aps["sound"] as? String == "default")
            #expect(request.aps["category"] as? String == "reverted")
            #expect(request.aps["thread-id"] as? String == "edits")
            #expect(request.aps["mutable-content"] as? Int == 1)
            let custom = request.payload["belfry"] as? [String: Any]
            #expect(custom?["url"] as? String == "https://example.org/diff/1")
            #expect(custom?["tenant"] as? String == "enwiki")
            #expect((custom?["data"] as? [String: Any])?["revision"] as? Int == 42)
            let status = try await Self.status(app, id)
            #expect(status.deliveries["ios_push"] == ["sent": 1])
            let apnsID = try #require(request.headers["apns-id"])
            #expect(try await Self.deliveryIDs(app, channel: "ios_push").contains(apnsID), "apns-id is the delivery id")

            // The first push (a passive category) kept its own shape.
            let thanks = try #require(received.first { $0.aps["category"] as? String == "edit-thank" })
            #expect(thanks.aps["interruption-level"] as? String == "passive")
            #expect(thanks.headers["apns-priority"] == "5")
            #expect(thanks.headers["apns-collapse-id"] == nil)
        }
    }

    static func deliveryIDs(_ app: Application, channel: String) async throws -> [String] {
        try await app.db.sql.select().column("id").from("deliveries").where("channel", .equal, channel).all()
            .map { try $0.decode(column: "id", as: UUID.self).uuidString.lowercased() }
    }

    @Test("a background push: push type background, priority 5, content-available and no alert, sound or badge")
    func backgroundPush() async throws {
        try await Self.withAPNs { app, server in
            let ada = try await app.userToken("ada")
            let device = try await Self.register(app, ada)
            let event = EventRequest(
                category: "reverted", recipients: ["ada"], content: .init(title: "Edit reverted", body: "b"),
                data: ["revision": .number(42)], push: .init(contentAvailable: true))
            _ = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: event).decode(EventAccepted.self)
            // The same category without the event's flag: an alert, as before.
            _ = try await InboxAPITests.notify(app, ["ada"], title: "Another revert", category: "reverted")
            while try await app.belfryServices.fanout.processBatch(on: app.db) {}
            while try await app.deliveryQueue!.runOnce() > 0 {}
            #expect(server.received.count == 2)
            let background = try #require(server.received.first { $0.headers["apns-push-type"] == "background" })
            #expect(background.status == 200)
            #expect(background.deviceToken == device.token)
            #expect(background.headers["apns-priority"] == "5")
            #expect(background.aps.count == 1 && background.aps["content-available"] as? Int == 1)
            #expect(background.aps["alert"] == nil && background.aps["sound"] == nil && background.aps["badge"] == nil)
            let belfry = try #require(background.payload["belfry"] as? [String: Any])
            #expect(belfry["notification_id"] as? String != nil)
            #expect((belfry["data"] as? [String: Any])?["revision"] as? Int == 42)
            let alert = try #require(server.received.first { $0.headers["apns-push-type"] == "alert" })
            #expect((alert.aps["alert"] as? [String: Any])?["title"] as? String == "Another revert")
            // The inbox lists both.
            #expect(try await InboxAPITests.page(app, ada).notifications.count == 2)
        }
    }

    @Test("alerts off but the Notification Center on keeps the text; both off sends the badge alone")
    func notificationCenterSetting() async throws {
        try await Self.withAPNs { app, server in
            let ada = try await app.userToken("ada")
            let bob = try await app.userToken("bob")
            let listed = String(repeating: "cd34", count: 16)
            let silent = String(repeating: "ef56", count: 16)
            _ = try await Self.register(
                app, ada, token: listed, settings: PushSettings(alert: .disabled, notificationCenter: .enabled))
            _ = try await Self.register(
                app, bob, token: silent, settings: PushSettings(alert: .disabled, notificationCenter: .disabled))
            // Both are on the record as registered.
            let devices = try await app.send(.GET, "/v1/me/devices", bearer: ada).decode(DeviceList.self).devices
            #expect(devices.first?.settings.notificationCenter == .enabled)
            _ = try await InboxAPITests.notify(app, ["ada", "bob"], title: "Edit reverted", category: "reverted")
            while try await app.deliveryQueue!.runOnce() > 0 {}
            let byToken = Dictionary(server.received.map { ($0.deviceToken, $0) }) { first, _ in first }
            let kept = try #require(byToken[listed])
            #expect((kept.aps["alert"] as? [String: Any])?["title"] as? String == "Edit reverted")
            let badgeOnly = try #require(byToken[silent])
            #expect(badgeOnly.aps["alert"] == nil)
            #expect(badgeOnly.aps["badge"] as? Int == 1)
        }
    }

    @Test("410 retires the device: its reason is kept and no later event targets it")
    func unregisteredRetires() async throws {
        try await Self.withAPNs { app, server in
            let ada = try await app.userToken("ada")
            let device = try await Self.register(app, ada)
            server.script([.failure(status: 410, reason: "Unregistered")], for: device.token ?? "")
            let first = try await InboxAPITests.notify(app, ["ada"], title: "One")
            try await #require(app.deliveryQueue).runOnce()
            #expect(try await Self.status(app, first).deliveries["ios_push"] == ["failed": 1])
            let listed = try await app.send(.GET, "/v1/me/devices", bearer: ada).decode(DeviceList.self).devices
            #expect(listed.first?.retiredReason == "Unregistered")
            #expect(listed.first?.retiredAt != nil)

            let second = try await InboxAPITests.notify(app, ["ada"], title: "Two")
            try await #require(app.deliveryQueue).runOnce()
            let status = try await Self.status(app, second)
            #expect(status.deliveries["ios_push"] == nil)
            #expect(status.skipped["ios_push"] == ["no_authorized_device": 1])
            #expect(server.received.count == 1)

            // The app registers the token again (a reinstall): it is active once more.
            #expect(try await Self.register(app, ada).retiredAt == nil)
        }
    }

    @Test("a 503 burst is retried with backoff and delivered; BadDeviceToken retires; other reasons are kept verbatim")
    func retriesAndReasons() async throws {
        let clock = TestClock()
        try await Self.withAPNs(clock: clock) { app, server in
            let ada = try await app.userToken("ada")
            let device = try await Self.register(app, ada)
            server.script(
                [
                    .failure(status: 503, reason: "ServiceUnavailable"),
                    .failure(status: 503, reason: "ServiceUnavailable"),
                    .failure(status: 429, reason: "TooManyRequests"),
                ], for: device.token ?? "")
            let id = try await InboxAPITests.notify(app, ["ada"], title: "Burst")
            let worker = try #require(app.deliveryQueue)
            for _ in 0..<4 {
                try await worker.runOnce()
                clock.advance(by: 3600)
            }
            #expect(server.received.map(\.status) == [503, 503, 429, 200])
            #expect(try await Self.status(app, id).deliveries["ios_push"] == ["sent": 1])
            let ada2 = try await app.userToken("ada")

            server.script([.failure(status: 400, reason: "BadTopic")], for: device.token ?? "")
            let topic = try await InboxAPITests.notify(app, ["ada"], title: "Topic")
            try await worker.runOnce()
            let failed = try await Self.status(app, topic)
            #expect(failed.deliveries["ios_push"] == ["failed": 1])
            #expect(failed.lastErrors["ios_push"] == "BadTopic")
            #expect(
                try await Self.register(app, ada2).retiredAt == nil,
                "BadTopic is the server's mistake, not the device's")

            server.script([.failure(status: 400, reason: "BadDeviceToken")], for: device.token ?? "")
            try await InboxAPITests.notify(app, ["ada"], title: "Bad")
            try await worker.runOnce()
            let listed = try await app.send(.GET, "/v1/me/devices", bearer: ada2).decode(DeviceList.self).devices
            #expect(listed.first?.retiredReason == "BadDeviceToken")
        }
    }

    @Test("the provider token is reused, re-signed after 50 minutes, and replaced at once when APNs refuses it")
    func providerTokens() async throws {
        let clock = TestClock()
        try await Self.withAPNs(clock: clock) { app, server in
            let ada = try await app.userToken("ada")
            let device = try await Self.register(app, ada)
            let worker = try #require(app.deliveryQueue)
            try await InboxAPITests.notify(app, ["ada"], title: "1")
            try await worker.runOnce()
            clock.advance(by: 49 * 60)
            try await InboxAPITests.notify(app, ["ada"], title: "2")
            try await worker.runOnce()
            clock.advance(by: 2 * 60)
            try await InboxAPITests.notify(app, ["ada"], title: "3")
            try await worker.runOnce()
            var tokens = server.received.map(\.providerToken)
            #expect(tokens[0] == tokens[1], "reused within 50 minutes")
            #expect(tokens[1] != tokens[2], "signed anew after 50 minutes")

            clock.advance(by: 1)
            server.script([.failure(status: 403, reason: "ExpiredProviderToken")], for: device.token ?? "")
            let id = try await InboxAPITests.notify(app, ["ada"], title: "4")
            try await worker.runOnce()
            #expect(server.received.suffix(2).map(\.status) == [403, 200], "sent again at once with a new token")
            tokens = server.received.map(\.providerToken)
            #expect(tokens[3] == tokens[2])
            #expect(tokens[4] != tokens[3])
            #expect(try await Self.status(app, id).deliveries["ios_push"] == ["sent": 1])
        }
    }

    @Test("an event whose APNs payload would pass 4096 bytes is refused when triggered, naming the size")
    func payloadTooLarge() async throws {
        try await withBelfry(.sqlite) { app in
            let big = EventRequest(
                category: "mention", recipients: ["ada"],
                content: .init(title: "Big", body: String(repeating: "é", count: 1500)),
                data: ["note": .string(String(repeating: "x", count: 1200))])
            let refused = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: big)
            #expect(refused.status == .unprocessableEntity)
            #expect(refused.errorMessage?.contains("APNs payload would be") == true, "\(refused.errorMessage ?? "")")
            #expect(refused.errorMessage?.contains("4096") == true)
            // The same content for a category without APNs is fine.
            var inboxOnly = big
            inboxOnly.category = "emailuser"
            #expect(try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: inboxOnly).status == .accepted)
        }
    }
}

/// Counts the SQL statements run through one database handle: PostgreSQL's driver logs each
/// one ("Executing query") at trace level.
final class StatementCounter: Sendable {
    private let count = NIOLockedValueBox(0)

    var logger: Logger {
        var logger = Logger(label: "belfry.statements") { _ in Handler(counter: self) }
        logger.logLevel = .trace
        return logger
    }

    var statements: Int { count.withLockedValue { $0 } }

    private struct Handler: LogHandler {
        let counter: StatementCounter
        var logLevel: Logger.Level = .trace
        var metadata: Logger.Metadata = [:]

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            if event.message.description == "Executing query" { counter.count.withLockedValue { $0 += 1 } }
        }
    }
}

extension APNsChannelTests {
    /// BENCHMARKS.md has the figures before the claim read deliveries whole (75 for these ten) and
    /// before results were recorded in batches (45).
    @Test("statements per push delivery, counted on PostgreSQL: four for the claim, four for all the results")
    func statementsPerDelivery() async throws {
        try await Self.withAPNs(.postgres) { app, server in
            let users = (0..<10).map { "reader-\($0)" }
            for (index, user) in users.enumerated() {
                _ = try await Self.register(
                    app, try await app.userToken(user), token: String(format: "%064x", index + 1))
            }
            let event = EventRequest(
                category: "reverted", recipients: users, content: .init(title: "Edit reverted", body: "Undone"))
            _ = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: event)
            while try await app.belfryServices.fanout.processBatch(on: app.db) {}
            // Only the pushes are due, so that the count is theirs.
            try await app.db.sql.raw("UPDATE deliveries SET status = 'sent' WHERE channel <> 'ios_push'").run()

            // Every handle on the application's database logs through its logger while this runs.
            let counter = StatementCounter()
            let logger = app.logger
            app.logger = counter.logger
            defer { app.logger = logger }
            #expect(try await #require(app.deliveryQueue).runOnce() == 10)
            #expect(server.received.count == 10)
            // The round's look for inbox notifications to announce: one read, nothing due.
            // The claim: BEGIN, lock and mark in one statement, COMMIT, then one read of them all.
            // The results, all sent alike: BEGIN, one update, one insert of the attempts, COMMIT.
            #expect(counter.statements == 1 + 4 + 4, "counted \(counter.statements)")
        }
    }
}
