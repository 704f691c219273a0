import BelfryCore
import BelfryTestServers
import BelfryTestSupport
import Foundation
import Testing
import Vapor

@testable import BelfryServer

/// The FCM channel against a local TLS + HTTP/2 stand-in for Google's token endpoint and FCM's
/// send API, which checks the OAuth assertion's RS256 signature and the access token on every send.
@Suite("FCM channel", .serialized)
struct FCMChannelTests {
    static let token = "fcm-token-ada-pixel:APA91b" + String(repeating: "Xy_9-", count: 24)

    static func settings(_ server: FCMTestServer) -> (inout ServerConfiguration) -> Void {
        { settings in
            settings.fcm = .init(serviceAccountJSON: server.serviceAccountJSON, url: server.url)
            settings.extraCertificatesPEM = server.authority.certificatePEM
        }
    }

    static func withFCM(
        _ database: TestDatabase = .sqlite, clock: TestClock = TestClock(),
        _ body: (Application, FCMTestServer) async throws -> Void
    ) async throws {
        let server = try await FCMTestServer(now: { clock.now })
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
        _ app: Application, _ bearer: String, token: String = token, authorization: PushAuthorization? = nil,
        settings: PushSettings? = nil
    ) async throws -> DeviceRecord {
        let response = try await app.send(
            .POST, "/v1/me/devices", bearer: bearer,
            json: DeviceRegistration(
                platform: .fcm, token: token, authorization: authorization, settings: settings, locale: "de-DE",
                appVersion: "3.2.0"))
        #expect(response.status == .created || response.status == .ok, "\(response.body.string)")
        return try response.decode(DeviceRecord.self)
    }

    static func deliver(_ app: Application) async throws {
        let worker = try #require(app.deliveryQueue)
        while try await worker.runOnce() > 0 {}
    }

    @Test("an Android device gets a message shaped for it, with Belfry's ids in data", arguments: TestDatabase.allCases)
    func endToEnd(database: TestDatabase) async throws {
        try await Self.withFCM(database) { app, server in
            let ada = try await app.userToken("ada")
            let device = try await Self.register(app, ada)
            #expect(device.platform == .fcm)
            #expect(device.token == Self.token)
            #expect(device.environment == nil)
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
            try await Self.deliver(app)

            let received = server.received
            #expect(received.map(\.status) == [200, 200])
            #expect(server.grants == 1, "one access token for both sends")
            let message = try #require(
                received.map(\.message).first { ($0["data"] as? [String: String])?["category"] == "reverted" })
            #expect(message["token"] as? String == Self.token)
            #expect(
                message["notification"] as? [String: String]
                    == [
                        "title": "Edit reverted", "body": "Your edit to Bell was undone",
                        "image": "https://example.org/bell.png",
                    ])
            let android = try #require(message["android"] as? [String: Any])
            #expect(android["priority"] as? String == "HIGH")
            #expect(android["ttl"] as? String == "3600s")
            #expect(android["collapse_key"] as? String == "reverted")
            let shown = try #require(android["notification"] as? [String: Any])
            #expect(shown["channel_id"] as? String == "reverted")
            #expect(shown["tag"] as? String == "edits")
            #expect(shown["notification_count"] as? Int == 2, "two unread notifications in the inbox")
            let data = try #require(message["data"] as? [String: String])
            #expect(data["url"] == "https://example.org/diff/1")
            #expect(data["tenant"] == "enwiki")
            #expect(data["data"] == #"{"revision":42}"#)
            let page = try await InboxAPITests.page(app, ada)
            #expect(page.notifications.contains { $0.id.uuidString.lowercased() == data["notification_id"] })
            #expect(try await APNsChannelTests.status(app, id).deliveries["android_push"] == ["sent": 1])

