import BelfryCore
import BelfryHTTP1
import BelfryTestSupport
import Crypto
import Foundation
import SQLKit
import Testing
import Vapor

@testable import BelfryServer

/// A webhook receiver in Python (Support/webhook_receiver.py) that checks signatures with its own HMAC code.
final class WebhookReceiver: Sendable {
    static let secret = "webhook-secret-0123456789"
    let process: BackgroundProcess
    let url: String
    let log: String

    /// - Parameter hold: while a file is at this path, each request waits before it is logged and
    ///   answered.
    init(
        answers: String, secret: String = WebhookReceiver.secret, delayMilliseconds: Int = 0, hold: String? = nil
    ) async throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("Support/webhook_receiver.py").path
        log =
            FileManager.default.temporaryDirectory.appendingPathComponent("belfry-webhook-\(UUID().uuidString).jsonl")
            .path
        process = try BackgroundProcess(
            "/usr/bin/env",
            ["python3", script, secret, answers, log, String(delayMilliseconds)] + (hold.map { [$0] } ?? []))
        let output = try await process.waitForOutput(containing: "listening ")
        let port = try #require(output.firstMatch(of: /listening (\d+)/)).output.1
        url = "http://127.0.0.1:\(port)/hooks/belfry"
    }

    var webhook: ServerConfiguration.Webhook { .init(url: url, secret: Self.secret) }

    struct Entry: Decodable {
        var valid: Bool
        /// The Standard Webhooks headers, as the `standardwebhooks` package checks them.
        var standard: Bool
        var delivery: String
        var answered: Int
        var body: JSONValue
    }

    func entries() throws -> [Entry] {
        guard let text = try? String(contentsOfFile: log, encoding: .utf8) else { return [] }
        return try text.split(separator: "\n").map { try JSONDecoder().decode(Entry.self, from: Data($0.utf8)) }
    }

    func stop() {
        process.terminate()
        try? FileManager.default.removeItem(atPath: log)
    }
}

