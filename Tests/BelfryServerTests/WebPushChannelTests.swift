import BelfryCore
import BelfryTestSupport
import BelfryWebPush
import Crypto
import Foundation
import Testing
import Vapor
import VaporTesting

@testable import BelfryServer

/// The Web Push channel against a local TLS + HTTP/2 push service that checks VAPID and
/// decrypts what it receives, as the browser would.
@Suite("Web Push channel", .serialized)
struct WebPushChannelTests {
    static let subject = "mailto:ops@belfry.example"

    static func withWebPush(
        _ database: TestDatabase = .sqlite, clock: TestClock = TestClock(),
        _ body: (Application, WebPushTestEndpoint) async throws -> Void
    ) async throws {
        let endpoint = try await WebPushTestEndpoint(now: { clock.now })
        do {
            try await withBelfry(database, clock: clock, jitter: 0.5) { settings in
                settings.vapidSubject = subject
                settings.extraCertificatesPEM = endpoint.authority.certificatePEM
                // The test push service listens on loopback, which only tests may allow.
                settings.webPushAllowsLoopback = true
            } _: { app in
                try await body(app, endpoint)
            }
        } catch {
            await endpoint.shutdown()
            throw error
        }
        await endpoint.shutdown()
    }

    static func register(
        _ app: Application, _ bearer: String, _ subscriber: WebPushTestEndpoint.Subscriber
    ) async throws -> TestingHTTPResponse {
        try await app.send(
            .POST, "/v1/me/devices", bearer: bearer,
            json: DeviceRegistration(
                platform: .webPush,
                subscription: .init(
                    endpoint: subscriber.endpoint, keys: .init(p256dh: subscriber.p256dh, auth: subscriber.auth)),
                userAgent: "Mozilla/5.0 (X11; Linux x86_64) Chromium"))
    }

