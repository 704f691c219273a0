import BelfryCore
import BelfryTestSupport
import Foundation
import Testing
import Vapor

@testable import BelfryServer

/// The operator console's reads on both databases, and its sign-in, CSRF and retry over HTTP.
/// The pages themselves are tested in Chromium (Tests/browser).
@Suite("operator console")
struct ConsoleTests {
    static let form: HTTPHeaders = ["Content-Type": "application/x-www-form-urlencoded"]

    static func form(_ session: HTTPHeaders) -> HTTPHeaders {
        var headers = session
        headers.add(contentsOf: form)
        return headers
    }

    @Test(
        "the charts count attempts per minute and sampled depth; an event lists its attempts",
        arguments: TestDatabase.allCases)
    func charts(database: TestDatabase) async throws {
        let receiver = try await WebhookReceiver(answers: "500,200")
        defer { receiver.stop() }
        let clock = TestClock()
        try await withBelfry(database, clock: clock, jitter: 0.5, webhook: receiver.webhook) { app in
            let worker = try #require(app.deliveryQueue)
            let console = app.belfryServices.consoleData
            let event = try await DeliveryQueueTests.trigger(app, to: ["ada", "bob"])
            try await console.sampleQueueDepth(on: app.db)
            let queued = try await console.overview(on: app.db)
            #expect(queued.pending == ["webhook": 2, "email": 2])
            #expect(queued.depth.last == 4, "the current minute is read live")
            #expect(queued.events.map(\.id) == [event])

            while try await worker.runOnce() > 0 {}
            clock.advance(by: 120)
            try await console.sampleQueueDepth(on: app.db)
            while try await worker.runOnce() > 0 {}
            let done = try await console.overview(on: app.db)
            #expect(done.pending.isEmpty)
            #expect(done.depth.suffix(3) == [4, nil, 0], "a sample two minutes ago, none since, none queued now")
            let minutes = ConsoleData.chartMinutes
            // The first attempts two minutes ago: the receiver answers 500 once, then 200; email has
            // no relay. Both inbox notifications count as sent when they became available.
            #expect(done.unsent[minutes - 3] == 3 && done.sent[minutes - 3] == 1 + 2)
            #expect(done.sent[minutes - 1] == 1, "the retry, now")
            #expect(done.sent.reduce(0, +) == 4 && done.unsent.reduce(0, +) == 3)
            #expect(done.deliveryRate == 0, "none sent in the last whole minute")
            clock.advance(by: 60)
            #expect(try await console.overview(on: app.db).deliveryRate == 1.0 / 60, "the retry's minute, now whole")
            #expect(ConsolePages.rate(1.0 / 60) == "0.0" && ConsolePages.rate(2.25) == "2.2")
            #expect(ConsolePages.rate(4_391.4) == "4391")

            let detail = try #require(try await console.event(event, on: app.db))
            let webhooks = detail.deliveries.filter { $0.channel == "webhook" }
            #expect(webhooks.count == 2 && webhooks.allSatisfy { $0.status == "sent" })
            #expect(Set(webhooks.map { $0.attemptLog.map(\.outcome) }) == [["retry", "sent"], ["sent"]])
            #expect(Set(webhooks.map { $0.attemptLog.map(\.statusCode) }) == [[500, 200], [200]])
            #expect(detail.deliveries.filter { $0.channel == "email" }.allSatisfy { $0.lastError != nil })
            #expect(try await console.event(UUID(), on: app.db) == nil)

            // The overview reads its events' statuses together; each is what the event's own
            // status says, and an unknown id is left out.
            let second = try await DeliveryQueueTests.trigger(app, to: ["carol"])
            let intake = app.belfryServices.eventStatuses
            let together = try await intake.statuses(of: [event, second, UUID()], on: app.db)
            #expect(Set(together.keys) == [event, second])
            #expect(together[event] == (try await intake.status(of: event, on: app.db)))
            #expect(together[second] == (try await intake.status(of: second, on: app.db)))
            #expect(together[event]?.lastErrors["email"] != nil)
            #expect(together[second]?.deliveries["webhook"] == ["queued": 1])
            #expect(try await console.overview(on: app.db).events.map(\.id) == [second, event])
        }
    }

