import BelfryCore
import BelfryJSON
import BelfryTestSupport
import Foundation
import SQLKit
import Testing
import Vapor
import VaporTesting

@testable import BelfryServer

@Suite("Events: trigger, fan-out by the rule, status")
struct EventsAPITests {
    static func event(
        _ category: String = "mention", to recipients: [String], tenant: String? = nil, key: String? = nil,
        schedule: EventRequest.Schedule? = nil
    ) -> EventRequest {
        EventRequest(
            category: category, recipients: recipients, tenant: tenant,
            content: EventRequest.Content(
                title: "Ada mentioned you", body: "On Talk:Belfry", url: "https://example.org/t"),
            data: ["revision": .number(42)], idempotencyKey: key, schedule: schedule)
    }

    /// Runs fan-out batches until none is due.
    static func fanOut(_ app: Application) async throws {
        while try await app.belfryServices.fanout.processBatch(on: app.db) {}
    }

    static func status(_ app: Application, _ id: UUID) async throws -> EventStatus {
        try await app.send(.GET, "/v1/events/\(id)", bearer: testAPIKey).decode(EventStatus.self)
    }

    @Test("bad events are refused with a clear error and store nothing")
    func validation() async throws {
        try await withBelfry(.sqlite) { app in
            var tooMany = Self.event(to: (0...10_000).map { "user\($0)" })
            tooMany.content.title = "x"
            var longBody = Self.event(to: ["ada"])
            longBody.content.body = String(repeating: "b", count: 64 * 1024 + 1)
            var emptyTitle = Self.event(to: ["ada"])
            emptyTitle.content.title = "  "
            var badURL = Self.event(to: ["ada"])
            badURL.content.url = "javascript:alert(1)"
            let cases: [(EventRequest, HTTPStatus, String, String)] = [
                (Self.event("nope", to: ["ada"]), .notFound, "category_not_found", #"no category "nope""#),
                (Self.event(to: ["ada"], tenant: "frwiki"), .notFound, "tenant_not_found", #"no tenant "frwiki""#),
                (Self.event(to: []), .unprocessableEntity, "invalid_request", "must list 1 to 10000 user ids, got 0"),
                (tooMany, .unprocessableEntity, "invalid_request", "got 10001"),
                (Self.event(to: ["a b"]), .unprocessableEntity, "invalid_request", #""recipients[0]""#),
                (emptyTitle, .unprocessableEntity, "invalid_request", "content.title"),
                (longBody, .unprocessableEntity, "invalid_request", "content.body\" is 65537 bytes"),
                (badURL, .unprocessableEntity, "invalid_request", "content.url"),
                (
                    Self.event(to: ["ada"], schedule: .init(sendAt: Date(), delaySeconds: 5)), .unprocessableEntity,
                    "invalid_request", "takes one of"
                ),
            ]
            for (event, status, code, fragment) in cases {
                let response = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: event)
                #expect(response.status == status, "\(fragment)")
                #expect(response.errorCode == code, "\(response.body.string)")
                #expect(response.errorMessage?.contains(fragment) == true, "\(response.body.string)")
            }
            let typo = try await app.send(
                .POST, "/v1/events", bearer: testAPIKey,
                rawBody:
                    #"{"category": "mention", "recipients": ["ada"], "content": {"title": "t", "body": "b", "link": "x"}}"#
            )
            #expect(typo.errorMessage?.contains(#""content.link""#) == true)
            let user = try await app.userToken("ada")
            #expect(
                try await app.send(.POST, "/v1/events", bearer: user, json: Self.event(to: ["ada"])).status
                    == .forbidden)
            let count = try await app.db.sql.select().column(SQLFunction("COUNT", args: SQLLiteral.all), as: "n")
                .from("events").first()?.decode(column: "n", as: Int.self)
            #expect(count == 0)
        }
    }

    @Test(
        "fan-out follows each recipient's preferences; unknown recipients are created", arguments: TestDatabase.allCases
    )
    func fanOutByRule(database: TestDatabase) async throws {
        let clock = TestClock()
        try await withBelfry(database, clock: clock) { app in
            let ada = try await app.userToken("ada")
            let bob = try await app.userToken("bob")
            _ = try await app.putUser("bob", UserUpsert(email: "bob@example.org"))
            #expect(
                try await app.send(
                    .PATCH, "/v1/me/preferences/categories/mention?tenant=dewiki", bearer: ada,
                    json: ["preference": "opt_out"]
                ).status == .ok)
            #expect(
                try await app.send(
                    .PATCH, "/v1/me/preferences/categories/mention/channels/email?scope=defaults", bearer: bob,
                    json: ["preference": "opt_in"]
                ).status == .ok)

            let accepted = try await app.send(
                .POST, "/v1/events", bearer: testAPIKey,
                json: Self.event(to: ["ada", "bob", "carol", "carol"], tenant: "dewiki"))
            #expect(accepted.status == .accepted)
            let id = try accepted.decode(EventAccepted.self).eventID
            #expect(accepted.headers.first(name: .location) == "/v1/events/\(id)")
            let pending = try await Self.status(app, id)
            #expect(pending.state == .pending)
            #expect(pending.recipients == 3, "duplicates are one recipient")

            try await Self.fanOut(app)
            let done = try await Self.status(app, id)
            #expect(done.state == .done)
            #expect(done.processed == 3)
            #expect(done.notifications == 2, "ada opted out of mentions on dewiki")
            #expect(done.deliveries == ["inbox": ["sent": 2], "email": ["queued": 1]])
            #expect(
                done.skipped == [
                    "inbox": ["category_opted_out": 1],
                    "ios_push": ["category_opted_out": 1, "no_authorized_device": 2],
                    "android_push": ["category_opted_out": 1, "no_authorized_device": 2],
                    "web_push": ["category_opted_out": 1, "no_authorized_device": 2],
                    "email": ["category_opted_out": 1, "channel_opted_out": 1],
                ])
            let carol = try await app.send(.GET, "/v1/users/carol", bearer: testAPIKey)
            #expect(carol.status == .ok, "unknown recipients are created")
        }
    }

    /// On SQLite small events are read and planned before the write; two fan-out loops planning
    /// the same events at once (as a second process on the file could) write them once: the
    /// second finds them taken and goes on with what is left.
    @Test("events planned twice ahead of the writer are written once")
    func plannedTwice() async throws {
        try await withBelfry(.sqlite) { app in
            @Sendable func post() async throws -> [UUID] {
                var ids: [UUID] = []
                for index in 0..<20 {
                    ids.append(
                        try await app.send(
                            .POST, "/v1/events", bearer: testAPIKey, json: Self.event(to: ["user\(index)", "ada"])
                        )
                        .decode(EventAccepted.self).eventID)
                }
                return ids
            }
            let ids = try await post()
            // Users known, so that the events can be planned ahead (a new user is the writer's).
            try await Self.fanOut(app)
            let again = try await post()
            let fanout = app.belfryServices.fanout
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<4 {
                    group.addTask { while try await fanout.processBatch(on: app.db) {} }
                }
                try await group.waitForAll()
            }
            for id in ids + again {
                let status = try await Self.status(app, id)
                #expect(status.state == .done)
                #expect(status.notifications == 2, "\(id): \(status.notifications)")
            }
            let ada = try await app.userToken("ada")
            let counts = try await app.send(.GET, "/v1/me/notifications/counts", bearer: ada)
            #expect(counts.body.string.contains("\"unread\":40"), "\(counts.body.string)")
        }
    }

    /// A small event's skips are kept in its row; a skip added later (at send time, as the
    /// queue adds a fallback found unnecessary) goes to `event_skips`: the status adds the two.
    @Test("skips in an event's row and those added later are added up", arguments: TestDatabase.allCases)
    func skipsAddedUp(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let id = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: Self.event(to: ["ada", "bob"]))
                .decode(EventAccepted.self).eventID
            try await Self.fanOut(app)
            let row = try await app.db.sql.select().column("skips").from("events").where("id", .equal, id).first()
            let stored = try #require(try row?.decode(column: "skips", as: String?.self))
            #expect(try EventSkips.counts(inColumn: stored)["ios_push"] == ["no_authorized_device": 2])
            let skipped = try #require(try await Self.status(app, id).skipped["ios_push"])
            #expect(skipped == ["no_authorized_device": 2])
            try await EventSkips.add(
                [id: ["ios_push": [.noAuthorizedDevice: 1], "webhook": [.readBeforeFallback: 1]]],
                storage: app.belfry.database, on: app.db)
            let added = try await Self.status(app, id).skipped
            #expect(added["ios_push"] == ["no_authorized_device": 3])
            #expect(added["webhook"] == ["read_before_fallback": 1])
        }
    }

    @Test("a channel set to required reaches only the categories that require it", arguments: TestDatabase.allCases)
    func requiredChannel(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let ada = try await app.userToken("ada")
            _ = try await app.putUser("ada", UserUpsert(email: "ada@example.org"))
            let change = PreferenceChangesRequest(
                tenants: ["enwiki"],
                changes: [.overallChannel("inbox", .required), .overallChannel("email", .required)])
            #expect(try await app.send(.POST, "/v1/me/preferences/changes", bearer: ada, json: change).status == .ok)
            let mention = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: Self.event(to: ["ada"]))
                .decode(EventAccepted.self).eventID
            let loginFail = try await app.send(
                .POST, "/v1/events", bearer: testAPIKey, json: Self.event("login-fail", to: ["ada"])
            )
            .decode(EventAccepted.self).eventID
            try await Self.fanOut(app)
            let first = try await Self.status(app, mention)
            #expect(first.notifications == 0)
            #expect(first.skipped["inbox"] == ["channel_restricted": 1])
            let second = try await Self.status(app, loginFail)
            #expect(second.notifications == 1)
            #expect(second.deliveries["inbox"] == ["sent": 1])
            #expect(second.deliveries["email"] == ["queued": 1])
            #expect(second.deliveries["webhook"] == ["queued": 1])
        }
    }

    @Test("the accepted answer is the bytes the JSON encoder writes, and its Location names the event")
    func acceptedAnswer() async throws {
        try await withBelfry(.sqlite) { app in
            let response = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: Self.event(to: ["ada"]))
            #expect(response.status == .accepted)
            let accepted = try response.decode(EventAccepted.self)
            let encoded = try Response.jsonEncoder.encode(accepted)
            #expect(Array(response.body.readableBytesView) == Array(encoded))
            #expect(response.headers.contentType == .json)
            #expect(response.headers.first(name: "Location") == "/v1/events/\(accepted.eventID)")
            let status = try await app.send(
                .GET, response.headers.first(name: "Location") ?? "", bearer: testAPIKey)
            #expect(status.status == .ok)
            // Any id, not only this one: upper-case hex, as the encoder writes a UUID.
            let id = UUID()
            #expect(
                Array(EventsController.acceptedBody(id.upperCaseText).utf8)
                    == Array(try Response.jsonEncoder.encode(EventAccepted(eventID: id))))
        }
    }

    @Test("the same idempotency key within 24 hours answers with the first event", arguments: TestDatabase.allCases)
    func idempotency(database: TestDatabase) async throws {
        let clock = TestClock()
        try await withBelfry(database, clock: clock) { app in
            let first = try await app.send(
                .POST, "/v1/events", bearer: testAPIKey, json: Self.event(to: ["ada"], key: "rev-42"))
            let again = try await app.send(
                .POST, "/v1/events", bearer: testAPIKey, json: Self.event(to: ["ada"]),
                headers: ["Idempotency-Key": "rev-42"])
            let different = try await app.send(
                .POST, "/v1/events", bearer: testAPIKey, json: Self.event(to: ["ada", "bob"], key: "rev-42"))
            #expect(different.status == .unprocessableEntity)
            #expect(different.errorCode == "idempotency_key_reused")
            #expect(first.status == .accepted && again.status == .accepted)
            #expect(try again.decode(EventAccepted.self) == first.decode(EventAccepted.self))
            #expect(again.headers.first(name: "Idempotent-Replayed") == "true")
            try await Self.fanOut(app)
            #expect(try await Self.status(app, try first.decode(EventAccepted.self).eventID).notifications == 1)

            clock.advance(by: 24 * 3600 + 1)
            let later = try await app.send(
                .POST, "/v1/events", bearer: testAPIKey, json: Self.event(to: ["ada"], key: "rev-42"))
            #expect(try later.decode(EventAccepted.self) != first.decode(EventAccepted.self))
            #expect(later.headers.first(name: "Idempotent-Replayed") == nil)
        }
    }

    @Test("a delayed event waits for its time")
    func delayed() async throws {
        let clock = TestClock()
        try await withBelfry(.sqlite, clock: clock) { app in
            let id = try await app.send(
                .POST, "/v1/events", bearer: testAPIKey,
                json: Self.event(to: ["ada"], schedule: .init(delaySeconds: 60))
            ).decode(EventAccepted.self).eventID
            try await Self.fanOut(app)
            #expect(try await Self.status(app, id).state == .pending)
            clock.advance(by: 60)
            try await Self.fanOut(app)
            #expect(try await Self.status(app, id).state == .done)
        }
    }

    @Test(
        "a large event fans out in batches that grow to a whole page, to exactly one notification per recipient",
        arguments: TestDatabase.allCases)
    func batches(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            // Two whole pages and part of a third: 500 recipients a page on SQLite, 2 000 on
            // PostgreSQL, the first an eighth of that and each next one as many as are done.
            let page = database == .postgres ? Fanout.postgresPageSize : Fanout.batchSize
            let count = 2 * page + 234
            let first = page / 8
            let pages =
                [first, first, 2 * first, 4 * first, min(page, 8 * first)]
                + [count - (8 * first + min(page, 8 * first))]
            let recipients = (0..<count).map { "reader-\($0)" }
            let id = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: Self.event(to: recipients))
                .decode(EventAccepted.self).eventID
            var written: [Int] = []
            while try await app.belfryServices.fanout.processBatch(on: app.db) {
                written.append(try await Self.status(app, id).notifications - written.reduce(0, +))
            }
            #expect(written == pages)
            let status = try await Self.status(app, id)
            #expect(status.notifications == count)
            #expect(status.deliveries == ["inbox": ["sent": count]])
            let distinct = try await app.db.sql.select()
                .column(SQLFunction("COUNT", args: SQLDistinct("user_id")), as: "n").from("notifications")
                .first()?.decode(column: "n", as: Int.self)
            #expect(distinct == count)
        }
    }

    @Test("an event that fits in one page takes it at once; a bigger one's pages grow from the first")
    func pageLimits() {
        #expect(Fanout.pageLimit(processed: 0, total: 2000, first: 250, whole: 2000) == 2000)
        #expect(Fanout.pageLimit(processed: 0, total: 2001, first: 250, whole: 2000) == 250)
        #expect(Fanout.pageLimit(processed: 250, total: 20_000, first: 250, whole: 2000) == 250)
        #expect(Fanout.pageLimit(processed: 1000, total: 20_000, first: 250, whole: 2000) == 1000)
        #expect(Fanout.pageLimit(processed: 6000, total: 20_000, first: 250, whole: 2000) == 2000)
    }

    @Test("send_at takes an ISO 8601 time and refuses anything else")
    func sendAt() async throws {
        let clock = TestClock()
        try await withBelfry(.sqlite, clock: clock) { app in
            let at = ISO8601DateFormatter().string(from: clock.now.addingTimeInterval(90))
            let body =
                #"{"category": "mention", "recipients": ["ada"], "content": {"title": "t", "body": "b"}, "schedule": {"send_at": "\#(at)"}}"#
            let accepted = try await app.send(.POST, "/v1/events", bearer: testAPIKey, rawBody: body)
            #expect(accepted.status == .accepted, "\(accepted.body.string)")
            let id = try accepted.decode(EventAccepted.self).eventID
            #expect(try await Self.status(app, id).notBefore == clock.now.addingTimeInterval(90))
            let fractional = body.replacingOccurrences(of: at, with: "2027-01-15T08:00:00.250Z")
            #expect(
                try await app.send(.POST, "/v1/events", bearer: testAPIKey, rawBody: fractional).status == .accepted)
            let bad = try await app.send(
                .POST, "/v1/events", bearer: testAPIKey,
                rawBody: body.replacingOccurrences(of: at, with: "next tuesday"))
            #expect(bad.status == .unprocessableEntity)
            #expect(bad.errorMessage?.contains(#"field "schedule.send_at": expected an ISO 8601 date"#) == true)
        }
    }

    @Test(
        "a calendar schedule is due at the next matching local time of each recipient", arguments: TestDatabase.allCases
    )
    func calendarSchedule(database: TestDatabase) async throws {
        // 2027-01-15 08:00:00 UTC.
        let clock = TestClock(Date(timeIntervalSince1970: 1_800_000_000))
        try await withBelfry(database, clock: clock) { app in
            #expect(try await app.putUser("ada", UserUpsert(timeZone: "Europe/Berlin")).status == .created)
            #expect(try await app.putUser("kenji", UserUpsert(timeZone: "Asia/Tokyo")).status == .created)
            let schedule = EventRequest.Schedule(calendar: CalendarRule(hour: 10))
            let id = try await app.send(
                .POST, "/v1/events", bearer: testAPIKey,
                json: Self.event(to: ["ada", "kenji", "carol"], schedule: schedule)
            ).decode(EventAccepted.self).eventID
            try await Self.fanOut(app)
            let worker = try #require(app.deliveryQueue)
            var available: [String: TimeInterval] = [:]
            for row in try await app.db.sql.select()
                .column(SQLColumn("external_id", table: "users")).column(
                    SQLColumn("available_at", table: "notifications")
                )
                .from("notifications")
                .join(
                    "users", on: SQLColumn("id", table: "users"), .equal, SQLColumn("user_id", table: "notifications")
                )
                .all()
            {
                available[try row.decode(column: "external_id", as: String.self)] =
                    try row.decode(column: "available_at", as: Date.self).timeIntervalSince(clock.now)
            }
            // 10:00 in Berlin is 09:00 UTC; carol's zone is unknown, so UTC; in Tokyo it has passed: tomorrow 01:00 UTC.
            #expect(available == ["ada": 3600, "carol": 7200, "kenji": 17 * 3600])
            #expect(try await worker.runOnce() == 0)
            #expect(try await Self.status(app, id).deliveries == ["inbox": ["queued": 3]])
            // No delivery row: each notification is announced at its time from `announce_at`.
            let rows = try await app.db.sql.select().column(SQLFunction("COUNT", args: SQLLiteral.all), as: "n")
                .from("deliveries").first()?.decode(column: "n", as: Int.self)
            #expect(rows == 0)
            clock.advance(by: 3600)
            #expect(try await worker.runOnce() == 1)
            #expect(try await Self.status(app, id).deliveries == ["inbox": ["queued": 2, "sent": 1]])
            clock.advance(by: 3600)
            #expect(try await worker.runOnce() == 1)
            clock.advance(by: 15 * 3600)
            #expect(try await worker.runOnce() == 1)
            #expect(try await Self.status(app, id).deliveries == ["inbox": ["sent": 3]])

            let refused: [(String, String)] = [
                (#"{"calendar": {"hour": 8, "repeats": true}}"#, "trigger one event per occurrence"),
                (#"{"calendar": {"weekday": 9}}"#, #""weekday" must be from 1 to 7, got 9"#),
                (
                    #"{"calendar": {"hour": 8}, "delay_seconds": 5}"#,
                    #"takes one of "send_at", "delay_seconds" or "calendar""#
                ),
            ]
            for (schedule, message) in refused {
                let body =
                    #"{"category": "mention", "recipients": ["ada"], "content": {"title": "t", "body": "b"}, "schedule": \#(schedule)}"#
                let response = try await app.send(.POST, "/v1/events", bearer: testAPIKey, rawBody: body)
                #expect(response.status == .unprocessableEntity)
                #expect(response.errorMessage?.contains(message) == true, "\(response.body.string)")
            }
        }
    }

    @Test(
        "a failing event backs off, does not hold up others, and fails visibly after its last try",
        arguments: TestDatabase.allCases)
    func poisonEvent(database: TestDatabase) async throws {
        let clock = TestClock()
        try await withBelfry(database, clock: clock) { app in
            let ada = try await app.userToken("ada")
            #expect(
                try await app.send(
                    .PATCH, "/v1/me/preferences/channels/email", bearer: ada, json: ["preference": "all"]
                ).status == .ok)
            // Damage ada's stored preferences so that any fan-out reaching her fails.
            try await app.db.sql.update("preference_sets").set("selections", to: "not json").run()
            let poisoned = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: Self.event(to: ["ada"]))
                .decode(EventAccepted.self).eventID
            clock.advance(by: 1)
            let healthy = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: Self.event(to: ["bob"]))
                .decode(EventAccepted.self).eventID
            try await Self.fanOut(app)
            #expect(try await Self.status(app, healthy).state == .done, "the broken event does not block the queue")
            var status = try await Self.status(app, poisoned)
            #expect(status.state == .pending)
            #expect(status.error?.isEmpty == false)
            for _ in 0..<Fanout.maxFailures {
                clock.advance(by: 3600)
                try await Self.fanOut(app)
            }
            status = try await Self.status(app, poisoned)
            #expect(status.state == .failed)
            #expect(status.notifications == 0)
        }
    }

    /// A trigger that refuses any recipient row for `mallory`.
    static func refuseMallory(_ app: Application, on database: TestDatabase) async throws {
        guard database == .postgres else {
            return try await app.db.sql.raw(
                """
                CREATE TRIGGER refuse_mallory BEFORE INSERT ON event_recipients
                WHEN NEW.external_id = 'mallory' BEGIN SELECT RAISE(ABORT, 'refused'); END
                """
            ).run()
        }
        try await app.db.sql.raw(
            """
            CREATE FUNCTION refuse_mallory() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN IF NEW.external_id = 'mallory' THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$
            """
        ).run()
        try await app.db.sql.raw(
            """
            CREATE TRIGGER refuse_mallory BEFORE INSERT ON event_recipients
            FOR EACH ROW EXECUTE FUNCTION refuse_mallory()
            """
        ).run()
    }

    @Test(
        "concurrent events are stored together; one the database refuses fails alone, the rest are kept",
        arguments: TestDatabase.allCases)
    func refusedAmongConcurrent(database: TestDatabase) async throws {
        // The grouping is what is checked, not the request deadline: forty requests at once on
        // a machine busy with the rest of the suite took over 30 s once (408).
        try await withBelfry(database, settings: { $0.requestTimeout = 300 }) { app in
            try await Self.refuseMallory(app, on: database)
            let names = (0..<40).map { $0 == 17 ? "mallory" : "user\($0)" }
            let answers = try await withThrowingTaskGroup(of: (String, HTTPStatus, UUID?).self) { group in
                for name in names {
                    group.addTask {
                        let response = try await app.send(
                            .POST, "/v1/events", bearer: testAPIKey, json: Self.event(to: [name]))
                        return (name, response.status, try? response.decode(EventAccepted.self).eventID)
                    }
                }
                return try await group.reduce(into: [String: (HTTPStatus, UUID?)]()) { $0[$1.0] = ($1.1, $1.2) }
            }
            #expect(answers.count == 40)
            for (name, (status, id)) in answers where name != "mallory" {
                #expect(status == .accepted, "\(name): \(status)")
                let stored = try #require(id)
                #expect(try await Self.status(app, stored).recipients == 1, "\(name)'s event is stored")
            }
            #expect(answers["mallory"]?.0.code ?? 0 >= 500, "\(String(describing: answers["mallory"]))")
            let events = try await app.db.sql.raw("SELECT count(*) AS n FROM events").first()?
                .decode(column: "n", as: Int.self)
            #expect(events == 39, "mallory's event left nothing behind")
        }
    }

    @Test(
        "an event whose stored row cannot be read fails alone; the events due after it go on",
        arguments: TestDatabase.allCases)
    func unreadableEvent(database: TestDatabase) async throws {
        let clock = TestClock()
        try await withBelfry(database, clock: clock) { app in
            let broken = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: Self.event(to: ["ada"]))
                .decode(EventAccepted.self).eventID
            clock.advance(by: 1)
            let healthy = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: Self.event(to: ["bob"]))
                .decode(EventAccepted.self).eventID
            try await app.db.sql.update("events").set("calendar_rule", to: "not json").where("id", .equal, broken).run()
            try await Self.fanOut(app)
            #expect(try await Self.status(app, healthy).state == .done, "the unreadable event does not block the queue")
            #expect(try await Self.status(app, broken).error?.isEmpty == false, "its error is on it")
            for _ in 0..<Fanout.maxFailures {
                clock.advance(by: 3600)
                try await Self.fanOut(app)
            }
            #expect(try await Self.status(app, broken).state == .failed)
        }
    }

    @Test("on PostgreSQL an event and its recipients go in one statement: a recipient refused leaves no event")
    func postgresOneStatement() async throws {
        try await withBelfry(.postgres) { app in
            try await Self.refuseMallory(app, on: .postgres)
            let refused = try await app.send(
                .POST, "/v1/events", bearer: testAPIKey, json: Self.event(to: ["ada", "mallory"]))
            #expect(refused.status.code >= 500, "\(refused.status)")
            let count = { (table: String) in
                try await app.db.sql.raw("SELECT count(*) AS n FROM \(unsafeRaw: table)").first()?
                    .decode(column: "n", as: Int.self)
            }
            #expect(try await count("events") == 0, "the event's row went with its refused recipient")
            #expect(try await count("event_recipients") == 0)
            let accepted = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: Self.event(to: ["ada"]))
            #expect(accepted.status == .accepted)
            let id = try accepted.decode(EventAccepted.self).eventID
            #expect(try await Self.status(app, id).recipients == 1)
            #expect(try await count("event_recipients") == 1)
            // Written with their event, they check no key (`DropEventRecipientsForeignKey`).
            let keys = try await app.db.sql.raw(
                "SELECT count(*) AS n FROM pg_constraint WHERE conrelid = 'event_recipients'::regclass AND contype = 'f'"
            ).first()?.decode(column: "n", as: Int.self)
            #expect(keys == 0)
        }
    }

    @Test("a fan-out that PostgreSQL refuses shows the server's reason on the event, not a generic one")
    func postgresReason() async throws {
        try await withBelfry(.postgres) { app in
            try await app.db.sql.raw("ALTER TABLE notifications ADD CONSTRAINT refuse_all CHECK (false)").run()
            let id = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: Self.event(to: ["ada"]))
                .decode(EventAccepted.self).eventID
            try await Self.fanOut(app)
            let error = try #require(try await Self.status(app, id).error)
            #expect(error.hasPrefix("PostgreSQL: "), "\(error)")
            #expect(error.contains("refuse_all"), "\(error)")
        }
    }

    @Test("an event whose category left the config fails visibly")
    func removedCategory() async throws {
        try await withTestStorage(.sqlite) { location in
            let id = try await withBelfryApp(location: location) { app, _ in
                try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: Self.event("reverted", to: ["ada"]))
                    .decode(EventAccepted.self).eventID
            }
            var workspace = WorkspaceConfig.demo
            workspace.categories.removeAll { $0.id == "reverted" }
            try await withBelfryApp(location: location, workspace: workspace) { app, _ in
                try await Self.fanOut(app)
                let status = try await Self.status(app, id)
                #expect(status.state == .failed)
                #expect(status.error == #"category "reverted" is no longer in the workspace config"#)
            }
        }
    }

    @Test("concurrent requests with one idempotency key make one event", arguments: TestDatabase.allCases)
    func concurrentIdempotency(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let ids = try await withThrowingTaskGroup(of: UUID.self) { group in
                for _ in 0..<8 {
                    group.addTask {
                        try await app.send(
                            .POST, "/v1/events", bearer: testAPIKey, json: Self.event(to: ["ada"], key: "once")
                        )
                        .decode(EventAccepted.self).eventID
                    }
                }
                return try await group.reduce(into: Set<UUID>()) { $0.insert($1) }
            }
            #expect(ids.count == 1)
            let events = try await app.db.sql.select().column(SQLFunction("COUNT", args: SQLLiteral.all), as: "n")
                .from("events").first()?.decode(column: "n", as: Int.self)
            #expect(events == 1)
        }
    }

    @Test("a calendar rule no date matches is refused")
    func impossibleDate() async throws {
        try await withBelfry(.sqlite) { app in
            let event = Self.event(to: ["ada"], schedule: .init(calendar: CalendarRule(month: 2, day: 30)))
            let response = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: event)
            #expect(response.status == .unprocessableEntity)
            #expect(response.errorMessage?.contains("no date matches it") == true)
        }
    }
}