    @Test(
        "a registered subscription receives a message it can decrypt, signed with the server's VAPID key",
        arguments: TestDatabase.allCases)
    func endToEnd(database: TestDatabase) async throws {
        try await Self.withWebPush(database) { app, endpoint in
            let key = try await app.send(.GET, "/v1/webpush/vapid-public-key")
            #expect(key.status == .ok)
            struct Key: Decodable { var public_key: String }
            let publicKey = try key.decode(Key.self).public_key
            #expect(Base64URL.decode(publicKey)?.count == 65)

            let ada = try await app.userToken("ada")
            let browser = endpoint.subscribe("ada-laptop")
            let registered = try await Self.register(app, ada, browser)
            #expect(registered.status == .created)
            #expect(try registered.decode(DeviceRecord.self).endpoint == browser.endpoint)
            #expect(try await Self.register(app, ada, browser).status == .ok, "the same endpoint again updates")

            let event = EventRequest(
                category: "reverted", recipients: ["ada"],
                content: .init(
                    title: "Edit reverted", body: "Your edit to Bell was undone", url: "https://example.org/d/1"),
                data: ["revision": .number(42)], ttlSeconds: 600)
            let id = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: event).decode(EventAccepted.self)
                .eventID
            while try await app.belfryServices.fanout.processBatch(on: app.db) {}
            try await #require(app.deliveryQueue).runOnce()

            let received = try #require(endpoint.received.first)
            #expect(endpoint.received.count == 1)
            #expect(received.status == 201)
            #expect(received.vapidKey == publicKey, "signed with the key browsers subscribed with")
            #expect(received.headers["ttl"] == "600")
            #expect(received.headers["urgency"] == "high")
            #expect(received.headers["topic"] == "reverted")
            #expect(received.headers["content-encoding"] == "aes128gcm")
            let message = received.message
            #expect(message["title"] as? String == "Edit reverted")
            #expect(message["body"] as? String == "Your edit to Bell was undone")
            #expect(message["url"] as? String == "https://example.org/d/1")
            #expect(message["category"] as? String == "reverted")
            #expect(message["badge"] as? Int == 1)
            #expect((message["actions"] as? [[String: Any]])?.first?["action"] as? String == "view-diff")
            #expect((message["actions"] as? [[String: Any]])?.first?["opens_app"] as? Bool == true)
            #expect((message["data"] as? [String: Any])?["revision"] as? Int == 42)
            let status = try await app.send(.GET, "/v1/events/\(id)", bearer: testAPIKey).decode(EventStatus.self)
            #expect(status.deliveries["web_push"] == ["sent": 1])
            #expect(message["notification_id"] as? String != nil)
        }
    }

    @Test("a background message carries no text or actions, at low urgency")
    func backgroundMessage() async throws {
        try await Self.withWebPush(.sqlite) { app, endpoint in
            let ada = try await app.userToken("ada")
            _ = try await Self.register(app, ada, endpoint.subscribe("ada-laptop"))
            let event = EventRequest(
                category: "reverted", recipients: ["ada"], content: .init(title: "Edit reverted", body: "b"),
                push: .init(contentAvailable: true))
            _ = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: event).decode(EventAccepted.self)
            while try await app.belfryServices.fanout.processBatch(on: app.db) {}
            try await #require(app.deliveryQueue).runOnce()
            let received = try #require(endpoint.received.first)
            #expect(received.status == 201)
            #expect(received.headers["urgency"] == "low")
            let message = received.message
            #expect(message["background"] as? Bool == true)
            #expect(message["title"] == nil && message["body"] == nil && message["actions"] as? [Any] == nil)
            #expect(message["notification_id"] as? String != nil)
            #expect(message["badge"] as? Int == 1)
        }
    }

    @Test("410 retires the subscription and a later event skips it; 429 waits for Retry-After; 413 fails")
    func answers() async throws {
        let clock = TestClock()
        try await Self.withWebPush(clock: clock) { app, endpoint in
            let ada = try await app.userToken("ada")
            let browser = endpoint.subscribe("ada")
            #expect(try await Self.register(app, ada, browser).status == .created)
            let worker = try #require(app.deliveryQueue)

            endpoint.script([429], for: browser)
            let slow = try await InboxAPITests.notify(app, ["ada"], title: "Slow")
            #expect(try await worker.runOnce() == 1)
            clock.advance(by: 29)
            #expect(try await worker.runOnce() == 0, "not before the push service's Retry-After (30 s)")
            clock.advance(by: 1)
            #expect(try await worker.runOnce() == 1)
            #expect(endpoint.received.map(\.status) == [429, 201])
            #expect(
                try await app.send(.GET, "/v1/events/\(slow)", bearer: testAPIKey).decode(EventStatus.self)
                    .deliveries["web_push"] == ["sent": 1])

            let ada2 = try await app.userToken("ada")
            endpoint.script([413], for: browser)
            let large = try await InboxAPITests.notify(app, ["ada"], title: "Large")
            try await worker.runOnce()
            let failed = try await app.send(.GET, "/v1/events/\(large)", bearer: testAPIKey).decode(EventStatus.self)
            #expect(failed.deliveries["web_push"] == ["failed": 1])
            #expect(failed.lastErrors["web_push"]?.contains("too large") == true)

            endpoint.script([410], for: browser)
            try await InboxAPITests.notify(app, ["ada"], title: "Gone")
            try await worker.runOnce()
            let devices = try await app.send(.GET, "/v1/me/devices", bearer: ada2).decode(DeviceList.self).devices
            #expect(devices.first?.retiredReason?.hasPrefix("HTTP 410") == true)

            let later = try await InboxAPITests.notify(app, ["ada"], title: "Later")
            try await worker.runOnce()
            let status = try await app.send(.GET, "/v1/events/\(later)", bearer: testAPIKey).decode(EventStatus.self)
            #expect(status.deliveries["web_push"] == nil)
            #expect(status.skipped["web_push"] == ["no_authorized_device": 1])
            #expect(endpoint.received.count == 4, "nothing more reached the retired subscription")
        }
    }

    @Test("bad subscriptions get 422 naming the field; http endpoints only on loopback and only when allowed")
    func badSubscriptions() async throws {
        try await Self.withWebPush { app, endpoint in
            let ada = try await app.userToken("ada")
            let good = endpoint.subscribe("ada")
            func post(_ json: String) async throws -> TestingHTTPResponse {
                try await app.send(.POST, "/v1/me/devices", bearer: ada, rawBody: json)
            }
            let keys = #""keys": {"p256dh": "\#(good.p256dh)", "auth": "\#(good.auth)"}"#
            let cases: [(String, String)] = [
                (#"{"platform": "web_push"}"#, "\"subscription\" is required"),
                (
                    #"{"platform": "web_push", "subscription": {"endpoint": "http://push.example.net/x", \#(keys)}}"#,
                    "https URL"
                ),
                (
                    #"{"platform": "web_push", "subscription": {"endpoint": "https://push.example.net/x", "keys": {"p256dh": "AAAA", "auth": "\#(good.auth)"}}}"#,
                    "subscription.keys.p256dh"
                ),
                (
                    #"{"platform": "web_push", "subscription": {"endpoint": "https://push.example.net/x", "keys": {"p256dh": "\#(Base64URL.encode(Data([4] + [UInt8](repeating: 1, count: 64))))", "auth": "\#(good.auth)"}}}"#,
                    "not a point on the P-256 curve"
                ),
                (
                    #"{"platform": "web_push", "subscription": {"endpoint": "https://push.example.net/x", "keys": {"p256dh": "\#(good.p256dh)", "auth": "c2hvcnQ"}}}"#,
                    "subscription.keys.auth"
                ),
                (
                    #"{"platform": "web_push", "token": "\#(DevicesAPITests.token)", "subscription": {"endpoint": "https://push.example.net/x", \#(keys)}}"#,
                    "\"token\" is for apns"
                ),
            ]
            for (body, expected) in cases {
                let response = try await post(body)
                #expect(response.status == .unprocessableEntity, "\(body)")
                #expect(
                    response.errorMessage?.contains(expected) == true,
                    "\(response.errorMessage ?? "") lacks \(expected)")
            }
            #expect(try await app.send(.GET, "/v1/me/devices", bearer: ada).decode(DeviceList.self).devices.isEmpty)
        }
        try await withBelfry(.sqlite) { settings in
            settings.webPushAllowsLoopback = true
        } _: { app in
            let ada = try await app.userToken("ada")
            let key = P256Keys.subscriber()
            let body =
                #"{"platform": "web_push", "subscription": {"endpoint": "http://127.0.0.1:9/push/1", "keys": {"p256dh": "\#(key.p256dh)", "auth": "\#(key.auth)"}}}"#
            #expect(try await app.send(.POST, "/v1/me/devices", bearer: ada, rawBody: body).status == .created)
            #expect(
                try await app.send(.GET, "/v1/webpush/vapid-public-key").errorCode == "web_push_off",
                "no VAPID subject: Web Push is off, and says so")
        }
    }

    @Test("the generated VAPID key is kept in the database: a restart serves the same one")
    func keyKept() async throws {
        try await withTestStorage(.sqlite) { location in
            func key() async throws -> String {
                try await withBelfryApp(location: location, settings: { $0.vapidSubject = Self.subject }) { app, _ in
                    try await app.send(.GET, "/v1/webpush/vapid-public-key").body.string
                }
            }
            let first = try await key()
            #expect(first.contains("public_key"))
            #expect(try await key() == first)
        }
    }

    @Test("an event whose encrypted Web Push message would pass 4096 bytes is refused, naming the size")
    func tooLarge() async throws {
        try await withBelfry(.sqlite) { app in
            let event = EventRequest(
                category: "edit-thank", recipients: ["ada"],
                content: .init(title: "Thanks", body: String(repeating: "a", count: 3900)))
            let refused = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: event)
            #expect(refused.status == .unprocessableEntity)
            #expect(refused.errorMessage?.contains("encrypted Web Push message would be") == true)
        }
    }

    @Test(
        "interop: Python's http_ece decrypts what Belfry encrypted for Python's keys, and PyJWT verifies the VAPID token"
    )
    func pythonInterop() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let bench = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("belfry-bench").path
        let output = try TestProcess.run(
            "/usr/bin/env",
            ["python3", root.appendingPathComponent("Tests/interop/webpush_interop.py").path, bench, "webpush-interop"])
        #expect(output.contains("OK: 6 messages decrypted by http_ece, VAPID verified by PyJWT"), "\(output)")
    }
}

/// Subscriber keys made outside any endpoint.
enum P256Keys {
    static func subscriber() -> (p256dh: String, auth: String) {
        let key = P256.KeyAgreement.PrivateKey()
        return (Base64URL.encode(key.publicKey.x963Representation), Base64URL.encode(Data(repeating: 7, count: 16)))
    }
}