@Suite("Delivery queue and the webhook channel")
struct DeliveryQueueTests {
    static func trigger(
        _ app: Application, _ category: String = "login-fail", to users: [String] = ["ada"]
    ) async throws
        -> UUID
    {
        // With an address, so that the email channel has deliveries too.
        for user in users { _ = try await app.putUser(user, UserUpsert(email: "\(user)@example.org")) }
        let event = EventRequest(
            category: category, recipients: users,
            content: .init(title: "Failed login attempts", body: "From an unknown device"),
            data: ["ip": .string("192.0.2.1")])
        let id = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: event).decode(EventAccepted.self)
            .eventID
        while try await app.belfryServices.fanout.processBatch(on: app.db) {}
        return id
    }

    static func attempts(_ app: Application, channel: String) async throws -> [(outcome: String, status: Int?)] {
        try await app.db.sql.select()
            .column(SQLColumn("outcome", table: "delivery_attempts"))
            .column(SQLColumn("status_code", table: "delivery_attempts"))
            .from("delivery_attempts")
            .join(
                "deliveries", on: SQLColumn("id", table: "deliveries"), .equal,
                SQLColumn("delivery_id", table: "delivery_attempts")
            )
            .where(SQLColumn("channel", table: "deliveries"), .equal, SQLBind(channel))
            .orderBy(SQLColumn("attempt", table: "delivery_attempts"))
            .all()
            .map {
                (try $0.decode(column: "outcome", as: String.self), try $0.decode(column: "status_code", as: Int?.self))
            }
    }

    @Test(
        "webhook deliveries are signed (checked by Python's hmac); a channel without a provider fails clearly",
        arguments: TestDatabase.allCases)
    func signedWebhook(database: TestDatabase) async throws {
        let receiver = try await WebhookReceiver(answers: "200")
        defer { receiver.stop() }
        try await withBelfry(database, webhook: receiver.webhook) { app in
            let worker = try #require(app.deliveryQueue)
            let id = try await Self.trigger(app)
            #expect(try await worker.runOnce() == 2)
            let status = try await app.send(.GET, "/v1/events/\(id)", bearer: testAPIKey).decode(EventStatus.self)
            #expect(status.deliveries == ["inbox": ["sent": 1], "webhook": ["sent": 1], "email": ["failed": 1]])
            #expect(status.lastErrors == ["email": "no provider for email channels is configured"])

            let entries = try receiver.entries()
            #expect(entries.count == 1)
            #expect(entries.first?.valid == true, "the signature verifies with the shared secret")
            guard case .object(let body) = entries.first?.body, case .object(let notification) = body["notification"]
            else {
                Issue.record("unexpected webhook body")
                return
            }
            #expect(body["type"] == .string("notification.delivered"))
            #expect(body["user"] == .object(["id": .string("ada")]))
            #expect(body["delivery_id"] == .string(entries[0].delivery))
            #expect(notification["title"] == .string("Failed login attempts"))
            #expect(notification["data"] == .object(["ip": .string("192.0.2.1")]))
            #expect(notification["category"] == .string("login-fail"))
        }
    }

    @Test("a receiver holding another secret rejects the signature")
    func wrongSecretRejected() async throws {
        let receiver = try await WebhookReceiver(answers: "200", secret: "some-other-secret-0123456789")
        defer { receiver.stop() }
        try await withBelfry(.sqlite, webhook: .init(url: receiver.url, secret: WebhookReceiver.secret)) { app in
            _ = try await Self.trigger(app)
            try await #require(app.deliveryQueue).runOnce()
            let entries = try receiver.entries()
            #expect(entries.count == 1)
            #expect(entries.first?.valid == false)
            #expect(entries.first?.standard == false)
        }
    }

    @Test("a whsec_ secret signs per Standard Webhooks with its base64 bytes, as the package reads it")
    func standardWebhooksSecret() async throws {
        let secret = "whsec_" + Data((0..<24).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
        let receiver = try await WebhookReceiver(answers: "200", secret: secret)
        defer { receiver.stop() }
        try await withBelfry(.sqlite, webhook: .init(url: receiver.url, secret: secret)) { app in
            _ = try await Self.trigger(app)
            try await #require(app.deliveryQueue).runOnce()
            let entries = try receiver.entries()
            #expect(entries.count == 1)
            #expect(entries.first?.standard == true && entries.first?.valid == true)
        }
    }

    @Test("a signature changes with the secret and the timestamp")
    func signatureInputs() throws {
        let body = Data(#"{"a":1}"#.utf8)
        let signature = WebhookChannel.signature(secret: "one-secret-0123456789", timestamp: 1_800_000_000, body: body)
        #expect(signature.hasPrefix("t=1800000000,v1="))
        #expect(
            signature != WebhookChannel.signature(secret: "two-secret-0123456789", timestamp: 1_800_000_000, body: body)
        )
        #expect(
            signature != WebhookChannel.signature(secret: "one-secret-0123456789", timestamp: 1_800_000_001, body: body)
        )
        // A keyed HMAC used again and again signs as one keyed for each message.
        for secret in ["one-secret-0123456789", "whsec_" + Data("raw key bytes".utf8).base64EncodedString()] {
            let keyed = WebhookChannel.standardKey(secret)
            let raw =
                secret.hasPrefix("whsec_")
                ? SymmetricKey(data: Data(base64Encoded: String(secret.dropFirst(6)))!)
                : SymmetricKey(data: Data(secret.utf8))
            for (id, timestamp) in [("msg_1", 1_800_000_000), ("msg_2", 1_800_000_001), ("msg_1", 1_800_000_000)] {
                let expected = Data(
                    HMAC<SHA256>.authenticationCode(for: Data("\(id).\(timestamp).".utf8) + body, using: raw))
                #expect(
                    WebhookChannel.standardSignature(key: keyed, id: id, timestamp: timestamp, body: body)
                        == "v1," + expected.base64EncodedString())
            }
        }
        let once = WebhookChannel.signature(secret: "one-secret-0123456789", timestamp: 1_800_000_000, body: body)
        #expect(once == signature, "the same inputs sign alike")
    }

    @Test("a header that cannot be sent fails the delivery for good instead of retrying it")
    func unsendableHeader() async throws {
        let client = try HTTP1Client(
            group: MultiThreadedEventLoopGroup.singleton, tls: .makeClientConfiguration(), connectionsPerOrigin: 1)
        let result = await WebhookChannel.post(
            Data("{}".utf8), to: try HTTP1Client.Target("http://127.0.0.1:9/hook"), id: "msg_1",
            key: WebhookChannel.standardKey("one-secret-0123456789"), timestamp: 1_800_000_000,
            headers: [("X-Injected", "a\r\nX-Evil: 1")], client: client, timeout: .seconds(2),
            failure: "webhook request failed", now: { Date() })
        await client.shutdown()
        guard case .failed(let reason, _) = result else {
            Issue.record("expected a failure for good, got \(result)")
            return
        }
        #expect(reason.contains("X-Injected"))
    }

    @Test("a Retry-After shorter than the backoff's own wait waits the backoff's; the base is a setting")
    func retryAfterFloor() async throws {
        let receiver = try await WebhookReceiver(answers: "503+1,503+1,503+1,200")
        defer { receiver.stop() }
        let clock = TestClock()
        try await withBelfry(.sqlite, clock: clock, jitter: 0.5, webhook: receiver.webhook) { settings in
            settings.retryBase = 8
        } _: { app in
            let worker = try #require(app.deliveryQueue)
            _ = try await Self.trigger(app)
            try await worker.runOnce()
            // Each wait: half (the jitter) of 8, 16, 32 s, not the receiver's 1 s.
            for wait in [4.0, 8, 16] {
                clock.advance(by: wait - 0.1)
                #expect(try await worker.runOnce() == 0, "not before \(wait) s")
                clock.advance(by: 0.1)
                #expect(try await worker.runOnce() == 1)
            }
            #expect(try receiver.entries().map(\.answered) == [503, 503, 503, 200])
        }
        #expect(Backoff(base: 5).delay(afterAttempt: 1, retryAfter: 1, jitter: 0.5) == 2.5)
        #expect(Backoff(base: 5).delay(afterAttempt: 1, retryAfter: 600, jitter: 0.5) == 600)
        #expect(Backoff(base: 5).delay(afterAttempt: 1, retryAfter: 10 * 86_400, jitter: 0.5) == 86_400, "capped")
    }

    @Test("retries back off exponentially with jitter, and honour Retry-After")
    func retries() async throws {
        let receiver = try await WebhookReceiver(answers: "500,503+120,200")
        defer { receiver.stop() }
        let clock = TestClock()
        try await withBelfry(.sqlite, clock: clock, jitter: 0.5, webhook: receiver.webhook) { app in
            let worker = try #require(app.deliveryQueue)
            _ = try await Self.trigger(app)
            #expect(try await worker.runOnce() == 2, "webhook and email")
            #expect(try await worker.runOnce() == 0, "nothing is due yet")
            // First retry: half (the jitter) of the 5 s base.
            clock.advance(by: 2.4)
            #expect(try await worker.runOnce() == 0)
            clock.advance(by: 0.1)
            #expect(try await worker.runOnce() == 1)
            // Then the receiver's Retry-After: 120 s, exactly.
            clock.advance(by: 119.9)
            #expect(try await worker.runOnce() == 0)
            clock.advance(by: 0.1)
            #expect(try await worker.runOnce() == 1)
            #expect(try await worker.runOnce() == 0)

            let attempts = try await Self.attempts(app, channel: "webhook")
            #expect(attempts.map(\.outcome) == ["retry", "retry", "sent"])
            #expect(attempts.map(\.status) == [500, 503, 200])
            let entries = try receiver.entries()
            #expect(entries.map(\.answered) == [500, 503, 200])
            #expect(entries.allSatisfy { $0.valid })
            #expect(entries.allSatisfy { $0.standard }, "Standard Webhooks, checked by the standardwebhooks package")
            #expect(Set(entries.map(\.delivery)).count == 1, "one delivery id across its attempts")
            let numbers = entries.map { entry -> JSONValue? in
                if case .object(let body) = entry.body { return body["attempt"] } else { return nil }
            }
            #expect(numbers == [.number(1), .number(2), .number(3)])
        }
    }

    @Test(
        "after the channel's attempt limit a delivery is dead; a 4xx answer is final at once",
        arguments: ["500", "400"])
    func deadAndFailed(answer: String) async throws {
        let receiver = try await WebhookReceiver(answers: answer)
        defer { receiver.stop() }
        let clock = TestClock()
        try await withBelfry(.sqlite, clock: clock, jitter: 1, webhook: receiver.webhook) { app in
            let worker = try #require(app.deliveryQueue)
            let id = try await Self.trigger(app)
            for _ in 0..<12 {
                try await worker.runOnce()
                clock.advance(by: 3600)
            }
            let status = try await app.send(.GET, "/v1/events/\(id)", bearer: testAPIKey).decode(EventStatus.self)
            let attempts = try await Self.attempts(app, channel: "webhook")
            if answer == "500" {
                #expect(status.deliveries["webhook"] == ["dead": 1])
                #expect(attempts.count == 8)
            } else {
                #expect(status.deliveries["webhook"] == ["failed": 1])
                #expect(attempts.map(\.outcome) == ["failed"])
            }
            #expect(status.lastErrors["webhook"] == "the webhook answered \(answer)")
            #expect(try receiver.entries().count == attempts.count)
        }
    }

    @Test(
        "a delivery claimed by a worker that died is claimed again once its lease expires",
        arguments: TestDatabase.allCases)
    func leaseReclaim(database: TestDatabase) async throws {
        let receiver = try await WebhookReceiver(answers: "200")
        defer { receiver.stop() }
        let clock = TestClock()
        try await withBelfry(database, clock: clock, webhook: receiver.webhook) { app in
            let crashed = try #require(app.deliveryQueue)
            _ = try await Self.trigger(app)
            #expect(try await crashed.claim(limit: 10).count == 2, "claimed, then never attempted")
            let survivor = DeliveryQueue(
                database: { app.db }, storage: crashed.storage, workspace: crashed.workspace,
                providers: crashed.providers, metrics: crashed.metrics, now: crashed.now, jitter: crashed.jitter,
                logger: app.logger, devices: app.belfryServices.devices,
                inbox: app.belfryServices.inboxStore)
            #expect(try await survivor.runOnce() == 0, "the lease still holds")
            clock.advance(by: 121)
            #expect(try await survivor.runOnce() == 2)
            let entries = try receiver.entries()
            #expect(entries.count == 1)
            if case .object(let body) = entries.first?.body { #expect(body["attempt"] == .number(2)) }
        }
    }

    @Test("the claim's read looks each row up by key, even among 20 000 users of a moment ago (PostgreSQL)")
    func claimReadLooksUp() async throws {
        try await withBelfry(.postgres) { app in
            let storage = try #require(app.deliveryQueue).storage
            try await app.db.sql.raw(
                """
                INSERT INTO users (id, external_id, created_at, updated_at) \
                SELECT gen_random_uuid(), 'user-' || n, now(), now() FROM generate_series(1, 20000) AS n
                """
            ).run()
            let ids = (0..<128).map { _ in UUID() }
            func plan(_ join: String) async throws -> String {
                try await app.db.sql.raw(
                    "EXPLAIN SELECT users.external_id FROM deliveries \(unsafeRaw: join) WHERE deliveries.id IN (\(binds: ids))"
                ).all().map { try $0.decode(column: "QUERY PLAN", as: String.self) }.joined(separator: "\n")
            }
            let plain = try await plan("JOIN users ON users.id = deliveries.user_id")
            #expect(plain.contains("Seq Scan on users"), "a plain join reads the whole table: \(plain)")
            let keyed = try await plan(storage.keyJoin("users", on: "users.id = deliveries.user_id"))
            #expect(!keyed.contains("Seq Scan on users"), "\(keyed)")
            #expect(keyed.contains("Index Scan using users_pkey"), "\(keyed)")
        }
    }

    @Test("a delivery whose attempts never finish is dead-lettered once past the attempt limit")
    func poisonDelivery() async throws {
        let receiver = try await WebhookReceiver(answers: "200")
        defer { receiver.stop() }
        let clock = TestClock()
        try await withBelfry(.sqlite, clock: clock, webhook: receiver.webhook) { app in
            let worker = try #require(app.deliveryQueue)
            let id = try await Self.trigger(app)
            // Eight workers claim it and die before recording anything.
            for _ in 0..<8 {
                #expect(try await worker.claim(limit: 10).contains { $0.channel.id == "webhook" })
                clock.advance(by: 121)
            }
            try await worker.runOnce()
            let status = try await app.send(.GET, "/v1/events/\(id)", bearer: testAPIKey).decode(EventStatus.self)
            #expect(status.deliveries["webhook"] == ["dead": 1])
            #expect(status.lastErrors["webhook"] == "gave up after 8 attempts; the last ones did not finish")
            #expect(try receiver.entries().isEmpty, "the provider was not called again")
        }
    }

    @Test("deliveries of a channel removed from the config fail visibly")
    func removedChannel() async throws {
        let receiver = try await WebhookReceiver(answers: "200")
        defer { receiver.stop() }
        try await withTestStorage(.sqlite) { location in
            let id = try await withBelfryApp(location: location, webhook: receiver.webhook) { app, _ in
                try await Self.trigger(app)
            }
            var workspace = WorkspaceConfig.demo
            workspace.channels.removeAll { $0.id == "webhook" }
            for index in workspace.categories.indices {
                workspace.categories[index].channels.removeAll { $0.channel == "webhook" }
                workspace.categories[index].mandatoryChannels.removeAll { $0 == "webhook" }
            }
            try await withBelfryApp(location: location, workspace: workspace, webhook: receiver.webhook) { app, _ in
                try await #require(app.deliveryQueue).runOnce()
                let status = try await app.send(.GET, "/v1/events/\(id)", bearer: testAPIKey).decode(EventStatus.self)
                #expect(status.deliveries["webhook"] == ["failed": 1])
                #expect(status.lastErrors["webhook"] == "the channel is no longer in the workspace config")
            }
            #expect(try receiver.entries().isEmpty)
        }
    }

    @Test("a stopping worker starts nothing new and returns what it claimed to the queue")
    func stopping() async throws {
        let receiver = try await WebhookReceiver(answers: "200")
        defer { receiver.stop() }
        try await withBelfry(.sqlite, webhook: receiver.webhook) { app in
            let worker = try #require(app.deliveryQueue)
            let id = try await Self.trigger(app)
            let claimed = try await worker.claim(limit: 10)
            #expect(claimed.count == 2)
            worker.beginStopping()
            #expect(try await worker.runOnce() == 0)
            try await worker.release(claimed.map(\.id))
            let status = try await app.send(.GET, "/v1/events/\(id)", bearer: testAPIKey).decode(EventStatus.self)
            #expect(status.deliveries["webhook"] == ["queued": 1])
            let attempts = try await app.db.sql.select().column("attempts").from("deliveries")
                .where("channel", .equal, "webhook").first()?.decode(column: "attempts", as: Int.self)
            #expect(attempts == 0, "a released claim does not count as an attempt")
            #expect(try receiver.entries().isEmpty)
        }
    }

    @Test("an unreachable webhook is retried, not lost")
    func unreachable() async throws {
        let clock = TestClock()
        // Port 9 (discard) on loopback has no listener here: the connection is refused.
        try await withBelfry(
            .sqlite, clock: clock, jitter: 1,
            webhook: .init(url: "http://127.0.0.1:9/hook", secret: WebhookReceiver.secret)
        ) { app in
            let worker = try #require(app.deliveryQueue)
            let id = try await Self.trigger(app)
            try await worker.runOnce()
            let status = try await app.send(.GET, "/v1/events/\(id)", bearer: testAPIKey).decode(EventStatus.self)
            #expect(status.deliveries["webhook"] == ["queued": 1])
            #expect(status.lastErrors["webhook"]?.hasPrefix("webhook request failed") == true)
        }
    }
}
