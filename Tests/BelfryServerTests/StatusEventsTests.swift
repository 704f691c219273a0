import BelfryCore
import BelfryJSON
import BelfryTestServers
import BelfryTestSupport
import Fluent
import Foundation
import NIOConcurrencyHelpers
import SQLKit
import Testing
import Vapor

@testable import BelfryServer

/// Issue 34: status events to the workspace's `webhooks`, queued in the transaction of the
/// change they report, signed per Standard Webhooks and sent with retries.
@Suite("Status events", .serialized)
struct StatusEventsTests {
    static func endpoint(
        _ receiver: WebhookReceiver, events: Set<StatusEventType> = Set(StatusEventType.allCases)
    )
        -> StatusEndpoint
    {
        StatusEndpoint(id: "backend", url: receiver.url, events: events, secret: WebhookReceiver.secret)
    }

    static func sendAll(_ app: Application) async throws {
        let sender = try #require(app.statusEventSender)
        while try await sender.runOnce() {}
    }

    /// A notification for ada, marked `marks` in order (`seen`, `read`…) with her token.
    static func notifyAndMark(_ app: Application, _ marks: [String]) async throws {
        _ = try await InboxAPITests.notify(app, ["ada"], title: "Hello")
        let token = try await app.userToken("ada")
        let item = try #require(try await InboxAPITests.page(app, token).notifications.first)
        for mark in marks {
            #expect(try await app.send(.POST, "/v1/me/notifications/\(item.id)/\(mark)", bearer: token).status == .ok)
        }
    }

    /// The events the receiver got, their `data` by type; each request must verify with the
    /// `standardwebhooks` package.
    static func received(_ receiver: WebhookReceiver) throws -> [String: [[String: JSONValue]]] {
        var byType: [String: [[String: JSONValue]]] = [:]
        for entry in try receiver.entries() {
            #expect(entry.standard)
            if case .object(let fields) = entry.body, case .string(let type)? = fields["type"],
                case .object(let data)? = fields["data"]
            {
                byType[type, default: []].append(data)
            }
        }
        return byType
    }

    static func rows(_ app: Application) async throws -> [(type: String, status: String, attempts: Int)] {
        try await app.db.sql.select().columns("type", "status", "attempts").from("status_events")
            .orderBy("created_at").all().map {
                (
                    try $0.decode(column: "type", as: String.self), try $0.decode(column: "status", as: String.self),
                    try $0.decode(column: "attempts", as: Int.self)
                )
            }
    }