    @Test("sign-in takes an API key; changes need the session's CSRF token; retry queues the dead")
    func signInAndRetry() async throws {
        try await withBelfry(.sqlite) { app in
            let signInPage = try await app.send(.GET, "/admin")
            #expect(signInPage.status == .ok && signInPage.body.string.contains(#"type="password""#))
            let refused = try await app.send(
                .POST, "/admin/session", rawBody: "api_key=wrong-key-0123456789", headers: Self.form)
            #expect(refused.status == .unauthorized)
            #expect(refused.headers.setCookie?[ConsoleSession.cookieName] == nil)
            let userToken = try await app.userToken("ada")
            let notAUserToken = try await app.send(
                .POST, "/admin/session", rawBody: "api_key=\(userToken)", headers: Self.form)
            #expect(notAUserToken.status == .unauthorized, "a user token is not an API key")

            let signedIn = try await app.send(
                .POST, "/admin/session", rawBody: "api_key=\(testAPIKey)", headers: Self.form)
            #expect(signedIn.status == .seeOther)
            let cookie = try #require(signedIn.headers.setCookie?[ConsoleSession.cookieName])
            #expect(cookie.isHTTPOnly && cookie.isSecure && cookie.sameSite == .strict && cookie.path == "/admin")
            let session: HTTPHeaders = ["Cookie": "\(ConsoleSession.cookieName)=\(cookie.string)"]

            // A delivery that died, and its event's page.
            let event = try await DeliveryQueueTests.trigger(app)
            try await app.db.sql.update("deliveries").set("status", to: DeliveryStatus.dead.rawValue)
                .where("channel", .equal, "webhook").run()
            let overview = try await app.send(.GET, "/admin", headers: session)
            let page = overview.body.string
            #expect(page.contains(#"<dd id="stat-dead" class="stat-alarm">1</dd>"#), "\(page)")
            let csrf = try #require(page.firstMatch(of: /name="_csrf" value="([^"]+)"/)?.output.1)
            let retryPath = "/admin/events/\(event.uuidString.lowercased())/retry"
            let forged = try await app.send(
                .POST, retryPath, rawBody: "_csrf=forged", headers: Self.form(session))
            #expect(forged.status == .forbidden)
            let noSession = try await app.send(
                .POST, retryPath, rawBody: "_csrf=\(csrf)", headers: Self.form)
            #expect(noSession.status == .unauthorized)
            let retried = try await app.send(
                .POST, retryPath, rawBody: "_csrf=\(csrf)&return=event", headers: Self.form(session))
            #expect(retried.status == .seeOther)
            #expect(
                retried.headers.first(name: .location) == "/admin/events/\(event.uuidString.lowercased())?retried=1")
            let status = try await app.send(.GET, "/v1/events/\(event)", bearer: testAPIKey).decode(EventStatus.self)
            #expect(status.deliveries["webhook"] == ["queued": 1])

            let missing = try await app.send(.GET, "/admin/events/\(UUID())", headers: session)
            #expect(missing.status == .notFound)
            #expect(try await app.send(.GET, "/admin/events/\(event)").status == .unauthorized)
            #expect(try await app.send(.GET, "/admin/live").status == .unauthorized)
        }
    }

    @Test("signing out ends every console session of that key, copied cookies too", arguments: TestDatabase.allCases)
    func signOutRevokes(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            func signIn() async throws -> HTTPHeaders {
                let signedIn = try await app.send(
                    .POST, "/admin/session", rawBody: "api_key=\(testAPIKey)", headers: Self.form)
                let cookie = try #require(signedIn.headers.setCookie?[ConsoleSession.cookieName])
                return ["Cookie": "\(ConsoleSession.cookieName)=\(cookie.string)"]
            }
            let laptop = try await signIn()
            let copied = laptop
            let phone = try await signIn()
            let page = try await app.send(.GET, "/admin", headers: laptop).body.string
            let csrf = try #require(page.firstMatch(of: /name="_csrf" value="([^"]+)"/)?.output.1)
            let out = try await app.send(.POST, "/admin/signout", rawBody: "_csrf=\(csrf)", headers: Self.form(laptop))
            #expect(out.status == .seeOther)
            for session in [copied, phone] {
                #expect(try await app.send(.GET, "/admin/live", headers: session).status == .unauthorized)
                #expect(try await app.send(.GET, "/admin", headers: session).body.string.contains(#"type="password""#))
            }
            let fresh = try await signIn()
            #expect(try await app.send(.GET, "/admin", headers: fresh).body.string.contains("stat-dead"))
        }
    }

    @Test(
        "failed deliveries show beside the dead with reasons in words; a row's Retry retries that row only",
        arguments: TestDatabase.allCases)
    func failedAndOneRetry(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            // No webhook provider here: the webhook deliveries fail for good at their first attempt.
            let event = try await DeliveryQueueTests.trigger(app, to: ["ada", "bob"])
            try await #require(app.deliveryQueue).runOnce()
            let webhooks = try await app.belfryServices.deadLetters.list(channel: "webhook", limit: 10, on: app.db)
            #expect(webhooks.map(\.status) == [.failed, .failed])
            let (first, second) = (webhooks[0], webhooks[1])
            try await app.db.sql.update("deliveries").set("last_error", to: "no_authorized_device")
                .where("id", .equal, second.id).run()

            let signedIn = try await app.send(
                .POST, "/admin/session", rawBody: "api_key=\(testAPIKey)", headers: Self.form)
            let cookie = try #require(signedIn.headers.setCookie?[ConsoleSession.cookieName])
            let session: HTTPHeaders = ["Cookie": "\(ConsoleSession.cookieName)=\(cookie.string)"]
            let page = try await app.send(.GET, "/admin", headers: session).body.string
            #expect(page.contains(#"<dd id="stat-failed" class="stat-alarm">"#))
            #expect(page.contains("Failed and dead deliveries"))
            #expect(page.contains("no provider for webhook channels is configured"))
            #expect(page.contains("the user has no device that may be notified"))
            #expect(!page.contains(">no_authorized_device<"))
            let csrf = try #require(page.firstMatch(of: /name="_csrf" value="([^"]+)"/)?.output.1)

            let path = "/admin/deliveries/\(first.id.uuidString.lowercased())/retry"
            let retried = try await app.send(
                .POST, path, rawBody: "_csrf=\(csrf)&return=event", headers: Self.form(session))
            #expect(retried.status == .seeOther)
            #expect(
                retried.headers.first(name: .location) == "/admin/events/\(event.uuidString.lowercased())?retried=1")
            let after = try await app.belfryServices.deadLetters.list(channel: "webhook", limit: 10, on: app.db)
            #expect(after.map(\.id) == [second.id], "the other row is untouched")
            #expect(
                try await app.send(.POST, path, rawBody: "_csrf=\(csrf)", headers: Self.form(session)).status
                    == .notFound, "queued now: nothing to retry")
            #expect(
                try await app.send(
                    .POST, "/admin/deliveries/\(UUID())/retry", rawBody: "_csrf=\(csrf)", headers: Self.form(session)
                ).status == .notFound)
            let eventPage = try await app.send(.GET, "/admin/events/\(event)", headers: session).body.string
            #expect(eventPage.contains("Retry failed and dead deliveries"))
            #expect(eventPage.contains("<dt>Title</dt><dd>Failed login attempts</dd>"), "the event's content")
            #expect(eventPage.contains("From an unknown device"))
            #expect(eventPage.contains("192.0.2.1"), "its data")
            let lost = try await app.send(.GET, "/admin/no-such-page", headers: session)
            #expect(lost.status == .notFound)
            #expect(lost.headers.contentType == .html)
            #expect(lost.body.string.contains("The console has no page at /admin/no-such-page"))
            #expect(eventPage.contains("/admin/deliveries/\(second.id.uuidString.lowercased())/retry"))
        }
    }

    @Test("event search and a user's messages page without repeats or gaps", arguments: TestDatabase.allCases)
    func searchPages(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            _ = try await APNsChannelTests.register(app, try await app.userToken("ada"))
            var ids: Set<UUID> = []
            for number in 0..<60 {
                ids.insert(try await InboxAPITests.notify(app, ["ada"], title: "T\(number)", category: "reverted"))
            }
            let query = app.belfryServices.eventStatuses
            var seen: [UUID] = []
            var before: UUID?
            repeat {
                let page = try await query.search(
                    category: "reverted", since: nil, before: before, limit: 25, on: app.db)
                seen += page
                before = page.count == 25 ? page.last : nil
            } while before != nil
            #expect(seen.count == 60 && Set(seen) == ids)
            #expect(try await query.search(category: "mention", since: nil, before: nil, limit: 25, on: app.db).isEmpty)

            // Each event made a push delivery (no provider here: it failed); the user's messages page through them.
            while try await app.deliveryQueue?.runOnce() ?? 0 > 0 {}
            var messages: [UUID] = []
            var older: UUID?
            repeat {
                let detail = try #require(
                    try await app.belfryServices.consoleData.user(
                        "ada", before: older, preferences: app.belfryServices.preferenceStore,
                        devices: app.belfryServices.devices,
                        on: app.db))
                messages += detail.messages.map(\.id)
                older = detail.older
                #expect(detail.messages.allSatisfy { !$0.attempts.isEmpty })
            } while older != nil
            #expect(messages.count == Set(messages).count)
            #expect(messages.count == 60, "one push each")
        }
    }
}
