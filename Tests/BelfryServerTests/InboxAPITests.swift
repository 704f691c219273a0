import BelfryCore
import BelfryTestSupport
import Fluent
import Foundation
import SQLKit
import Testing
import Vapor
import VaporTesting

@testable import BelfryServer

@Suite("Inbox API")
struct InboxAPITests {
    /// Triggers one notification for each user and fans it out.
    @discardableResult
    static func notify(
        _ app: Application, _ users: [String], title: String, category: String = "mention", tenant: String? = nil,
        schedule: EventRequest.Schedule? = nil
    ) async throws -> UUID {
        let event = EventRequest(
            category: category, recipients: users, tenant: tenant, content: .init(title: title, body: "b"),
            data: ["n": .string(title)], schedule: schedule)
        let id = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: event).decode(EventAccepted.self)
            .eventID
        while try await app.belfryServices.fanout.processBatch(on: app.db) {}
        return id
    }

    static func page(_ app: Application, _ token: String, _ query: String = "") async throws -> InboxPage {
        try await app.send(.GET, "/v1/me/notifications\(query)", bearer: token).decode(InboxPage.self)
    }

    static func counts(_ app: Application, _ token: String, _ query: String = "") async throws -> InboxCounts {
        try await app.send(.GET, "/v1/me/notifications/counts\(query)", bearer: token).decode(InboxCounts.self)
    }

    @Test("pages stay correct while new notifications arrive", arguments: TestDatabase.allCases)
    func paginationUnderInserts(database: TestDatabase) async throws {
        let clock = TestClock()
        try await withBelfry(database, clock: clock) { app in
            let ada = try await app.userToken("ada")
            // Seven at the same moment (the id breaks the tie), then five a second apart.
            for index in 0..<7 { try await Self.notify(app, ["ada"], title: "same-\(index)") }
            for index in 0..<5 {
                clock.advance(by: 1)
                try await Self.notify(app, ["ada"], title: "later-\(index)")
            }
            let first = try await Self.page(app, ada, "?limit=5")
            #expect(first.notifications.map(\.title) == ["later-4", "later-3", "later-2", "later-1", "later-0"])
            let cursor = try #require(first.nextCursor)

            // New ones arrive between pages.
            clock.advance(by: 1)
            for index in 0..<3 { try await Self.notify(app, ["ada"], title: "new-\(index)") }

            let second = try await Self.page(app, ada, "?limit=5&cursor=\(cursor)")
            let third = try await Self.page(app, ada, "?limit=5&cursor=\(try #require(second.nextCursor))")
            #expect(third.nextCursor == nil)
            let rest = second.notifications + third.notifications
            #expect(rest.count == 7)
            #expect(Set(rest.map(\.title)) == Set((0..<7).map { "same-\($0)" }))
            let ids = rest.map(\.id.uuidString)
            #expect(ids == ids.sorted(by: >), "ties are ordered by id, newest first")
            #expect(Set((first.notifications + rest).map(\.id)).count == 12, "nothing repeated or skipped")

            let top = try await Self.page(app, ada, "?limit=3")
            #expect(Set(top.notifications.map(\.title)) == ["new-0", "new-1", "new-2"])
            #expect(top.notifications[0].actions.map(\.id) == ["view"], "the category's actions come along")
            #expect(top.notifications[0].data?["n"] != nil)
        }
    }

    @Test("counts follow every state change", arguments: TestDatabase.allCases)
    func counts(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let ada = try await app.userToken("ada")
            try await Self.notify(app, ["ada"], title: "one", tenant: "enwiki")
            try await Self.notify(app, ["ada"], title: "two", tenant: "dewiki")
            try await Self.notify(app, ["ada"], title: "three", tenant: "dewiki")
            #expect(try await Self.counts(app, ada) == InboxCounts(unread: 3, unseen: 3))
            #expect(try await Self.counts(app, ada, "?tenant=dewiki") == InboxCounts(unread: 2, unseen: 2))
            let items = try await Self.page(app, ada).notifications
            let one = try #require(items.first { $0.title == "one" })
            let two = try #require(items.first { $0.title == "two" })

            func mark(_ item: InboxNotification, _ action: String) async throws -> InboxNotification {
                try await app.send(.POST, "/v1/me/notifications/\(item.id)/\(action)", bearer: ada).decode(
                    InboxNotification.self)
            }
            let seen = try await mark(one, "seen")
            #expect(seen.seenAt != nil && seen.readAt == nil)
            #expect(try await Self.counts(app, ada) == InboxCounts(unread: 3, unseen: 2))
            let read = try await mark(two, "read")
            #expect(read.readAt != nil && read.seenAt != nil)
            #expect(try await Self.counts(app, ada) == InboxCounts(unread: 2, unseen: 1))
            #expect(try await mark(two, "read").readAt == read.readAt, "marking again keeps the first time")
            _ = try await mark(two, "unread")
            #expect(try await Self.counts(app, ada) == InboxCounts(unread: 3, unseen: 1))
            _ = try await mark(one, "archive")
            #expect(try await Self.counts(app, ada) == InboxCounts(unread: 2, unseen: 1), "archived ones do not count")
            #expect(try await Self.page(app, ada, "?status=archived").notifications.map(\.title) == ["one"])
            _ = try await mark(one, "unarchive")
            #expect(try await Self.counts(app, ada) == InboxCounts(unread: 3, unseen: 1))

            let seenAll = try await app.send(.POST, "/v1/me/notifications/seen-all", bearer: ada)
            #expect(seenAll.status == .ok)
            #expect(try await Self.counts(app, ada) == InboxCounts(unread: 3, unseen: 0))
            let readDewiki = try await app.send(.POST, "/v1/me/notifications/read-all?tenant=dewiki", bearer: ada)
            #expect(readDewiki.status == .ok)
            #expect(try await Self.counts(app, ada) == InboxCounts(unread: 1, unseen: 0))
            #expect(try await Self.page(app, ada, "?status=unread").notifications.map(\.title) == ["one"])
            #expect(try await Self.page(app, ada, "?status=read").notifications.count == 2)
            _ = try await app.send(.POST, "/v1/me/notifications/read-all", bearer: ada)
            #expect(try await Self.counts(app, ada) == InboxCounts(unread: 0, unseen: 0))
        }
    }

    @Test(
        "the bell's counts and a push's badge read the index of unread notifications, not the user's history",
        arguments: TestDatabase.allCases)
    func countsByIndex(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let store = app.belfryServices.inboxStore
            let queue = try #require(app.deliveryQueue)
            let statements: [SQLQueryString] = [
                "\(store.countsQuery(of: [UUID(), UUID()], tenant: nil, on: app.db).query)",
                "\(store.countsQuery(of: [UUID()], tenant: "dewiki", on: app.db).query)",
                store.countsIfUserExistsQuery(userID: UUID(), epoch: 2, on: app.db),
                queue.claimed([UUID(), UUID()], now: Date()),
            ]
            for statement in statements {
                let plan = try await MetricsTests.plan(statement, on: app.db)
                #expect(plan.contains("notifications_unread"), "\(plan)")
                #expect(!plan.contains("notifications_inbox"), "\(plan)")
                #expect(!plan.contains("SCAN notifications") && !plan.contains("Seq Scan"), "\(plan)")
            }
        }
    }

    @Test("a user reaches only their own inbox", arguments: TestDatabase.allCases)
    func isolation(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let ada = try await app.userToken("ada")
            let bob = try await app.userToken("bob")
            try await Self.notify(app, ["ada"], title: "for ada")
            let item = try #require(try await Self.page(app, ada).notifications.first)
            #expect(try await Self.page(app, bob).notifications.isEmpty)
            for action in ["seen", "read", "unread", "archive", "unarchive"] {
                let response = try await app.send(.POST, "/v1/me/notifications/\(item.id)/\(action)", bearer: bob)
                #expect(response.status == .notFound)
                #expect(response.errorCode == "notification_not_found")
            }
            #expect(try await Self.counts(app, ada) == InboxCounts(unread: 1, unseen: 1), "bob changed nothing")
            #expect(try await app.send(.GET, "/v1/me/notifications", bearer: testAPIKey).status == .forbidden)
        }
    }

    @Test("filters, scheduled notifications and bad queries")
    func filtersAndErrors() async throws {
        let clock = TestClock(Date(timeIntervalSince1970: 1_800_000_000))
        try await withBelfry(.sqlite, clock: clock) { app in
            let ada = try await app.userToken("ada")
            try await Self.notify(app, ["ada"], title: "thanks", category: "edit-thank", tenant: "commons")
            try await Self.notify(app, ["ada"], title: "mention")
            try await Self.notify(app, ["ada"], title: "later", schedule: .init(delaySeconds: 600))
            try await Self.notify(app, ["ada"], title: "opted out", category: "article-linked")
            #expect(try await Self.page(app, ada).notifications.map(\.title).sorted() == ["mention", "thanks"])
            #expect(try await Self.page(app, ada, "?category=edit-thank").notifications.map(\.title) == ["thanks"])
            #expect(try await Self.page(app, ada, "?tenant=commons").notifications.map(\.title) == ["thanks"])
            clock.advance(by: 600)
            while try await app.belfryServices.fanout.processBatch(on: app.db) {}
            #expect(try await Self.page(app, ada).notifications.map(\.title).first == "later", "due now")

            for query in ["?limit=0", "?limit=101", "?limit=ten", "?status=new", "?cursor=nonsense"] {
                let response = try await app.send(.GET, "/v1/me/notifications\(query)", bearer: ada)
                #expect(response.status == .unprocessableEntity, "\(query)")
            }
            #expect(
                try await app.send(.GET, "/v1/me/notifications?tenant=frwiki", bearer: ada).errorCode
                    == "tenant_not_found")
            #expect(try await app.send(.POST, "/v1/me/notifications/not-a-uuid/read", bearer: ada).status == .notFound)
        }
    }

    @Test(
        "an action is recorded, marks the notification read and reaches the webhook signed",
        arguments: TestDatabase.allCases)
    func actions(database: TestDatabase) async throws {
        let receiver = try await WebhookReceiver(answers: "200")
        defer { receiver.stop() }
        try await withBelfry(database, webhook: receiver.webhook) { app in
            let ada = try await app.userToken("ada")
            let bob = try await app.userToken("bob")
            try await Self.notify(app, ["ada"], title: "Reply?", category: "edit-user-talk")
            let item = try #require(try await Self.page(app, ada).notifications.first)
            #expect(item.actions.map(\.id) == ["reply", "mark-read"])

            let unknown = try await app.send(.POST, "/v1/me/notifications/\(item.id)/actions/delete-all", bearer: ada)
            #expect(unknown.status == .notFound)
            #expect(unknown.errorCode == "action_not_found")
            let foreign = try await app.send(.POST, "/v1/me/notifications/\(item.id)/actions/reply", bearer: bob)
            #expect(foreign.errorCode == "notification_not_found")

            let answer = try await app.send(.POST, "/v1/me/notifications/\(item.id)/actions/reply", bearer: ada)
            #expect(answer.status == .ok)
            #expect(answer.body.string.contains(#""forwarded":true"#))
            #expect(try await Self.counts(app, ada) == InboxCounts(unread: 0, unseen: 0))

            try await #require(app.deliveryQueue).runOnce()
            let entries = try receiver.entries()
            #expect(entries.count == 1)
            #expect(entries.first?.valid == true)
            guard case .object(let body) = entries.first?.body else {
                Issue.record("no webhook body")
                return
            }
            #expect(body["type"] == .string("notification.action"))
            #expect(
                body["action"]
                    == .object([
                        "id": .string("reply"), "title": .string("Reply"), "destructive": .bool(false),
                        "opens_app": .bool(true),
                    ]))
            #expect(body["user"] == .object(["id": .string("ada")]))
        }
    }

    @Test(
        "read and archived notifications older than the retention age are purged; unread ones stay",
        arguments: TestDatabase.allCases)
    func retention(database: TestDatabase) async throws {
        let clock = TestClock()
        // A webhook no one answers: each notification gets a delivery and a failed attempt.
        let webhook = ServerConfiguration.Webhook(url: "http://127.0.0.1:9/hook", secret: WebhookReceiver.secret)
        try await withBelfry(database, clock: clock, webhook: webhook) { app in
            let ada = try await app.userToken("ada")
            for title in ["read", "archived", "unread"] {
                try await Self.notify(app, ["ada"], title: title, category: "login-fail")
            }
            try await #require(app.deliveryQueue).runOnce()
            func count(_ sql: String) async throws -> Int {
                try await app.db.sql.raw("SELECT COUNT(*) AS n FROM \(unsafeRaw: sql)").first()!
                    .decode(column: "n", as: Int.self)
            }
            let deliveries = try await count("deliveries")
            let attempts = try await count("delivery_attempts")
            #expect(deliveries >= 3 && attempts >= 3 && deliveries % 3 == 0 && attempts % 3 == 0)
            let items = try await Self.page(app, ada).notifications
            for (title, action) in [("read", "read"), ("archived", "archive")] {
                let item = try #require(items.first { $0.title == title })
                #expect(
                    try await app.send(.POST, "/v1/me/notifications/\(item.id)/\(action)", bearer: ada).status == .ok)
            }
            clock.advance(by: 89 * 86_400)
            #expect(try await app.belfryServices.inboxRetention.purge(on: app.db) == 0, "not old enough yet")
            clock.advance(by: 2 * 86_400)
            #expect(try await app.belfryServices.inboxRetention.purge(on: app.db) == 2)
            // Their deliveries and attempts went with them, on PostgreSQL without a cascade.
            #expect(try await count("deliveries") == deliveries / 3)
            #expect(try await count("delivery_attempts") == attempts / 3)
            #expect(try await count("delivery_attempts WHERE delivery_id NOT IN (SELECT id FROM deliveries)") == 0)
            let later = try await app.userToken("ada")
            #expect(try await Self.page(app, later, "?status=all").notifications.map(\.title) == ["unread"])
            #expect(try await Self.page(app, later, "?status=archived").notifications.isEmpty)
        }
    }

    @Test("a purge racing a result being recorded leaves none of its attempt rows behind (PostgreSQL)")
    func retentionRacingAResult() async throws {
        let clock = TestClock()
        let webhook = ServerConfiguration.Webhook(url: "http://127.0.0.1:9/hook", secret: WebhookReceiver.secret)
        try await withBelfry(.postgres, clock: clock, webhook: webhook) { app in
            let ada = try await app.userToken("ada")
            try await Self.notify(app, ["ada"], title: "read", category: "login-fail")
            let item = try #require(try await Self.page(app, ada).notifications.first)
            #expect(try await app.send(.POST, "/v1/me/notifications/\(item.id)/read", bearer: ada).status == .ok)
            let delivery = try #require(
                try await app.db.sql.raw("SELECT id FROM deliveries WHERE channel = 'webhook'").first()?
                    .decode(column: "id", as: UUID.self))
            clock.advance(by: 91 * 86_400)
            let purged = try await UsersAndAuthTests.racingAResult(app, on: delivery) {
                try await app.belfryServices.inboxRetention.purge(on: app.db)
            }
            #expect(purged == 1)
            #expect(try await UsersAndAuthTests.attempts(app, of: delivery) == 0)
        }
    }
}