    @Test(
        "deliveries, reads, answers and preference changes reach the endpoint signed, once each",
        arguments: TestDatabase.allCases)
    func reported(database: TestDatabase) async throws {
        let receiver = try await WebhookReceiver(answers: "200")
        defer { receiver.stop() }
        try await withBelfry(database, settings: { $0.statusEndpoints = [Self.endpoint(receiver)] }) { app in
            // Email has no provider here: its delivery fails, which is reported.
            _ = try await DeliveryQueueTests.trigger(app, "login-fail", to: ["ada"])
            while try await app.deliveryQueue!.runOnce() > 0 {}
            let token = try await app.userToken("ada")
            let item = try #require(try await InboxAPITests.page(app, token).notifications.first)
            let path = "/v1/me/notifications/\(item.id.uuidString.lowercased())"
            #expect(try await app.send(.POST, "\(path)/seen", bearer: token).status == .ok)
            #expect(try await app.send(.POST, "\(path)/read", bearer: token).status == .ok)
            #expect(try await app.send(.POST, "\(path)/read", bearer: token).status == .ok, "again: nothing new")
            #expect(try await app.send(.POST, "\(path)/actions/was-me", bearer: token).status == .ok)
            #expect(try await app.send(.POST, "\(path)/actions/was-me", bearer: token).status == .ok, "a repeat")
            #expect(try await app.send(.POST, "\(path)/archive", bearer: token).status == .ok)
            let etag = try #require(try await app.send(.GET, "/v1/me/preferences", bearer: token).etag)
            let changed = try await app.send(
                .PATCH, "/v1/me/preferences/categories/mention", bearer: token,
                json: PreferencesAPITests.body("opt_out"), headers: ["If-Match": etag])
            #expect(changed.status == .ok)
            // Refused (the version moved on): rolled back, so nothing is reported.
            let refused = try await app.send(
                .PATCH, "/v1/me/preferences/categories/reverted", bearer: token,
                json: PreferencesAPITests.body("opt_out"), headers: ["If-Match": etag])
            #expect(refused.status == .preconditionFailed)

            try await Self.sendAll(app)
            let entries = try receiver.entries()
            #expect(entries.allSatisfy { $0.standard }, "every request verifies with the standardwebhooks package")
            let bodies = entries.map(\.body)
            let types = bodies.compactMap { body -> String? in
                if case .object(let fields) = body, case .string(let type)? = fields["type"] { type } else { nil }
            }
            // Ada has no device: the three push channels are skipped at fan-out.
            #expect(types.filter { $0 == "message.skipped" }.count == 3)
            // The category's email and webhook channels have no provider here: both fail.
            #expect(
                types.filter { $0 != "message.skipped" }.sorted() == [
                    "message.action", "message.archived", "message.failed", "message.failed", "message.queued",
                    "message.queued", "message.read", "message.seen", "message.sent", "preferences.updated",
                ], "\(types)")
            func data(_ type: String, channel: String? = nil) -> [String: JSONValue] {
                for case .object(let fields) in bodies where fields["type"] == .string(type) {
                    if case .object(let data)? = fields["data"], channel == nil || data["channel"] == .string(channel!)
                    {
                        return data
                    }
                }
                return [:]
            }
            let failed = data("message.failed", channel: "email")
            #expect(failed["user"] == .string("ada") && failed["channel"] == .string("email"))
            #expect(failed["category"] == .string("login-fail") && failed["tenant"] == .string("enwiki"))
            #expect(failed["attempt"] == .number(1))
            if case .string(let reason)? = failed["reason"] {
                #expect(reason.contains("no provider"))
            } else {
                Issue.record("message.failed has no reason")
            }
            // Queued at fan-out, then failed: the same message.
            let queued = data("message.queued", channel: "email")
            #expect(queued["message"] == failed["message"] && queued["user"] == .string("ada"))
            // The inbox's notification is its message, delivered at fan-out.
            #expect(data("message.sent", channel: "inbox")["message"] == .string(item.id.uuidString.lowercased()))
            #expect(data("message.read")["message"] == .string(item.id.uuidString.lowercased()))
            #expect(data("message.read")["channel"] == .string("inbox"))
            #expect(data("message.action")["action"] == .string("was-me"))
            #expect(data("preferences.updated")["tenant"] == .string("enwiki"))
            #expect(data("preferences.updated")["user"] == .string("ada"))
            // Each body's id is its webhook-id, and every row is sent.
            #expect(try await Self.rows(app).allSatisfy { $0.status == "sent" && $0.attempts == 1 })
        }
    }

    @Test(
        "APNs to three users: sent for two, a 410 reported as device.retired and message.failed",
        arguments: TestDatabase.allCases)
    func pushOutcomes(database: TestDatabase) async throws {
        let receiver = try await WebhookReceiver(answers: "200")
        defer { receiver.stop() }
        let apns = try await APNsTestServer()
        do {
            try await withBelfry(
                database,
                settings: {
                    APNsChannelTests.settings(apns)(&$0)
                    $0.statusEndpoints = [
                        Self.endpoint(receiver, events: [.messageSent, .messageFailed, .deviceRetired])
                    ]
                }
            ) { app in
                var devices: [String: DeviceRecord] = [:]
                for (index, user) in ["ada", "bob", "cy"].enumerated() {
                    let token = String(repeating: String(format: "%02x", index + 10), count: 32)
                    devices[user] = try await APNsChannelTests.register(
                        app, try await app.userToken(user), token: token)
                }
                apns.script([.failure(status: 410, reason: "Unregistered")], for: devices["cy"]?.token ?? "")
                _ = try await InboxAPITests.notify(app, ["ada", "bob", "cy"], title: "Hello", category: "reverted")
                while try await app.deliveryQueue!.runOnce() > 0 {}
                try await Self.sendAll(app)
                let byType = try Self.received(receiver)
                let sent = (byType["message.sent"] ?? []).filter { $0["channel"] == .string("ios_push") }
                #expect(
                    Set(sent.compactMap { if case .string(let user)? = $0["user"] { user } else { nil } }) == [
                        "ada", "bob",
                    ])
                #expect(sent.allSatisfy { $0["provider_status"] == .number(200) && $0["device"] != nil })
                let failed = try #require(byType["message.failed"]?.first { $0["channel"] == .string("ios_push") })
                #expect(failed["user"] == .string("cy"))
                let retired = try #require(byType["device.retired"]?.first)
                #expect(byType["device.retired"]?.count == 1)
                #expect(retired["user"] == .string("cy") && retired["reason"] == .string("Unregistered"))
                #expect(retired["device"] == .string(try #require(devices["cy"]).id.uuidString.lowercased()))
            }
        } catch {
            await apns.shutdown()
            throw error
        }
        await apns.shutdown()
    }

    @Test("a throttled skip, a one-click unsubscribe and a closed digest are reported in their transactions")
    func policies() async throws {
        let receiver = try await WebhookReceiver(answers: "200")
        defer { receiver.stop() }
        let clock = TestClock()
        var workspace = PoliciesTests.workspace
        workspace.categories.append(
            CategoryDefinition(
                id: "digest", name: "Digest", section: "talk", channels: [.init(channel: "inbox")],
                batch: BatchRule(windowSeconds: 60, title: "{{count}} things")))
        try await withBelfry(
            .sqlite, workspace: workspace, clock: clock,
            settings: {
                $0.statusEndpoints = [
                    Self.endpoint(receiver, events: [.messageSkipped, .emailUnsubscribed, .batchClosed])
                ]
            }
        ) { app in
            // `mention` lets 3 an hour reach the webhook: the fourth is a throttled skip.
            for _ in 0..<4 { _ = try await PoliciesTests.send(app, "mention", to: ["ada"]) }
            // The digest: two events, then its window ends.
            for _ in 0..<2 { _ = try await PoliciesTests.send(app, "digest", to: ["ada"]) }
            clock.advance(by: 61)
            #expect(try await app.belfryServices.fanout.closeDueBatches(on: app.db))
            // The link in an email: edit-user-talk's emails off on enwiki.
            let userID = try #require(try await UserModel.query(on: app.db).filter(\.$externalID == "ada").first()?.id)
            let link = try app.belfry.webSigner.sign(
                UnsubscribeLink(
                    uid: userID, category: "edit-user-talk", channel: "email", tenant: "enwiki",
                    exp: Int(clock.now.timeIntervalSince1970) + 86400))
            let unsubscribed = try await app.send(
                .POST, "/unsubscribe/\(link)", rawBody: "List-Unsubscribe=One-Click",
                headers: ["Content-Type": "application/x-www-form-urlencoded"])
            #expect(unsubscribed.status == .ok)

            try await Self.sendAll(app)
            let byType = try Self.received(receiver)
            let throttled = (byType["message.skipped"] ?? []).filter { $0["reason"] == .string("throttled") }
            #expect(throttled.count == 1)
            #expect(throttled.first?["channel"] == .string("webhook") && throttled.first?["user"] == .string("ada"))
            #expect(throttled.first?["category"] == .string("mention"))
            let closed = try #require(byType["batch.closed"]?.first)
            #expect(byType["batch.closed"]?.count == 1)
            #expect(closed["count"] == .number(2) && closed["category"] == .string("digest"))
            #expect(closed["notification"] != .null && closed["user"] == .string("ada"))
            let email = try #require(byType["email.unsubscribed"]?.first)
            #expect(email["category"] == .string("edit-user-talk") && email["tenant"] == .string("enwiki"))
            #expect(email["channel"] == .string("email") && email["user"] == .string("ada"))
        }
    }

    @Test("an endpoint takes only its events; a failing one is retried with backoff, with the same id")
    func retriesAndFilters() async throws {
        let receiver = try await WebhookReceiver(answers: "503,200")
        defer { receiver.stop() }
        let clock = TestClock()
        try await withBelfry(
            .sqlite, clock: clock, jitter: 0.5,
            settings: { $0.statusEndpoints = [Self.endpoint(receiver, events: [.messageRead])] }
        ) { app in
            try await Self.notifyAndMark(app, ["seen", "read"])
            #expect(try await Self.rows(app).map(\.type) == ["message.read"], "seen is not this endpoint's")

            try await Self.sendAll(app)
            #expect(try await Self.rows(app).map(\.status) == ["queued"], "503: tried again later")
            #expect(try receiver.entries().map(\.answered) == [503])
            clock.advance(by: 60)
            try await Self.sendAll(app)
            #expect(try await Self.rows(app).map { "\($0.status) \($0.attempts)" } == ["sent 2"])
            let ids = try receiver.entries().compactMap { entry -> JSONValue? in
                if case .object(let fields) = entry.body { fields["id"] } else { nil }
            }
            #expect(ids.count == 2 && ids[0] == ids[1], "the same id on every attempt")
        }
    }

    /// The rows of `status_events` that bundle reports (``StatusEventReports``), with each
    /// report's body.
    static func bundles(_ app: Application) async throws -> [(id: UUID, status: String, reports: Int, bodies: [String])]
    {
        try await app.db.sql.select().columns("id", "status", "reports", "body").from("status_events")
            .orderBy("created_at").all().compactMap { row in
                let body = try row.decode(column: "body", as: String.self)
                guard !body.hasPrefix("{") else { return nil }
                let id = try row.decode(column: "id", as: UUID.self)
                return (
                    id, try row.decode(column: "status", as: String.self),
                    try row.decode(column: "reports", as: Int.self),
                    StatusEventReports.decode(rowID: id, body: body).map(\.body)
                )
            }
    }

    @Test(
        "many reports of one change are bundled; each is posted with its own id, and those that end apart split",
        arguments: TestDatabase.allCases)
    func bundled(database: TestDatabase) async throws {
        // The second request is answered 503, every other 200.
        let receiver = try await WebhookReceiver(answers: "200,503,200")
        defer { receiver.stop() }
        let clock = TestClock()
        let users = (0..<70).map { "user-\($0)" }
        try await withBelfry(
            database, clock: clock, jitter: 0.5,
            settings: { $0.statusEndpoints = [Self.endpoint(receiver, events: [.messageSent])] }
        ) { app in
            _ = try await InboxAPITests.notify(app, users, title: "Hello")
            let queued = try await Self.bundles(app)
            #expect(queued.map(\.reports).sorted() == [6, 64], "fan-out's 70 inbox reports in two rows")
            #expect(try await Self.rows(app).count == 2)

            try await Self.sendAll(app)
            let after = try await Self.bundles(app)
            #expect(after.map { "\($0.status) \($0.reports)" }.sorted() == ["queued 1", "sent 6", "sent 63"])
            #expect(try receiver.entries().count == 70)
            clock.advance(by: 3600)
            try await Self.sendAll(app)
            #expect(
                try await Self.bundles(app).map { "\($0.status) \($0.reports)" }.sorted() == [
                    "sent 1", "sent 6", "sent 63",
                ])

            let entries = try receiver.entries()
            #expect(entries.count == 71 && entries.allSatisfy(\.standard))
            let ids = entries.compactMap { entry -> String? in
                if case .object(let fields) = entry.body, case .string(let id)? = fields["id"] { id } else { nil }
            }
            #expect(Set(ids).count == 70, "one id per report")
            let refused = try #require(entries.first { $0.answered == 503 })
            #expect(entries.last?.body == refused.body, "the refused report again, the same body and id")
            let reached = Set(
                try Self.received(receiver)["message.sent"]?.compactMap { data -> String? in
                    if case .string(let user)? = data["user"] { user } else { nil }
                } ?? [])
            #expect(reached == Set(users))
        }
    }

    @Test("a row whose body holds no readable report fails, kept for the console, and nothing is posted")
    func unreadableRow() async throws {
        let receiver = try await WebhookReceiver(answers: "200")
        defer { receiver.stop() }
        try await withBelfry(
            .sqlite, settings: { $0.statusEndpoints = [Self.endpoint(receiver, events: [.messageRead])] }
        ) {
            app in
            try await Self.notifyAndMark(app, ["read"])
            try await app.db.sql.update("status_events").set("body", to: "damaged by hand").run()
            try await Self.sendAll(app)
            #expect(try await Self.rows(app).map { "\($0.status) \($0.attempts)" } == ["failed 1"])
            #expect(try receiver.entries().isEmpty)
        }
    }

    @Test("a notification due later in the inbox is reported sent when it is announced, not before")
    func scheduledInboxSent() async throws {
        let receiver = try await WebhookReceiver(answers: "200")
        defer { receiver.stop() }
        let clock = TestClock()
        try await withBelfry(
            .sqlite, clock: clock, settings: { $0.statusEndpoints = [Self.endpoint(receiver, events: [.messageSent])] }
        ) { app in
            _ = try await app.putUser("ada", UserUpsert(timeZone: "UTC"))
            let hour = Calendar(identifier: .gregorian).dateComponents(in: .gmt, from: clock.now).hour ?? 0
            let event = EventRequest(
                category: "edit-thank", recipients: ["ada"], content: .init(title: "Thanks", body: "For the edit"),
                schedule: .init(calendar: CalendarRule(hour: (hour + 1) % 24, minute: 0)))
            #expect(try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: event).status == .accepted)
            while try await app.belfryServices.fanout.processBatch(on: app.db) {}
            let queue = try #require(app.deliveryQueue)
            while try await queue.runOnce() > 0 {}
            #expect(try await Self.rows(app).filter { $0.type == "message.sent" && $0.status == "queued" }.count == 0)
            clock.advance(by: 3600)
            #expect(try await queue.runOnce() == 1, "announced")
            let sent = try await app.db.sql.select().column("body").from("status_events").all().map {
                try $0.decode(column: "body", as: String.self)
            }
            #expect(sent.count == 1 && sent[0].contains(#""channel":"inbox""#), "\(sent)")
            #expect(try await queue.runOnce() == 0, "once")
        }
    }

    @Test("status event bodies are written as the JSON encoder writes them")
    func bodiesAsTheEncoderWrites() throws {
        let values: [String: JSONValue] = [
            "user": .string("zoë \"quoted\" back\\slash / \n\t\r\u{08}\u{0C}\u{01} ✓ 🔔"),
            "count": .number(21), "ratio": .number(0.25), "big": .number(1e20), "negative": .number(-3),
            "flag": .bool(true), "none": .null, "list": .array([.number(1), .string("a"), .object([:])]),
            "nested": .object(["b": .string("2"), "a": .array([])]),
        ]
        var text: [UInt8] = []
        JSONText.write(values, into: &text)
        let encoded = String(decoding: try Response.jsonEncoder.encode(values), as: UTF8.self)
        #expect(String(decoding: text, as: UTF8.self) == encoded)
        for _ in 0..<100 {
            let id = UUID()
            #expect(id.lowerCaseText == id.uuidString.lowercased() && id.upperCaseText == id.uuidString)
        }
    }

    @Test("while deliveries are under way, status events wait for them, at most 30 s")
    func yieldsToDeliveries() async throws {
        let receiver = try await WebhookReceiver(answers: "200")
        defer { receiver.stop() }
        let clock = TestClock()
        try await withBelfry(
            .sqlite, clock: clock, settings: { $0.statusEndpoints = [Self.endpoint(receiver, events: [.messageRead])] }
        ) { app in
            try await Self.notifyAndMark(app, ["read"])
            let own = try #require(app.statusEventSender)
            let busy = NIOLockedValueBox(true)
            let sender = StatusEventSender(
                database: { app.db }, storage: app.belfry.database, endpoints: own.endpoints.values.map(\.endpoint),
                client: own.client, now: { clock.now }, jitter: { 0.5 }, backoff: own.backoff, logger: app.logger,
                deliveriesBusy: { busy.withLockedValue { $0 } })
            #expect(try await sender.runOnce() == false, "a fresh report waits while deliveries run")
            clock.advance(by: StatusEventSender.deferral - 1)
            #expect(try await sender.runOnce() == false)
            clock.advance(by: 1)
            #expect(try await sender.runOnce() == false, "one look every 5 s while busy: each is a write")
            clock.advance(by: StatusEventSender.busyLookInterval - 1)
            #expect(try await sender.runOnce(), "over 30 s old: sent beside the deliveries")
            #expect(try receiver.entries().count == 1)

            try await Self.notifyAndMark(app, ["read"])
            busy.withLockedValue { $0 = false }
            #expect(try await sender.runOnce(), "an idle queue: sent at once")
            #expect(try receiver.entries().count == 2)
        }
    }

    @Test("erasing a user erases the status events about them, sent or queued", arguments: TestDatabase.allCases)
    func erasure(database: TestDatabase) async throws {
        let receiver = try await WebhookReceiver(answers: "200")
        defer { receiver.stop() }
        try await withBelfry(database, settings: { $0.statusEndpoints = [Self.endpoint(receiver)] }) { app in
            try await Self.notifyAndMark(app, ["read"])
            _ = try await InboxAPITests.notify(app, ["bob"], title: "Hello")
            // One event to both: its reports for the two are bundled in one row.
            _ = try await InboxAPITests.notify(app, ["bob", "ada"], title: "Both")
            #expect(try await Self.bundles(app).contains { $0.reports == 2 })
            #expect(try await Self.rows(app).count > 2)
            #expect(try await app.send(.DELETE, "/v1/users/ada", bearer: testAPIKey).status == .noContent)
            let left = try await app.db.sql.select().column("body").from("status_events").all().map {
                try $0.decode(column: "body", as: String.self)
            }
            #expect(!left.isEmpty && left.allSatisfy { !$0.contains(#""user":"ada""#) }, "bob's stay")
            #expect(left.contains { $0.contains(#""user":"bob""#) })
            let bundles = try await Self.bundles(app)
            #expect(bundles.allSatisfy { $0.reports == $0.bodies.count }, "the count follows the lines")
            #expect(bundles.contains { $0.bodies.count == 1 && $0.bodies[0].contains(#""user":"bob""#) })
        }
    }

    @Test("an endpoint that keeps failing: dead after the last attempt, and a 400 fails at once")
    func deadAndFailed() async throws {
        let receiver = try await WebhookReceiver(answers: "503")
        defer { receiver.stop() }
        let clock = TestClock()
        try await withBelfry(
            .sqlite, clock: clock, jitter: 0.5,
            settings: { $0.statusEndpoints = [Self.endpoint(receiver, events: [.messageRead])] }
        ) { app in
            try await Self.notifyAndMark(app, ["read"])
            for _ in 0..<StatusEventSender.maxAttempts {
                try await Self.sendAll(app)
                clock.advance(by: 3600)
            }
            #expect(try await Self.rows(app).map { "\($0.status) \($0.attempts)" } == ["dead 8"])
            #expect(try receiver.entries().count == 8)
        }
        let refusing = try await WebhookReceiver(answers: "400")
        defer { refusing.stop() }
        try await withBelfry(
            .sqlite, settings: { $0.statusEndpoints = [Self.endpoint(refusing, events: [.messageRead])] }
        ) {
            app in
            try await Self.notifyAndMark(app, ["read"])
            try await Self.sendAll(app)
            #expect(try await Self.rows(app).map { "\($0.status) \($0.attempts)" } == ["failed 1"])

            // The console lists it, and its Retry queues it again with its attempts reset.
            let signedIn = try await app.send(
                .POST, "/admin/session", rawBody: "api_key=\(testAPIKey)", headers: ConsoleTests.form)
            let cookie = try #require(signedIn.headers.setCookie?[ConsoleSession.cookieName])
            let session: HTTPHeaders = ["Cookie": "\(ConsoleSession.cookieName)=\(cookie.string)"]
            let page = try await app.send(.GET, "/admin", headers: session).body.string
            #expect(page.contains("Status events") && page.contains("1 failed"))
            #expect(page.contains("the webhook answered 400"))
            let csrf = try #require(page.firstMatch(of: /name="_csrf" value="([^"]+)"/)?.output.1)
            let id = try #require(
                try await app.db.sql.select().column("id").from("status_events").first()?.decode(
                    column: "id", as: UUID.self))
            let retried = try await app.send(
                .POST, "/admin/status-events/retry", rawBody: "_csrf=\(csrf)&id=\(id.uuidString.lowercased())",
                headers: ConsoleTests.form(session))
            #expect(retried.status == .seeOther)
            #expect(retried.headers.first(name: .location) == "/admin?retried=1")
            #expect(try await Self.rows(app).map { "\($0.status) \($0.attempts)" } == ["queued 0"])
            let again = try await app.send(
                .POST, "/admin/status-events/retry", rawBody: "_csrf=\(csrf)&id=\(id.uuidString.lowercased())",
                headers: ConsoleTests.form(session))
            #expect(again.status == .notFound, "no longer failed or dead")
        }
    }

    @Test("a status event queued with its change survives a crash right after the commit")
    func durable() async throws {
        let receiver = try await WebhookReceiver(answers: "200")
        defer { receiver.stop() }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("belfry-status-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let location = DatabaseLocation.sqlite(path: directory.appendingPathComponent("b.sqlite").path)
        let endpoint = Self.endpoint(receiver)
        // The first process records the read, and stops without sending anything (no workers).
        try await withBelfryApp(location: location, settings: { $0.statusEndpoints = [endpoint] }) { app, _ in
            try await Self.notifyAndMark(app, ["read"])
        }
        #expect(try receiver.entries().isEmpty)
        try await withBelfryApp(location: location, settings: { $0.statusEndpoints = [endpoint] }) { app, _ in
            try await Self.sendAll(app)
        }
        let types = try receiver.entries().compactMap { entry -> JSONValue? in
            if case .object(let fields) = entry.body { fields["type"] } else { nil }
        }
        #expect(types.contains(.string("message.read")))
    }

    @Test("the file's webhooks are read and checked: every problem with its path, the secret kept out of dumps")
    func configuration() async throws {
        var config = try #require(
            try JSONSerialization.jsonObject(
                with: Data(
                    contentsOf: PackagePaths.root.appendingPathComponent(
                        "Sources/BelfryServer/Resources/demo-workspace.json"))) as? [String: Any])
        let files = [
            "hook.secret": "whsec_" + Data(repeating: 7, count: 24).base64EncodedString() + "\n", "short": "abc",
        ]
        func resolve(_ webhooks: [[String: Any]]) throws(ConfigError) -> ServerConfiguration {
            config["webhooks"] = webhooks
            let data = (try? JSONSerialization.data(withJSONObject: config)) ?? Data()
            return try ServerConfiguration.resolve(flags: .init(config: "config.json"), environment: [:]) { path in
                if path == "config.json" { return data }
                guard let text = files[path] else { throw CocoaError(.fileReadNoSuchFile) }
                return Data(text.utf8)
            }
        }
        let good = try resolve([
            [
                "id": "backend", "url": "https://hooks.example.org/belfry",
                "events": ["message.sent", "device.retired"],
                "secret_path": "hook.secret",
            ]
        ])
        #expect(good.statusEndpoints.map(\.id) == ["backend"])
        #expect(good.statusEndpoints.first?.events == [.messageSent, .deviceRetired])
        #expect(good.statusEndpoints.first?.secret.hasPrefix("whsec_") == true, "read from its file, trimmed")
        #expect(!"\(good)".contains("whsec_"), "the secret is not in the settings' description")

        let error = try #require(throws: ConfigError.self) {
            try resolve([
                ["id": "a", "url": "http://hooks.example.org/", "events": ["message.sent"], "secret_path": "short"],
                ["id": "b", "url": "https://x.example.org/", "events": ["message.delivered"], "secret_path": "nope"],
                ["id": "a", "url": "https://y.example.org/", "events": [], "secret_path": "hook.secret", "x": 1],
            ])
        }
        let text = "\(error)"
        for expected in [
            "webhooks[0].url: must be https", "webhooks[0].secret_path: short: the secret needs at least 16",
            "webhooks[1].events[0]: expected", "webhooks[1].secret_path: cannot read nope",
            "webhooks[2].id: another webhook already has the id", "webhooks[2].x: unknown key",
        ] {
            #expect(text.contains(expected), "\(expected) in \(text)")
        }
    }
}