            // The passive category asks for normal priority.
            let thanks = try #require(
                received.map(\.message).first { ($0["data"] as? [String: String])?["category"] == "edit-thank" })
            #expect((thanks["android"] as? [String: Any])?["priority"] as? String == "NORMAL")
        }
    }

    @Test(
        "an event to a user with an iPhone, an Android phone and a browser reaches all three, each shaped for it",
        arguments: TestDatabase.allCases)
    func everyPlatform(database: TestDatabase) async throws {
        let apns = try await APNsTestServer()
        let fcm = try await FCMTestServer()
        let webPush = try await WebPushTestEndpoint()
        defer {
            Task {
                await apns.shutdown()
                await fcm.shutdown()
                await webPush.shutdown()
            }
        }
        try await withBelfry(database, jitter: 0.5) { settings in
            APNsChannelTests.settings(apns)(&settings)
            Self.settings(fcm)(&settings)
            settings.vapidSubject = WebPushChannelTests.subject
            settings.webPushAllowsLoopback = true
            settings.extraCertificatesPEM = [apns.authority, fcm.authority, webPush.authority].map(\.certificatePEM)
                .joined(separator: "\n")
        } _: { app in
            let ada = try await app.userToken("ada")
            let iPhone = try await APNsChannelTests.register(app, ada)
            _ = try await Self.register(app, ada)
            let browser = webPush.subscribe("ada-laptop")
            #expect(try await WebPushChannelTests.register(app, ada, browser).status == .created)
            let devices = try await app.send(.GET, "/v1/me/devices", bearer: ada).decode(DeviceList.self).devices
            #expect(Set(devices.map(\.platform)) == [.apns, .fcm, .webPush])

            let id = try await InboxAPITests.notify(app, ["ada"], title: "Everywhere", category: "reverted")
            try await Self.deliver(app)
            let status = try await APNsChannelTests.status(app, id)
            #expect(status.deliveries["ios_push"] == ["sent": 1])
            #expect(status.deliveries["android_push"] == ["sent": 1])
            #expect(status.deliveries["web_push"] == ["sent": 1])

            let apple = try #require(apns.received.first)
            #expect(apple.deviceToken == iPhone.token)
            #expect((apple.aps["alert"] as? [String: Any])?["title"] as? String == "Everywhere")
            #expect(apple.headers["apns-topic"] == "org.example.reader")
            let android = try #require(fcm.received.first)
            #expect(android.token == Self.token)
            #expect((android.message["notification"] as? [String: String])?["title"] == "Everywhere")
            #expect(
                ((android.message["android"] as? [String: Any])?["notification"] as? [String: Any])?["channel_id"]
                    as? String == "reverted")
            let pushed = try #require(webPush.received.first)
            let message = try #require(
                pushed.plaintext.flatMap { try JSONSerialization.jsonObject(with: $0) as? [String: Any] })
            #expect(message["title"] as? String == "Everywhere")
            // One notification behind all three: each carries the same id.
            let notificationID = (apple.payload["belfry"] as? [String: Any])?["notification_id"] as? String
            #expect(notificationID != nil)
            #expect((android.message["data"] as? [String: String])?["notification_id"] == notificationID)
            #expect((message["notification_id"] as? String)?.lowercased() == notificationID)
        }
    }

    @Test(
        "UNREGISTERED retires the device; SENDER_ID_MISMATCH too; INVALID_ARGUMENT fails with FCM's message",
        arguments: TestDatabase.allCases)
    func unregisteredRetires(database: TestDatabase) async throws {
        try await Self.withFCM(database) { app, server in
            let ada = try await app.userToken("ada")
            _ = try await Self.register(app, ada)
            server.script(
                [.failure(status: 400, errorCode: "INVALID_ARGUMENT", message: "Invalid value at 'message.data'")],
                for: Self.token)
            let invalid = try await InboxAPITests.notify(app, ["ada"], title: "Invalid")
            try await Self.deliver(app)
            let failed = try await APNsChannelTests.status(app, invalid)
            #expect(failed.deliveries["android_push"] == ["failed": 1])
            #expect(failed.lastErrors["android_push"] == "INVALID_ARGUMENT: Invalid value at 'message.data'")

            server.script(
                [.failure(status: 404, errorCode: "UNREGISTERED", message: "Requested entity was not found.")],
                for: Self.token)
            let first = try await InboxAPITests.notify(app, ["ada"], title: "One")
            try await Self.deliver(app)
            #expect(try await APNsChannelTests.status(app, first).deliveries["android_push"] == ["failed": 1])
            let listed = try await app.send(.GET, "/v1/me/devices", bearer: ada).decode(DeviceList.self).devices
            #expect(listed.first?.retiredReason == "UNREGISTERED: Requested entity was not found.")
            #expect(listed.first?.retiredAt != nil)

            let second = try await InboxAPITests.notify(app, ["ada"], title: "Two")
            try await Self.deliver(app)
            let status = try await APNsChannelTests.status(app, second)
            #expect(status.deliveries["android_push"] == nil)
            #expect(status.skipped["android_push"] == ["no_authorized_device": 1])
            #expect(server.received.count == 2)

            // The app registers its token again (a reinstall): active once more, until the next mismatch.
            #expect(try await Self.register(app, ada).retiredAt == nil)
            server.script(
                [.failure(status: 403, errorCode: "SENDER_ID_MISMATCH", message: "SenderId mismatch")], for: Self.token)
            try await InboxAPITests.notify(app, ["ada"], title: "Three")
            try await Self.deliver(app)
            let again = try await app.send(.GET, "/v1/me/devices", bearer: ada).decode(DeviceList.self).devices
            #expect(again.first?.retiredReason == "SENDER_ID_MISMATCH: SenderId mismatch")
        }
    }

    @Test(
        "429 with Retry-After is retried after it; 503 with backoff; then delivered", arguments: TestDatabase.allCases)
    func retries(database: TestDatabase) async throws {
        let clock = TestClock()
        try await Self.withFCM(database, clock: clock) { app, server in
            let ada = try await app.userToken("ada")
            _ = try await Self.register(app, ada)
            server.script(
                [
                    .failure(status: 429, errorCode: "QUOTA_EXCEEDED", message: "Quota exceeded.", retryAfter: 120),
                    .failure(status: 503, errorCode: "UNAVAILABLE", message: "The service is currently unavailable."),
                ], for: Self.token)
            let id = try await InboxAPITests.notify(app, ["ada"], title: "Busy")
            let worker = try #require(app.deliveryQueue)
            try await worker.runOnce()
            #expect(server.received.map(\.status) == [429])
            clock.advance(by: 119)
            try await worker.runOnce()
            #expect(server.received.count == 1, "not before Retry-After")
            clock.advance(by: 2)
            try await worker.runOnce()
            #expect(server.received.map(\.status) == [429, 503])
            clock.advance(by: 3600)
            try await worker.runOnce()
            #expect(server.received.map(\.status) == [429, 503, 200])
            #expect(try await APNsChannelTests.status(app, id).deliveries["android_push"] == ["sent": 1])
        }
    }

    @Test(
        "an access token refused before it expires is replaced once and the send succeeds; it renews near expiry",
        arguments: TestDatabase.allCases)
    func accessTokens(database: TestDatabase) async throws {
        let clock = TestClock()
        try await Self.withFCM(database, clock: clock) { app, server in
            let ada = try await app.userToken("ada")
            _ = try await Self.register(app, ada)
            try await InboxAPITests.notify(app, ["ada"], title: "1")
            try await Self.deliver(app)
            #expect(server.grants == 1)

            server.revokeAccessTokens()
            let id = try await InboxAPITests.notify(app, ["ada"], title: "2")
            try await Self.deliver(app)
            #expect(server.refusedAccessTokens == 1, "one send refused for its token")
            #expect(server.grants == 2, "replaced once")
            #expect(server.received.map(\.status) == [200, 200])
            #expect(try await APNsChannelTests.status(app, id).deliveries["android_push"] == ["sent": 1])
            let tokens = server.received.map { $0.headers["authorization"] }
            #expect(tokens[0] != tokens[1])

            // Granted for 3599 s: kept for 54 minutes, renewed in the last five.
            clock.advance(by: 3599 - 301)
            try await InboxAPITests.notify(app, ["ada"], title: "3")
            try await Self.deliver(app)
            #expect(server.grants == 2)
            clock.advance(by: 2)
            try await InboxAPITests.notify(app, ["ada"], title: "4")
            try await Self.deliver(app)
            #expect(server.grants == 3)
            #expect(server.refusedAccessTokens == 1)
        }
    }

    @Test(
        "a refused grant fails the delivery with the endpoint's reason; THIRD_PARTY_AUTH_ERROR fails too",
        arguments: TestDatabase.allCases)
    func refusedGrant(database: TestDatabase) async throws {
        let clock = TestClock()
        try await Self.withFCM(database, clock: clock) { app, server in
            let ada = try await app.userToken("ada")
            _ = try await Self.register(app, ada)
            server.scriptGrants([.refused(status: 400, error: "invalid_grant", description: "Invalid JWT Signature.")])
            let id = try await InboxAPITests.notify(app, ["ada"], title: "Refused")
            try await Self.deliver(app)
            let status = try await APNsChannelTests.status(app, id)
            #expect(status.deliveries["android_push"] == ["failed": 1])
            #expect(
                status.lastErrors["android_push"]
                    == "the token endpoint refused the service account's grant (HTTP 400, invalid_grant: Invalid JWT Signature.)"
            )
            #expect(server.received.isEmpty, "nothing sent without an access token")

            clock.advance(by: 30)
            server.script(
                [
                    .failure(
                        status: 401, errorCode: "THIRD_PARTY_AUTH_ERROR",
                        message: "Auth error from APNS or Web Push Service")
                ],
                for: Self.token)
            let third = try await InboxAPITests.notify(app, ["ada"], title: "Third party")
            try await Self.deliver(app)
            let failed = try await APNsChannelTests.status(app, third)
            #expect(failed.deliveries["android_push"] == ["failed": 1])
            #expect(failed.lastErrors["android_push"]?.contains("THIRD_PARTY_AUTH_ERROR") == true)
            #expect(server.grants == 1, "a third-party refusal is not the access token's")
        }
    }

    @Test("a background message is data only, at normal priority, marked background")
    func backgroundMessage() async throws {
        try await Self.withFCM(.sqlite) { app, server in
            let ada = try await app.userToken("ada")
            _ = try await Self.register(app, ada)
            let event = EventRequest(
                category: "reverted", recipients: ["ada"], content: .init(title: "Edit reverted", body: "b"),
                push: .init(contentAvailable: true))
            _ = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: event).decode(EventAccepted.self)
            while try await app.belfryServices.fanout.processBatch(on: app.db) {}
            try await Self.deliver(app)
            let message = try #require(server.received.first?.message)
            #expect(message["notification"] == nil)
            let android = try #require(message["android"] as? [String: Any])
            #expect(android["notification"] == nil)
            #expect(android["priority"] as? String == "NORMAL")
            let data = try #require(message["data"] as? [String: String])
            #expect(data["background"] == "1")
            #expect(data["notification_id"] != nil && data["category"] == "reverted")
        }
    }

    @Test("registration: a token is required and checked; APNs fields are refused; a denied app gets nothing")
    func registration() async throws {
        try await Self.withFCM { app, server in
            let ada = try await app.userToken("ada")
            for (body, message) in [
                (#"{"platform":"fcm"}"#, "is required for fcm devices"),
                (#"{"platform":"fcm","token":"short"}"#, "must be an FCM registration token"),
                (#"{"platform":"fcm","token":"\#(Self.token) x"}"#, "must be an FCM registration token"),
                (#"{"platform":"fcm","token":"\#(Self.token)","environment":"sandbox"}"#, "is for apns devices"),
            ] {
                let response = try await app.send(.POST, "/v1/me/devices", bearer: ada, rawBody: body)
                #expect(response.status == .unprocessableEntity, "\(body)")
                #expect(response.body.string.contains(message), "\(response.body.string)")
            }
            _ = try await Self.register(app, ada, authorization: .denied)
            let id = try await InboxAPITests.notify(app, ["ada"], title: "Denied")
            try await Self.deliver(app)
            #expect(try await APNsChannelTests.status(app, id).skipped["android_push"] == ["no_authorized_device": 1])
            #expect(server.received.isEmpty)
        }
    }

    @Test(
        "interop: a Python stand-in (h2, PyJWT) verifies the assertion and receives the message of a real belfry serve"
    )
    func pythonInterop() throws {
        let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("belfry").path
        let output = try TestProcess.run(
            "/usr/bin/env",
            ["python3", PackagePaths.root.appendingPathComponent("Tests/interop/fcm_interop.py").path, binary])
        #expect(output.contains("OK: assertion verified by PyJWT"), "\(output)")
    }

    @Test("an event whose FCM message would pass 4096 bytes is refused when triggered, naming the size")
    func messageTooLarge() async throws {
        try await Self.withFCM { app, _ in
            let event = EventRequest(
                category: "reverted", recipients: ["ada"],
                content: .init(title: "Big", body: String(repeating: "é", count: 1900)))
            let response = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: event)
            #expect(response.status == .unprocessableEntity)
            #expect(response.body.string.contains("the FCM message would be"), "\(response.body.string)")
        }
    }
}
