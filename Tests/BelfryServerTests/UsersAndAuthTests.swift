import BelfryCore
import BelfryTestSupport
import Fluent
import Foundation
import NIOConcurrencyHelpers
import SQLKit
import Testing
import Vapor
import VaporTesting

@testable import BelfryServer

@Suite("Users, tokens and authentication")
struct UsersAndAuthTests {
    @Test("PUT creates then updates a user, merging fields and replacing tenants", arguments: TestDatabase.allCases)
    func upsert(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let created = try await app.putUser(
                "ada@example.org",
                UserUpsert(email: "ada@example.org", timeZone: "Europe/Berlin", tenants: ["dewiki", "enwiki"]))
            #expect(created.status == .created)
            let first = try created.decode(UserRecord.self)
            #expect(first.id == "ada@example.org")
            #expect(first.tenants == ["dewiki", "enwiki"])

            let updated = try await app.putUser("ada@example.org", UserUpsert(locale: "de-CH", tenants: ["commons"]))
            #expect(updated.status == .ok)
            let record = try await app.send(.GET, "/v1/users/ada@example.org", bearer: testAPIKey).decode(
                UserRecord.self)
            #expect(record.email == "ada@example.org")
            #expect(record.timeZone == "Europe/Berlin")
            #expect(record.locale == "de-CH")
            #expect(record.tenants == ["commons"])
            #expect(record.createdAt == first.createdAt)
        }
    }

    @Test("concurrent first writes of one user create it once", arguments: TestDatabase.allCases)
    func concurrentUpserts(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let statuses = try await withThrowingTaskGroup(of: HTTPStatus.self) { group in
                for index in 0..<8 {
                    group.addTask {
                        try await app.putUser(
                            "grace",
                            UserUpsert(locale: "en", tenants: index.isMultiple(of: 2) ? ["enwiki"] : ["dewiki"])
                        )
                        .status
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(statuses.filter { $0 == .created }.count == 1, "\(statuses)")
            #expect(statuses.filter { $0 == .ok }.count == 7, "\(statuses)")
            let record = try await app.send(.GET, "/v1/users/grace", bearer: testAPIKey).decode(UserRecord.self)
            #expect(record.tenants.count == 1)
        }
    }

    @Test("bad user fields are refused, each named")
    func validation() async throws {
        try await withBelfry(.sqlite) { app in
            let response = try await app.send(
                .PUT, "/v1/users/ada", bearer: testAPIKey,
                rawBody:
                    #"{"email": "not-an-address", "time_zone": "Mars/Olympus", "locale": "english!", "tenants": ["enwiki", "frwiki"]}"#
            )
            #expect(response.status == .unprocessableEntity)
            let message = try #require(response.errorMessage)
            for field in ["\"email\"", "\"time_zone\"", "\"locale\"", "\"tenants[1]\""] {
                #expect(message.contains(field), "\(message)")
            }
            let badID = try await app.send(.PUT, "/v1/users/a%20b", bearer: testAPIKey, json: UserUpsert())
            #expect(badID.status == .unprocessableEntity)
            let wrongType = try await app.send(
                .PUT, "/v1/users/ada", bearer: testAPIKey, rawBody: #"{"tenants": "enwiki"}"#)
            #expect(wrongType.status == .unprocessableEntity)
            #expect(wrongType.errorMessage == #"field "tenants" must be a list"#)
            #expect(try await app.send(.GET, "/v1/users/ada", bearer: testAPIKey).errorCode == "user_not_found")
            let typo = try await app.send(
                .PUT, "/v1/users/ada", bearer: testAPIKey, rawBody: #"{"emial": "ada@example.org"}"#)
            #expect(typo.status == .unprocessableEntity)
            #expect(typo.errorMessage?.hasPrefix(#"unknown field "emial"; this request takes email, locale"#) == true)
        }
    }

    @Test(
        "DELETE erases everything stored about the user: devices, inbox, deliveries, answers, topics, batches, pending events",
        arguments: TestDatabase.allCases)
    func eraseEverything(database: TestDatabase) async throws {
        let receiver = try await WebhookReceiver(answers: "200")
        defer { receiver.stop() }
        let clock = TestClock()
        try await withBelfry(database, clock: clock, webhook: receiver.webhook) { app in
            let ada = try await app.userToken("ada", tenants: ["enwiki"])
            let bob = try await app.userToken("bob")
            for token in [ada, bob] {
                for category in ["mention", "new-activity-digest"] {
                    #expect(
                        try await app.send(
                            .PATCH, "/v1/me/preferences/categories/\(category)", bearer: token,
                            json: ["preference": "opt_in"]
                        ).status == .ok)
                }
                #expect(
                    try await app.send(
                        .POST, "/v1/me/devices", bearer: token,
                        json: DevicesAPITests.registration(
                            token == ada ? DevicesAPITests.token : String(repeating: "cd", count: 32))
                    ).status.code < 300)
            }
            // An inbox item answered with an action, push, email and webhook deliveries with attempts.
            _ = try await InboxAPITests.notify(app, ["ada", "bob"], title: "Talk", category: "edit-user-talk")
            _ = try await DeliveryQueueTests.trigger(app, to: ["ada", "bob"])
            _ = try await app.deliveryQueue?.runOnce()
            let item = try #require(try await InboxAPITests.page(app, ada).notifications.first { $0.title == "Talk" })
            #expect(
                try await app.send(.POST, "/v1/me/notifications/\(item.id)/actions/mark-read", bearer: ada).status
                    .code < 300)
            // An event not fanned out yet names ada too.
            let later = EventRequest(
                category: "mention", recipients: ["ada", "bob"], content: .init(title: "Later", body: "b"),
                schedule: .init(delaySeconds: 3600))
            let pending = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: later)
                .decode(EventAccepted.self).eventID

            // Both have an open digest (the demo's daily one), with an item.
            _ = try await app.send(
                .POST, "/v1/events", bearer: testAPIKey,
                json: EventRequest(
                    category: "new-activity-digest", recipients: ["ada", "bob"],
                    content: .init(title: "Bell", body: "b")))
            while try await app.belfryServices.fanout.processBatch(on: app.db) {}

            // Both follow a topic.
            #expect(
                try await app.send(
                    .PUT, "/v1/topics/page:Bell_tower/subscribers", bearer: testAPIKey,
                    json: TopicSubscribers(users: ["ada", "bob"])
                ).status == .ok)

            let adaID = try await WebPagesTests.userID(app, "ada")
            let bobID = try await WebPagesTests.userID(app, "bob")
            func rows(_ table: String, _ column: String = "user_id", of id: UUID) async throws -> Int {
                try await app.db.sql.select().column(SQLFunction("COUNT", args: SQLLiteral.all), as: "n").from(table)
                    .where(SQLColumn(column), .equal, SQLBind(id)).first()?.decode(column: "n", as: Int.self) ?? -1
            }
            func linked(_ table: String, via column: String, to parent: String, of id: UUID) async throws -> Int {
                try await app.db.sql.raw(
                    "SELECT COUNT(*) AS n FROM \(unsafeRaw: table) WHERE \(unsafeRaw: column) IN (SELECT id FROM \(unsafeRaw: parent) WHERE user_id = \(bind: id))"
                ).first()?.decode(column: "n", as: Int.self) ?? -1
            }
            func stored(_ id: UUID) async throws -> [String: Int] {
                [
                    "preference_sets": try await rows("preference_sets", of: id),
                    "user_tenants": try await rows("user_tenants", of: id),
                    "devices": try await rows("devices", of: id),
                    "notifications": try await rows("notifications", of: id),
                    "deliveries": try await rows("deliveries", of: id),
                    "topic_subscriptions": try await rows("topic_subscriptions", of: id),
                    "batches": try await rows("batches", of: id),
                    "batch_items": try await linked("batch_items", via: "batch_id", to: "batches", of: id),
                    "delivery_attempts": try await linked(
                        "delivery_attempts", via: "delivery_id", to: "deliveries", of: id),
                    "notification_actions": try await linked(
                        "notification_actions", via: "notification_id", to: "notifications", of: id),
                ]
            }
            let before = try await stored(adaID)
            #expect(before.values.allSatisfy { $0 > 0 }, "the test stores something in each table: \(before)")
            let bobBefore = try await stored(bobID)

            #expect(try await app.send(.DELETE, "/v1/users/ada", bearer: testAPIKey).status == .noContent)
            let after = try await stored(adaID)
            #expect(after.values.allSatisfy { $0 == 0 }, "\(after)")
            let recipients = try await app.db.sql.select().column("position").from("event_recipients")
                .where("external_id", .equal, "ada").all()
            #expect(recipients.isEmpty)
            #expect(try await stored(bobID) == bobBefore, "bob keeps everything")

            // The pending event reaches bob alone, and does not bring ada back.
            clock.advance(by: 3601)
            while try await app.belfryServices.fanout.processBatch(on: app.db) {}
            let status = try await app.send(.GET, "/v1/events/\(pending)", bearer: testAPIKey).decode(EventStatus.self)
            #expect(status.state == .done)
            #expect(status.notifications == 1)
            #expect(try await app.send(.GET, "/v1/users/ada", bearer: testAPIKey).status == .notFound)
        }
    }

    @Test("DELETE erases the user, their preferences and the use of their tokens", arguments: TestDatabase.allCases)
    func erase(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let token = try await app.userToken("ada")
            let changed = try await app.send(
                .PATCH, "/v1/me/preferences/categories/mention", bearer: token, json: ["preference": "opt_out"])
            #expect(changed.status == .ok)
            #expect(try await app.send(.DELETE, "/v1/users/ada", bearer: testAPIKey).status == .noContent)
            #expect(try await app.send(.GET, "/v1/users/ada", bearer: testAPIKey).status == .notFound)
            #expect(try await app.send(.DELETE, "/v1/users/ada", bearer: testAPIKey).status == .notFound)
            let stale = try await app.send(.GET, "/v1/me/preferences", bearer: token)
            #expect(stale.status == .unauthorized)
            #expect(stale.errorCode == "invalid_token")

            // The same id again is a new user: the old token stays dead and nothing was kept.
            let fresh = try await app.userToken("ada")
            #expect(try await app.send(.GET, "/v1/me/preferences", bearer: token).status == .unauthorized)
            let data = try await app.send(.GET, "/v1/me/preferences", bearer: fresh).decode(PreferenceData.self)
            let mention = data.sections?.flatMap { $0.subcategories ?? [] }.first { $0.category == "mention" }
            #expect(mention?.preference == .optIn)
        }
    }

    @Test("an erasure racing a result being recorded leaves none of its attempt rows behind (PostgreSQL)")
    func erasureRacingAResult() async throws {
        try await withBelfry(.postgres) { app in
            _ = try await DeliveryQueueTests.trigger(app, to: ["ada"])
            let delivery = try #require(
                try await app.db.sql.raw("SELECT id FROM deliveries LIMIT 1").first()?.decode(
                    column: "id", as: UUID.self))
            let status = try await Self.racingAResult(app, on: delivery) {
                try await app.send(.DELETE, "/v1/users/ada", bearer: testAPIKey).status
            }
            #expect(status == .noContent)
            #expect(try await Self.attempts(app, of: delivery) == 0, "the attempt committed meanwhile went too")
        }
    }

    @Test("an erasure racing a fan-out's write leaves none of its notifications; a later write finds the user gone")
    func erasureRacingAFanout() async throws {
        try await withBelfry(.postgres) { app in
            #expect(try await app.putUser("ada").status == .created)
            let ada = try #require(try await UserModel.find(externalID: "ada", on: app.db).id)
            let storage = BelfryDatabase(location: app.belfry.settings.database)
            // As fan-out writes: the users held, then their notifications.
            let status = try await Self.racing(
                app,
                writing: { tx in
                    try await NotificationRows.holdUsers([ada], storage: storage, on: tx)
                    try await tx.sql.raw(
                        """
                        INSERT INTO notifications (id, event_id, user_id, category, tenant, title, body, in_inbox, \
                        created_at, available_at) VALUES (\(bind: UUID()), \(bind: UUID()), \(bind: ada), 'mention', \
                        'main', 't', 'b', true, \(bind: Date()), \(bind: Date()))
                        """
                    ).run()
                },
                { try await app.send(.DELETE, "/v1/users/ada", bearer: testAPIKey).status })
            #expect(status == .noContent)
            let left = try await app.db.sql.raw("SELECT COUNT(*) AS n FROM notifications WHERE user_id = \(bind: ada)")
                .first()?.decode(column: "n", as: Int.self)
            #expect(left == 0, "the notification committed meanwhile went too")
            await #expect(throws: NotificationRows.UsersGone.self) {
                try await app.db.transaction { tx in
                    try await NotificationRows.holdUsers([ada], storage: storage, on: tx)
                }
            }
        }
    }

    /// Runs `deleting` while a result is being recorded for `delivery`, as the queue records one:
    /// the delivery updated and its attempt logged in a transaction that commits half a second
    /// after `deleting` began (which waits for it, if it holds the delivery first).
    static func racingAResult<T: Sendable>(
        _ app: Application, on delivery: UUID, _ deleting: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        try await racing(
            app,
            writing: { tx in
                _ = try await tx.sql.raw(
                    "UPDATE deliveries SET updated_at = updated_at WHERE id = \(bind: delivery) RETURNING id"
                ).all()
                try await tx.sql.raw(
                    """
                    INSERT INTO delivery_attempts (id, delivery_id, attempt, started_at, finished_at, outcome)
                    VALUES (\(bind: UUID()), \(bind: delivery), 1, \(bind: Date()), \(bind: Date()), 'sent')
                    """
                ).run()
            }, deleting)
    }

    /// Runs `deleting` while a transaction that did `writing` is open; it commits half a second
    /// after `deleting` began (which waits for it, if it needs rows the transaction holds).
    static func racing<T: Sendable>(
        _ app: Application, writing: @escaping @Sendable (any Database) async throws -> Void,
        _ deleting: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let state = NIOLockedValueBox<(holding: Bool, release: Bool)>((false, false))
        let writer = Task {
            try await app.db.transaction { tx in
                try await writing(tx)
                state.withLockedValue { $0.holding = true }
                while !state.withLockedValue({ $0.release }) { try await Task.sleep(for: .milliseconds(20)) }
            }
        }
        while !state.withLockedValue({ $0.holding }) { try await Task.sleep(for: .milliseconds(20)) }
        let deletion = Task { try await deleting() }
        try await Task.sleep(for: .milliseconds(500))
        state.withLockedValue { $0.release = true }
        try await writer.value
        return try await deletion.value
    }

    /// Attempt rows of `delivery`.
    static func attempts(_ app: Application, of delivery: UUID) async throws -> Int? {
        try await app.db.sql.raw("SELECT COUNT(*) AS n FROM delivery_attempts WHERE delivery_id = \(bind: delivery)")
            .first()?.decode(column: "n", as: Int.self)
    }

    @Test("tokens carry the configured lifetime and expire on the server's clock")
    func tokenLifetime() async throws {
        let clock = TestClock()
        try await withBelfry(.sqlite, clock: clock) { app in
            #expect(try await app.putUser("ada").status == .created)
            let grant = try await app.send(.POST, "/v1/users/ada/tokens", bearer: testAPIKey).decode(TokenGrant.self)
            #expect(grant.expiresAt == clock.now.addingTimeInterval(3600))
            let short = try await app.send(
                .POST, "/v1/users/ada/tokens", bearer: testAPIKey, json: ["ttl_seconds": 120]
            )
            .decode(TokenGrant.self)
            #expect(short.expiresAt == clock.now.addingTimeInterval(120))
            let tooShort = try await app.send(
                .POST, "/v1/users/ada/tokens", bearer: testAPIKey, json: ["ttl_seconds": 10])
            #expect(tooShort.status == .unprocessableEntity)
            #expect(try await app.send(.POST, "/v1/users/bob/tokens", bearer: testAPIKey).errorCode == "user_not_found")

            clock.advance(by: 119)
            #expect(try await app.send(.GET, "/v1/me/preferences", bearer: short.token).status == .ok)
            clock.advance(by: 2)
            let expired = try await app.send(.GET, "/v1/me/preferences", bearer: short.token)
            #expect(expired.status == .unauthorized)
            #expect(expired.errorCode == "token_expired")
            #expect(try await app.send(.GET, "/v1/me/preferences", bearer: grant.token).status == .ok)
        }
    }

    @Test("401 for missing or bad credentials, 403 for the wrong kind or another user's token")
    func authorization() async throws {
        try await withBelfry(.sqlite) { app in
            let ada = try await app.userToken("ada")
            _ = try await app.userToken("bob")
            let cases: [(HTTPMethod, String, String?, HTTPStatus, String)] = [
                (.GET, "/v1/me/preferences", nil, .unauthorized, "unauthorized"),
                (.GET, "/v1/me/preferences", "not-a-token", .unauthorized, "invalid_token"),
                (.GET, "/v1/me/preferences", ada + "x", .unauthorized, "invalid_token"),
                (.GET, "/v1/users/ada", "test-api-key-0123456789abcdeX", .unauthorized, "invalid_token"),
                (.GET, "/v1/me/preferences", testAPIKey, .forbidden, "forbidden"),
                (.GET, "/v1/users/ada", ada, .forbidden, "forbidden"),
                (.POST, "/v1/users/ada/tokens", ada, .forbidden, "forbidden"),
                (.GET, "/v1/users/bob/preferences", ada, .forbidden, "forbidden"),
                (.GET, "/v1/config", nil, .unauthorized, "unauthorized"),
                (.GET, "/v1/config", ada + "x", .unauthorized, "invalid_token"),
            ]
            for (method, path, bearer, status, code) in cases {
                let response = try await app.send(method, path, bearer: bearer)
                #expect(response.status == status, "\(method) \(path)")
                #expect(response.errorCode == code, "\(method) \(path): \(response.body.string)")
            }
            #expect(try await app.send(.GET, "/v1/users/ada/preferences", bearer: ada).status == .ok)
            #expect(try await app.send(.GET, "/v1/users/ada/preferences", bearer: testAPIKey).status == .ok)
            let unauthorized = try await app.send(.GET, "/v1/me/preferences")
            #expect(unauthorized.headers.first(name: .wwwAuthenticate) == "Bearer")
        }
    }

    @Test("a token signed by another Belfry is refused")
    func foreignToken() async throws {
        let foreign = try await withBelfry(.sqlite) { app in try await app.userToken("ada") }
        try await withBelfry(.sqlite) { app in
            _ = try await app.userToken("ada")
            #expect(try await app.send(.GET, "/v1/me/preferences", bearer: foreign).errorCode == "invalid_token")
        }
    }

    @Test(
        "without configured keys, a development key is created once, kept, and works", arguments: TestDatabase.allCases)
    func developmentKey(database: TestDatabase) async throws {
        try await withTestStorage(database) { location in
            let key = try await withBelfryApp(location: location, apiKeys: []) { app, report in
                let key = try #require(report.createdDevelopmentKey)
                #expect(report.usesDevelopmentKey)
                #expect(key.hasPrefix("belfry_") && key.count > 40)
                #expect(try await app.putUser("ada").status == .unauthorized, "the test key is not configured")
                #expect(try await app.send(.PUT, "/v1/users/ada", bearer: key, json: UserUpsert()).status == .created)
                return key
            }
            try await withBelfryApp(location: location, apiKeys: []) { app, report in
                let response = try await app.send(.GET, "/v1/users/ada", bearer: key)
                #expect(report.createdDevelopmentKey == nil, "shown only once")
                #expect(response.status == .ok)
            }
            try await withBelfryApp(location: location, apiKeys: [testAPIKey]) { app, report in
                let response = try await app.send(.GET, "/v1/users/ada", bearer: key)
                #expect(report.usesDevelopmentKey == false)
                #expect(response.status == .unauthorized, "configured keys replace it")
            }
        }
    }
}