/// `kill -9` of `belfry serve` right after it acknowledged reads: their status events were
/// committed with them, and the next start sends every one.
@Suite("Status events survive kill -9", .serialized)
struct StatusEventsCrashTests {
    static let key = "status-crash-key-0123456789abcdef"

    @Test("kill -9 right after 1 000 reads are acknowledged: every message.read arrives after the restart")
    func killedAfterReads() async throws {
        // The receiver holds every request until the process is dead, so that the events are
        // queued or in flight at the kill however fast the reads go. (A receiver slowed by 100 ms
        // a request was not enough: on a loaded runner all 1 000 had arrived before the kill.)
        let directory = try CommandLineTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let hold = directory.appendingPathComponent("hold")
        try Data().write(to: hold)
        let receiver = try await WebhookReceiver(answers: "200", hold: hold.path)
        defer { receiver.stop() }
        var config = try #require(
            try JSONSerialization.jsonObject(
                with: Data(
                    contentsOf: PackagePaths.root.appendingPathComponent(
                        "Sources/BelfryServer/Resources/demo-workspace.json"))) as? [String: Any])
        let secret = directory.appendingPathComponent("status.secret")
        try Data(WebhookReceiver.secret.utf8).write(to: secret)
        config["webhooks"] = [
            ["id": "backend", "url": receiver.url, "events": ["message.read"], "secret_path": secret.path]
        ]
        let configFile = directory.appendingPathComponent("workspace.json")
        try JSONSerialization.data(withJSONObject: config).write(to: configFile)
        let database = directory.appendingPathComponent("b.sqlite").path
        let environment = [
            "BELFRY_API_KEY": Self.key, "DATABASE_URL": "", "BELFRY_CONFIG": configFile.path,
            // One user reads 1 000 notifications in seconds: past the default 600 a minute.
            "BELFRY_RATE_LIMITS": "user=off",
            // Events the dead process had claimed are claimed again after their lease.
            "BELFRY_DELIVERY_LEASE": "3",
        ]
        let first = try await BelfryServeProcess.start(database: database, environment: environment)
        let base = first.base
        let reads = 1_000
        // 1 000 notifications for ada: 1 000 events.
        try await withThrowingTaskGroup(of: Void.self) { group in
            // Two clients at a time: the suite runs beside this test on the same two cores.
            for worker in 0..<2 {
                group.addTask {
                    for index in stride(from: worker, to: reads, by: 2) {
                        let event =
                            #"{"category": "mention", "recipients": ["ada"], "content": {"title": "N\#(index)", "body": "b"}}"#
                        let answer = try await CommandLineTests.request(
                            "POST", "\(base)/v1/events", bearer: Self.key, json: event)
                        #expect(answer.status == 202)
                    }
                }
            }
            try await group.waitForAll()
        }
        let grant = try await CommandLineTests.request("POST", "\(base)/v1/users/ada/tokens", bearer: Self.key)
        let token = try JSONDecoder.iso8601.decode(TokenGrant.self, from: Data(grant.body.utf8)).token
        var ids: [UUID] = []
        let deadline = Date().addingTimeInterval(60)
        while ids.count < reads && Date() < deadline {
            ids = []
            var cursor: String?
            repeat {
                let query = "limit=100" + (cursor.map { "&cursor=\($0)" } ?? "")
                let page = try await CommandLineTests.request(
                    "GET", "\(base)/v1/me/notifications?\(query)", bearer: token)
                let decoded = try JSONDecoder.iso8601.decode(InboxPage.self, from: Data(page.body.utf8))
                ids += decoded.notifications.map(\.id)
                cursor = decoded.nextCursor
            } while cursor != nil
            if ids.count < reads { try await Task.sleep(for: .milliseconds(200)) }
        }
        #expect(ids.count == reads, "every notification fanned out")
        // The reads, two at a time; each 200 means the read and its status event are committed.
        let listed = ids
        let acknowledged = try await withThrowingTaskGroup(of: Int.self) { group in
            for worker in 0..<2 {
                group.addTask {
                    var done = 0
                    for index in stride(from: worker, to: listed.count, by: 2) {
                        let answer = try await CommandLineTests.request(
                            "POST", "\(base)/v1/me/notifications/\(listed[index])/read", bearer: token)
                        if answer.status == 200 { done += 1 }
                    }
                    return done
                }
            }
            return try await group.reduce(0, +)
        }
        #expect(first.process.terminate(signal: SIGKILL) == 128 + SIGKILL)
        #expect(acknowledged == reads)
        func received() throws -> Set<String> {
            Set(
                try receiver.entries().compactMap { entry -> String? in
                    guard case .object(let fields) = entry.body, fields["type"] == .string("message.read"),
                        case .object(let data)? = fields["data"], case .string(let message)? = data["message"]
                    else { return nil }
                    return message
                })
        }
        #expect(try received().isEmpty, "the receiver held every request until the process died")
        try FileManager.default.removeItem(at: hold)

        let second = try await BelfryServeProcess.start(database: database, environment: environment)
        defer { second.process.terminate() }
        let wait = Date().addingTimeInterval(60)
        while try received().count < reads && Date() < wait { try await Task.sleep(for: .milliseconds(200)) }
        #expect(try received() == Set(ids.map { $0.uuidString.lowercased() }), "every read reported")
        #expect(try receiver.entries().allSatisfy { $0.standard })
    }
}
