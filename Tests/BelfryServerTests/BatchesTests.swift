import AsyncHTTPClient
import BelfryAPNs
import BelfryCore
import BelfryTestSupport
import BelfryWebPush
import FluentSQLiteDriver
import Foundation
import NIOCore
import SQLKit
import Testing
import Vapor

@testable import BelfryServer

@Suite("Delivery policies: batches (digests)")
struct BatchesTests {
    /// The demo workspace with `thanks`: a 10-minute batch per page, listing 2 items, on the
    /// inbox and the webhook; and `digest`: daily at 09:00 in each user's time zone, templated.
    static var workspace: WorkspaceConfig {
        var workspace = WorkspaceConfig.demo
        workspace.categories.append(
            CategoryDefinition(
                id: "thanks", name: "Thanks", section: "talk",
                channels: [.init(channel: "inbox"), .init(channel: "webhook")],
                batch: BatchRule(windowSeconds: 600, key: "page", maxItems: 2)))
        workspace.categories.append(
            CategoryDefinition(
                id: "digest", name: "Digest", section: "talk", channels: [.init(channel: "inbox")],
                batch: BatchRule(
                    schedule: CalendarRule(hour: 9, repeats: true), title: "{{count}} changes",
                    body: "{{first.title}}{{#has_more}} and {{more}} more{{/has_more}}")))
        return workspace
    }

    static func send(
        _ app: Application, _ category: String, to users: [String], title: String, page: String? = nil
    ) async throws -> UUID {
        try await app.send(
            .POST, "/v1/events", bearer: testAPIKey,
            json: EventRequest(
                category: category, recipients: users,
                content: .init(title: title, body: "for \(page ?? "?")", url: page.map { "https://example.org/\($0)" }),
                data: page.map { ["page": .string($0)] })
        ).decode(EventAccepted.self).eventID
    }

    @Test(
        "events in a window become one notification per user and key, with its batch, in the inbox and the webhook",
        arguments: TestDatabase.allCases)
    func window(database: TestDatabase) async throws {
        let receiver = try await WebhookReceiver(answers: "200")
        defer { receiver.stop() }
        let clock = TestClock()
        try await withBelfry(database, workspace: Self.workspace, clock: clock, webhook: receiver.webhook) { app in
            let ada = try await app.userToken("ada")
            let fanout = app.belfryServices.fanout
            var events: [UUID] = []
            for (index, page) in ["Bell", "Bell", "Tower", "Bell"].enumerated() {
                events.append(
                    try await Self.send(app, "thanks", to: ["ada", "bob"], title: "Thanks \(index)", page: page))
                while try await fanout.processBatch(on: app.db) {}
                clock.advance(by: 60)
            }
            let first = try await APNsChannelTests.status(app, events[0])
            #expect(first.batched == 2 && first.notifications == 0)
            #expect(try await InboxAPITests.page(app, ada).notifications.isEmpty, "nothing before the window closes")
            #expect(try await fanout.closeDueBatches(on: app.db) == false)

            // Bell's batches opened at 0 s, Tower's at 120 s: each closes 600 s after its first event.
            clock.advance(by: 600 - 4 * 60)
            #expect(try await fanout.closeDueBatches(on: app.db))
            #expect(try await fanout.closeDueBatches(on: app.db) == false, "each batch closes once")
            #expect(try await InboxAPITests.page(app, ada).notifications.count == 1)
            clock.advance(by: 120)
            #expect(try await fanout.closeDueBatches(on: app.db))
            let inbox = try await InboxAPITests.page(app, ada).notifications
            #expect(inbox.count == 2, "one for Bell, one for Tower: \(inbox)")
            let bell = try #require(inbox.first { $0.batch?.count == 3 })
            #expect(bell.title == "Thanks 0" && bell.body == "and 2 more")
            #expect(bell.url == "https://example.org/Bell")
            #expect(bell.category == "thanks")
            let items = try #require(bell.batch?.items)
            #expect(items.map(\.eventID) == [events[0], events[1]], "the first max_items, in order")
            #expect(items.map(\.title) == ["Thanks 0", "Thanks 1"])
            #expect(items[0].body == "for Bell" && items[0].url == "https://example.org/Bell")
            #expect(items[0].data == ["page": .string("Bell")])
            #expect(items[1].createdAt.timeIntervalSince(items[0].createdAt) == 60)
            let tower = try #require(inbox.first { $0.batch?.count == 1 })
            #expect(tower.title == "Thanks 2" && tower.body == "for Tower", "one event: its own title and body")
            #expect(try await InboxAPITests.counts(app, ada).unread == 2)

            // The batch's notification belongs to the event that opened it.
            let opened = try await APNsChannelTests.status(app, events[0])
            #expect(opened.notifications == 2 && opened.deliveries["webhook"] == ["queued": 2])
            let queue = try #require(app.deliveryQueue)
            while try await queue.runOnce() > 0 {}
            let bodies = try receiver.entries().map(\.body)
            #expect(bodies.count == 4, "ada and bob, Bell and Tower")
            let adaBell = try #require(
                bodies.first { body in
                    guard case .object(let fields) = body, case .object(let user)? = fields["user"],
                        case .object(let notification)? = fields["notification"],
                        case .object(let batch)? = notification["batch"]
                    else { return false }
                    return user["id"] == .string("ada") && batch["count"] == .number(3)
                })
            guard case .object(let fields) = adaBell, case .object(let notification)? = fields["notification"],
                case .object(let batch)? = notification["batch"], case .array(let listed)? = batch["items"],
                case .object(let firstItem)? = listed.first
            else { Issue.record("no batch in \(adaBell)"); return }
            #expect(fields["event_id"] == .string(events[0].uuidString))
            #expect(notification["id"] == .string(bell.id.uuidString))
            #expect(notification["title"] == .string("Thanks 0") && notification["body"] == .string("and 2 more"))
            #expect(listed.count == 2)
            #expect(firstItem["event_id"] == .string(events[0].uuidString))
            #expect(firstItem["title"] == .string("Thanks 0") && firstItem["body"] == .string("for Bell"))
            #expect(firstItem["url"] == .string("https://example.org/Bell"))
            #expect(firstItem["data"] == .object(["page": .string("Bell")]))
            if case .string(let created)? = firstItem["created_at"] {
                #expect(created.hasSuffix("Z"), "ISO 8601 in UTC")
            } else {
                Issue.record("created_at is missing")
            }

            // A new event after the close opens a new batch.
            _ = try await Self.send(app, "thanks", to: ["ada"], title: "Later", page: "Bell")
            while try await fanout.processBatch(on: app.db) {}
            clock.advance(by: 600)
            #expect(try await fanout.closeDueBatches(on: app.db))
            #expect(try await InboxAPITests.page(app, ada).notifications.count == 3)
        }
    }

    @Test(
        "a digest's summary is in each reader's language: 1, 5 and 21 events in Russian, in English otherwise",
        arguments: TestDatabase.allCases)
    func digestPerLanguage(database: TestDatabase) async throws {
        var workspace = Self.workspace
        let index = try #require(workspace.categories.firstIndex { $0.id == "thanks" })
        workspace.categories[index].batch = BatchRule(
            windowSeconds: 600, key: "page", maxItems: 2,
            title: "{{#plural count}}one={{count}} thank-you|other={{count}} thank-yous{{/plural}}",
            locales: [
                "ru": TextTemplates(
                    title:
                        "{{#plural count}}one={{count}} благодарность|few={{count}} благодарности|many={{count}} благодарностей|other={{count}} благодарности{{/plural}}"
                )
            ])
        let clock = TestClock()
        try await withBelfry(database, workspace: workspace, clock: clock) { app in
            _ = try await app.putUser("olga", UserUpsert(locale: "ru-RU"))
            _ = try await app.putUser("ada", UserUpsert(locale: "en"))
            // Three pages, one batch each: 1, 5 and 21 events.
            for (page, count) in [("Колокол", 1), ("Башня", 5), ("Неф", 21)] {
                for _ in 0..<count {
                    _ = try await Self.send(app, "thanks", to: ["olga", "ada"], title: "Спасибо", page: page)
                }
            }
            while try await app.belfryServices.fanout.processBatch(on: app.db) {}
            clock.advance(by: 600)
            while try await app.belfryServices.fanout.closeDueBatches(on: app.db) {}
            let olga = try await InboxAPITests.page(app, try await app.userToken("olga")).notifications
            #expect(
                Set(olga.map(\.title)) == ["1 благодарность", "5 благодарностей", "21 благодарность"],
                "\(olga.map(\.title))")
            #expect(olga.allSatisfy { $0.locale == "ru" })
            let ada = try await InboxAPITests.page(app, try await app.userToken("ada")).notifications
            #expect(Set(ada.map(\.title)) == ["1 thank-you", "5 thank-yous", "21 thank-yous"], "\(ada.map(\.title))")
            #expect(ada.allSatisfy { $0.locale == nil })
        }
    }

    @Test("a digest of templated events lists each event in the reader's language")
    func digestItemsPerLanguage() async throws {
        var workspace = Self.workspace
        let index = try #require(workspace.categories.firstIndex { $0.id == "thanks" })
        workspace.categories[index].content = ContentTemplates(
            title: "Thanks for your edit on {{page}}", body: "From {{actor}}",
            locales: ["ru": ContentTemplates(title: "Спасибо за правку на странице {{page}}", body: "От {{actor}}")])
        let clock = TestClock()
        try await withBelfry(.sqlite, workspace: workspace, clock: clock) { app in
            _ = try await app.putUser("olga", UserUpsert(locale: "ru"))
            _ = try await app.putUser("ada", UserUpsert(locale: "en"))
            for actor in ["Linus", "Zoë"] {
                let event = EventRequest(
                    category: "thanks", recipients: ["olga", "ada"],
                    data: ["page": .string("Колокол"), "actor": .string(actor)])
                #expect(try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: event).status == .accepted)
            }
            while try await app.belfryServices.fanout.processBatch(on: app.db) {}
            clock.advance(by: 600)
            while try await app.belfryServices.fanout.closeDueBatches(on: app.db) {}
            let olga = try #require(
                try await InboxAPITests.page(app, try await app.userToken("olga")).notifications.first?.batch)
            #expect(olga.items.map(\.title) == Array(repeating: "Спасибо за правку на странице Колокол", count: 2))
            #expect(olga.items.map(\.body) == ["От Linus", "От Zoë"])
            let ada = try #require(
                try await InboxAPITests.page(app, try await app.userToken("ada")).notifications.first?.batch)
            #expect(ada.items.map(\.body) == ["From Linus", "From Zoë"])
        }
    }

    @Test("a daily digest closes at 09:00 in each user's time zone, with its templates")
    func dailyDigest() async throws {
        // 2027-01-15 06:00 UTC: 07:00 in Berlin, 01:00 in New York.
        let clock = TestClock(Date(timeIntervalSince1970: 1_799_992_800))
        try await withBelfry(.sqlite, workspace: Self.workspace, clock: clock) { app in
            _ = try await app.putUser("ada", UserUpsert(timeZone: "Europe/Berlin"))
            _ = try await app.putUser("bob", UserUpsert(timeZone: "America/New_York"))
            for title in ["Bell tower edited", "Bell rope edited", "Nave edited"] {
                _ = try await Self.send(app, "digest", to: ["ada", "bob"], title: title)
                while try await app.belfryServices.fanout.processBatch(on: app.db) {}
            }
            clock.advance(by: 2 * 3600 - 1)  // 08:59:59 in Berlin
            #expect(try await app.belfryServices.fanout.closeDueBatches(on: app.db) == false)
            clock.advance(by: 1)
            #expect(try await app.belfryServices.fanout.closeDueBatches(on: app.db))
            let ada = try await app.userToken("ada")
            let bob = try await app.userToken("bob")
            let adaDigest = try #require(try await InboxAPITests.page(app, ada).notifications.first)
            #expect(adaDigest.title == "3 changes")
            #expect(adaDigest.body == "Bell tower edited and 2 more")
            #expect(try await InboxAPITests.page(app, bob).notifications.isEmpty, "01:00 in New York")
            clock.advance(by: 6 * 3600)  // 09:00 in New York
            #expect(try await app.belfryServices.fanout.closeDueBatches(on: app.db))
            #expect(
                try await InboxAPITests.page(app, try await app.userToken("bob")).notifications.first?.batch?.count == 3
            )
        }
    }

    @Test("instances adding to one batch count every event; racing closers close it once")
    func racingInstances() async throws {
        let clock = TestClock()
        try await withBelfry(.postgres, workspace: Self.workspace, clock: clock) { app in
            for index in 0..<24 {
                _ = try await Self.send(app, "thanks", to: ["ada"], title: "Thanks \(index)", page: "Bell")
            }
            let fanout = app.belfryServices.fanout
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<4 {
                    group.addTask { while try await fanout.processBatch(on: app.db) {} }
                }
                try await group.waitForAll()
            }
            clock.advance(by: 600)
            let closed = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<4 {
                    group.addTask {
                        var closed = 0
                        while try await fanout.closeDueBatches(on: app.db) { closed += 1 }
                        return closed
                    }
                }
                return try await group.reduce(0, +)
            }
            #expect(closed == 1)
            let inbox = try await InboxAPITests.page(app, try await app.userToken("ada")).notifications
            #expect(inbox.count == 1)
            #expect(inbox.first?.batch?.count == 24)
            #expect(inbox.first?.batch?.items.count == 2)
            let items = try await app.db.sql.raw("SELECT COUNT(*) AS n FROM batch_items").first()
            #expect(try items?.decode(column: "n", as: Int.self) == 0, "a closed batch keeps no items")
        }
    }

    @Test("batch settings are checked when the workspace is read")
    func configChecks() throws {
        let file = """
            {
              "channels": [{ "id": "inbox", "kind": "inbox" }],
              "categories": [
                { "id": "a", "name": "A", "channels": ["inbox"],
                  "batch": { "window_seconds": 60, "schedule": { "calendar": { "hour": 9 } } } },
                { "id": "b", "name": "B", "channels": ["inbox"], "batch": { "max_items": 0, "key": "page" } },
                { "id": "c", "name": "C", "channels": ["inbox"],
                  "batch": { "schedule": { "calendar": { "month": 2, "day": 30 } }, "title": "{{#count}}" } },
                { "id": "d", "name": "D", "channels": ["inbox"], "batch": { "window_seconds": 60, "colour": "red" } }
              ],
              "tenants": [{ "id": "main" }]
            }
            """
        let error = try #require(throws: ConfigError.self) {
            try ServerConfigurationTests.resolve(env: ["BELFRY_CONFIG": "belfry.json"], file: file)
        }
        let paths = Set(error.issues.map(\.path))
        #expect(paths.contains("categories[0].batch"), "\(error)")
        #expect(paths.contains("categories[1].batch.max_items") && paths.contains("categories[1].batch"), "\(error)")
        #expect(paths.contains("categories[2].batch.schedule.calendar"), "\(error)")
        #expect(paths.contains("categories[3].batch.colour"), "\(error)")
    }

    @Test("a digest's Web Push message lists the items that fit in 4096 bytes; APNs carries the count and a thread")
    func pushPayloads() throws {
        let category = Self.workspace.categories.first { $0.id == "thanks" }!
        let items = (0..<40).map { index in
            NotificationBatch.Item(
                eventID: UUID(), title: "Thanks \(index) from a long-winded colleague",
                body: String(repeating: "for the careful edit to Bell tower; ", count: 3),
                url: "https://example.org/\(index)",
                data: ["page": .string("Bell")], createdAt: Date(timeIntervalSince1970: 1_800_000_000))
        }
        let content = DeliveryContent(
            deliveryID: UUID(), notificationID: UUID(), category: category, tenant: "enwiki",
            title: "Thanks 0 from a long-winded colleague", body: "and 39 more", createdAt: Date(),
            batch: NotificationBatch(count: 40, items: items))
        let message = WebPushMessage(content, badge: 12)
        let size = WebPushEncryption.encryptedSize(plaintextLength: message.encoded().count)
        #expect(size <= WebPushEncryption.maxPayloadSize)
        let listed = try #require(message.batch)
        #expect(listed.count == 40)
        #expect(listed.items.count > 0 && listed.items.count < 40, "trimmed to fit: \(listed.items.count)")
        #expect(listed.items == Array(items.prefix(listed.items.count)), "the first ones, in order")
        let decoded = try JSONDecoder().decode(JSONValue.self, from: message.encoded())
        guard case .object(let fields) = decoded, case .object(let batch)? = fields["batch"],
            case .array(let sent)? = batch["items"], case .object(let first)? = sent.first
        else { Issue.record("no batch in the message"); return }
        #expect(first["created_at"] == .string("2027-01-15T08:00:00Z"))

        let request = try #require(
            APNsPayload.request(
                APNsNotification(content),
                device: APNsDevice(
                    token: "ab", environment: .production, authorization: .authorized, showsAlerts: true,
                    showsBadge: true, playsSound: true), unread: 3, topic: "org.example.app"))
        let payload = try JSONDecoder().decode(JSONValue.self, from: request.payload)
        guard case .object(let apns) = payload, case .object(let aps)? = apns["aps"],
            case .object(let belfry)? = apns["belfry"]
        else { Issue.record("no aps in \(payload)"); return }
        #expect(aps["thread-id"] == .string("thanks"), "the category groups its digests")
        #expect(belfry["batch"] == .object(["count": .number(40)]))
        #expect(aps["alert"] == .object(["title": .string(content.title), "body": .string("and 39 more")]))
    }

    @Test("templates that do not compile are reported with their path")
    func templateChecks() throws {
        var workspace = WorkspaceConfig.demo
        workspace.categories[0].batch = BatchRule(windowSeconds: 60, title: "{{#count}}", body: "{{count}}")
        #expect(ContentRendering.problems(in: workspace.categories[0]).map(\.path) == ["batch.title"])
        let text = BatchText.render(
            BatchRule(windowSeconds: 60),
            NotificationBatch(
                count: 1, items: [.init(eventID: UUID(), title: "T", body: "B", url: nil, data: nil, createdAt: Date())]
            ), locale: nil)
        #expect(text == ("T", "B", nil))
    }
}

/// Batches across real `belfry serve` processes: killed with SIGKILL mid-window, and two
/// instances on one PostgreSQL closing the same batches.
@Suite("Batches across processes", .serialized)
struct BatchProcessTests {
    static let key = "batch-process-key-0123456789abcdef"
    /// `thanks` gathers a user's events per page for 15 seconds; `mention` reaches the webhook
    /// at most 3 times an hour per user. The window is real time, and ten events fanned out by
    /// two debug builds beside the rest of the suite once took over 5 s: the last ones opened
    /// second batches.
    static let config = """
        {
          "channels": [{ "id": "inbox", "kind": "inbox" }, { "id": "webhook", "kind": "webhook" }],
          "categories": [
            { "id": "thanks", "name": "Thanks", "channels": ["inbox", "webhook"],
              "batch": { "window_seconds": 15, "key": "page", "max_items": 5 } },
            { "id": "mention", "name": "Mention", "channels": ["inbox", "webhook"],
              "throttle": { "limit": 3, "window_seconds": 3600 } }
          ],
          "tenants": [{ "id": "main" }]
        }
        """

    static func start(
        database: String, config: String, webhook: ServerConfiguration.Webhook
    ) async throws
        -> (BackgroundProcess, String)
    {
        let server = try await BelfryServeProcess.start(
            database: database,
            environment: [
                "BELFRY_API_KEY": key, "DATABASE_URL": "", "BELFRY_CONFIG": config,
                "BELFRY_WEBHOOK_URL": webhook.url, "BELFRY_WEBHOOK_SECRET": webhook.secret,
            ])
        return (server.process, server.base)
    }

    @discardableResult
    static func thank(_ base: String, _ users: [String], index: Int) async throws -> UUID {
        let list = users.map { "\"\($0)\"" }.joined(separator: ",")
        let event = #"""
            {"category": "thanks", "recipients": [\#(list)], "data": {"page": "Bell"},
             "content": {"title": "Thanks \#(index)", "body": "for Bell"}}
            """#
        let accepted = try await CommandLineTests.request("POST", "\(base)/v1/events", bearer: key, json: event)
        #expect(accepted.status == 202, "\(accepted.body)")
        return try JSONDecoder().decode(EventAccepted.self, from: Data(accepted.body.utf8)).eventID
    }

    /// The user's inbox once it holds `count` notifications, or as it is after `seconds`.
    static func inbox(
        _ base: String, _ user: String, count: Int, seconds: Double = 30
    ) async throws
        -> [InboxNotification]
    {
        let minted = try await CommandLineTests.request(
            "POST", "\(base)/v1/users/\(user)/tokens", bearer: key, json: "{}")
        let token = try JSONDecoder.iso8601.decode(TokenGrant.self, from: Data(minted.body.utf8)).token
        let deadline = Date().addingTimeInterval(seconds)
        var items: [InboxNotification] = []
        repeat {
            let page = try await CommandLineTests.request("GET", "\(base)/v1/me/notifications", bearer: token)
            items = try JSONDecoder.iso8601.decode(InboxPage.self, from: Data(page.body.utf8)).notifications
            if items.count >= count { return items }
            try await Task.sleep(for: .milliseconds(200))
        } while Date() < deadline
        return items
    }

    /// One number the servers' database holds: through `psql` on PostgreSQL, through a
    /// connection of the test's own on SQLite (the write-ahead log lets it read beside them).
    static func count(_ statement: String, in location: DatabaseLocation) async throws -> Int? {
        switch location {
        case .postgres(let url):
            let answer = try await PostgresTestServer.shared.psql(url, statement)
            return Int(answer.trimmingCharacters(in: .whitespacesAndNewlines))
        case .sqlite(let path):
            let connection = try await SQLiteConnection.open(storage: .file(path: path))
            do {
                let rows = try await connection.query(statement)
                try await connection.close()
                return rows.first?.columns.first?.data.integer
            } catch {
                try? await connection.close()
                throw error
            }
        }
    }

    static func configFile() throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("belfry-batches-\(UUID()).json").path
        try config.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test(
        "a server killed with SIGKILL mid-window closes the batch once after its restart",
        arguments: TestDatabase.allCases)
    func killedMidWindow(database: TestDatabase) async throws {
        let receiver = try await WebhookReceiver(answers: "200")
        defer { receiver.stop() }
        let config = try Self.configFile()
        defer { try? FileManager.default.removeItem(atPath: config) }
        try await withTestStorage(database) { location in
            let url: String
            switch location {
            case .postgres(let postgres): url = postgres
            case .sqlite(let path): url = path
            }
            let (first, firstBase) = try await Self.start(database: url, config: config, webhook: receiver.webhook)
            var last = UUID()
            for index in 0..<7 { last = try await Self.thank(firstBase, ["ada", "bob"], index: index) }
            // Fan-out is quick; the window is not: once both batches hold all seven, kill.
            let deadline = Date().addingTimeInterval(10)
            while Date() < deadline {
                let answer = try await CommandLineTests.request(
                    "GET", "\(firstBase)/v1/events/\(last)", bearer: Self.key)
                if try JSONDecoder.iso8601.decode(EventStatus.self, from: Data(answer.body.utf8)).batched == 2 { break }
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(try await Self.inbox(firstBase, "ada", count: 1, seconds: 0).isEmpty, "killed mid-window")
            #expect(first.terminate(signal: SIGKILL) == 128 + SIGKILL)

            let (second, secondBase) = try await Self.start(database: url, config: config, webhook: receiver.webhook)
            defer { second.terminate() }
            for user in ["ada", "bob"] {
                let inbox = try await Self.inbox(secondBase, user, count: 1)
                #expect(inbox.count == 1, "\(user): \(inbox)")
                #expect(inbox.first?.batch?.count == 7)
                #expect(inbox.first?.batch?.items.map(\.title) == (0..<5).map { "Thanks \($0)" })
            }
            // Well past the window: nothing more closes, and the webhook got one of each.
            try await Task.sleep(for: .seconds(6))
            #expect(try await Self.inbox(secondBase, "ada", count: 2, seconds: 0).count == 1)
            let deadline2 = Date().addingTimeInterval(20)
            while try receiver.entries().count < 2, Date() < deadline2 { try await Task.sleep(for: .milliseconds(100)) }
            let entries = try receiver.entries()
            #expect(entries.count == 2, "one per user: \(entries.map(\.body))")
            // No second batch is open either, to close after the test has looked.
            #expect(try await Self.count("SELECT COUNT(*) FROM batches", in: location) == 2)
        }
    }

    @Test("two instances on one PostgreSQL add to and close each batch once, and hold a throttle's limit")
    func twoInstances() async throws {
        let receiver = try await WebhookReceiver(answers: "200")
        defer { receiver.stop() }
        let config = try Self.configFile()
        defer { try? FileManager.default.removeItem(atPath: config) }
        try await withTestStorage(.postgres) { location in
            guard case .postgres(let url) = location else { return }
            let (first, firstBase) = try await Self.start(database: url, config: config, webhook: receiver.webhook)
            defer { first.terminate() }
            let (second, secondBase) = try await Self.start(database: url, config: config, webhook: receiver.webhook)
            defer { second.terminate() }
            let users = (0..<40).map { "reader-\($0)" }
            // reader-0's stream, held by the second instance, hears of the digest whichever closes it.
            let put = try await CommandLineTests.request(
                "PUT", "\(secondBase)/v1/users/reader-0", bearer: Self.key, json: "{}")
            #expect(put.status < 300, "\(put.body)")
            let minted = try await CommandLineTests.request(
                "POST", "\(secondBase)/v1/users/reader-0/tokens", bearer: Self.key, json: "{}")
            let token = try JSONDecoder.iso8601.decode(TokenGrant.self, from: Data(minted.body.utf8)).token
            let client = HTTPClient.shared
            var streamRequest = HTTPClientRequest(url: "\(secondBase)/v1/me/stream")
            streamRequest.headers.add(name: "Authorization", value: "Bearer \(token)")
            let stream = EventStreamReader(try await client.execute(streamRequest, timeout: .seconds(60)))
            #expect(try await stream.next()?.name == "counts")
            for index in 0..<10 {
                try await Self.thank(index.isMultiple(of: 2) ? firstBase : secondBase, users, index: index)
            }
            // Twelve mentions of ada through both instances: both fan out, the limit holds.
            var mentions: [UUID] = []
            for index in 0..<12 {
                let accepted = try await CommandLineTests.request(
                    "POST", "\(index.isMultiple(of: 2) ? firstBase : secondBase)/v1/events", bearer: Self.key,
                    json: #"{"category": "mention", "recipients": ["ada"], "content": {"title": "M", "body": "b"}}"#)
                mentions.append(try JSONDecoder().decode(EventAccepted.self, from: Data(accepted.body.utf8)).eventID)
            }
            let created = try await stream.next(within: 30)
            #expect(created?.name == "notification.created")
            let streamed = try JSONDecoder.iso8601.decode(
                InboxNotification.self, from: Data((created?.data ?? "").utf8))
            #expect(streamed.batch?.count == 10 && streamed.batch?.items.count == 5)
            for user in ["reader-0", "reader-39"] {
                let inbox = try await Self.inbox(firstBase, user, count: 1)
                #expect(inbox.count == 1 && inbox.first?.batch?.count == 10, "\(user): \(inbox)")
            }
            let deadline = Date().addingTimeInterval(30)
            while try receiver.entries().count < users.count, Date() < deadline {
                try await Task.sleep(for: .milliseconds(100))
            }
            try await Task.sleep(for: .seconds(6))
            let entries = try receiver.entries().filter { entry in
                guard case .object(let body) = entry.body, case .object(let notification)? = body["notification"] else {
                    return false
                }
                return notification["category"] == .string("thanks")
            }
            #expect(entries.count == users.count, "one webhook per user, no batch closed twice")
            var webhook = 0
            var throttled = 0
            for id in mentions {
                let answer = try await CommandLineTests.request("GET", "\(firstBase)/v1/events/\(id)", bearer: Self.key)
                let status = try JSONDecoder.iso8601.decode(EventStatus.self, from: Data(answer.body.utf8))
                #expect(status.state == .done && status.notifications == 1, "the inbox keeps every mention")
                webhook += status.deliveries["webhook"]?.values.reduce(0, +) ?? 0
                throttled += status.skipped["webhook"]?["throttled"] ?? 0
            }
            #expect(webhook == 3 && throttled == 9, "\(webhook) sent, \(throttled) throttled")
            let notifications = try await Self.count(
                "SELECT COUNT(*) FROM notifications WHERE batch IS NOT NULL", in: location)
            #expect(notifications == users.count)
            let closedBy = try await Self.count(
                "SELECT COUNT(*) FROM batches WHERE open_key IS NULL AND notification_id IS NOT NULL", in: location)
            #expect(closedBy == users.count)
            // No second batch is open either, to close after the test has looked.
            #expect(try await Self.count("SELECT COUNT(*) FROM batches", in: location) == users.count)
        }
    }
}
