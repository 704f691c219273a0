import AsyncHTTPClient
import BelfryCore
import BelfryTestSupport
import Foundation
import SQLKit
import Testing
import Vapor
import VaporTesting

@testable import BelfryServer

/// Request limits per API key, per user and per address: a 429 with `Retry-After` and the
/// RateLimit fields once a quota is spent, back after its time; a cap on a user's streams; and
/// one answer per notification however often it is sent.
@Suite("Rate limits", .serialized)
struct RateLimitTests {
    static func limits(_ text: String) throws -> RateLimits {
        try RateLimits.parse(text).get()
    }

    static func expectRefused(_ response: TestingHTTPResponse, _ kind: String, quota: Int, window: Int) {
        #expect(response.status == .tooManyRequests)
        #expect(Int(response.headers.first(name: .retryAfter) ?? "") ?? 0 >= 1)
        #expect(response.headers.first(name: "RateLimit-Policy") == "\"\(kind)\";q=\(quota);w=\(window)")
        #expect(response.headers.first(name: "RateLimit")?.hasPrefix("\"\(kind)\";r=0;t=") == true)
    }

    @Test("an API key gets its quota, then 429 with Retry-After and the RateLimit fields, then more in time")
    func perKey() async throws {
        let clock = TestClock()
        try await withBelfry(.sqlite, clock: clock) { settings in
            settings.rateLimits = try! Self.limits("api=5/s")
        } _: { app in
            let other = try await app.belfry.keyStore.create(name: "other", scope: .read, on: app.db).key
            for remaining in (0..<5).reversed() {
                let response = try await app.send(.GET, "/v1/topics/t", bearer: testAPIKey)
                #expect(response.status == .ok)
                #expect(response.headers.first(name: "RateLimit-Policy") == "\"api\";q=5;w=1")
                #expect(response.headers.first(name: "RateLimit")?.hasPrefix("\"api\";r=\(remaining);t=") == true)
            }
            let refused = try await app.send(.GET, "/v1/topics/t", bearer: testAPIKey)
            Self.expectRefused(refused, "api", quota: 5, window: 1)
            #expect(refused.errorCode == "rate_limited")
            #expect(refused.errorMessage?.contains("5 a second") == true)
            // Another key has its own quota.
            #expect(try await app.send(.GET, "/v1/topics/t", bearer: other).status == .ok)
            clock.advance(by: 1)
            #expect(try await app.send(.GET, "/v1/topics/t", bearer: testAPIKey).status == .ok)
        }
    }

    @Test("a user's tokens share one quota; other users have theirs")
    func perUser() async throws {
        let clock = TestClock()
        try await withBelfry(.sqlite, clock: clock) { settings in
            settings.rateLimits = try! Self.limits("user=3/min")
        } _: { app in
            let ada = try await app.userToken("ada")
            let adaAgain = try await app.send(
                .POST, "/v1/users/ada/tokens", bearer: testAPIKey, json: ["ttl_seconds": 600]
            )
            .decode(TokenGrant.self).token
            let grace = try await app.userToken("grace")
            for token in [ada, adaAgain, ada] {
                #expect(try await app.send(.GET, "/v1/me/notifications/counts", bearer: token).status == .ok)
            }
            Self.expectRefused(
                try await app.send(.GET, "/v1/me/notifications/counts", bearer: adaAgain), "user", quota: 3, window: 60)
            #expect(try await app.send(.GET, "/v1/me/notifications/counts", bearer: grace).status == .ok)
            clock.advance(by: 20)
            #expect(try await app.send(.GET, "/v1/me/notifications/counts", bearer: ada).status == .ok)
        }
    }

    @Test("console sign-ins are limited per address, a right key too once the quota is spent")
    func signIn() async throws {
        try await withBelfry(.sqlite) { settings in
            settings.rateLimits = try! Self.limits("signin=3/min")
        } _: { app in
            let form: HTTPHeaders = ["Content-Type": "application/x-www-form-urlencoded"]
            for attempt in 0..<3 {
                let wrong = try await app.send(
                    .POST, "/admin/session", rawBody: "api_key=wrong-key-\(attempt)-0123456789", headers: form)
                #expect(wrong.status == .unauthorized)
            }
            let refused = try await app.send(.POST, "/admin/session", rawBody: "api_key=\(testAPIKey)", headers: form)
            Self.expectRefused(refused, "signin", quota: 3, window: 60)
            #expect(refused.headers.contentType == .html)
            #expect(refused.body.string.contains("Too many requests"))
            #expect(refused.headers.setCookie?[ConsoleSession.cookieName] == nil)
            let audit = try await app.send(.GET, "/v1/audit", bearer: testAPIKey).decode(AuditPage.self)
            #expect(audit.entries.filter { $0.action == "console.sign_in_failed" }.count == 3)
        }
    }

    @Test("link pages, the sign-in form, one-click unsubscribes and bad bearers count per address")
    func publicRoutes() async throws {
        try await withBelfry(.sqlite) { settings in
            settings.rateLimits = try! Self.limits("public=4/min")
        } _: { app in
            let token = try await app.userToken("ada")
            #expect(try await app.send(.GET, "/preferences?token=\(token)").status == .ok)
            #expect(
                try await app.send(
                    .POST, "/web/session", rawBody: "page=inbox",
                    headers: ["Content-Type": "application/x-www-form-urlencoded"]
                ).status == .forbidden)
            #expect(try await app.send(.POST, "/unsubscribe/nonsense.nonsense", rawBody: "").status == .unauthorized)
            #expect(try await app.send(.GET, "/v1/me/notifications", bearer: "not-a-token").status == .unauthorized)
            for path in ["/preferences?token=\(token)", "/unsubscribe/nonsense.nonsense"] {
                let refused = try await app.send(.GET, path)
                Self.expectRefused(refused, "public", quota: 4, window: 60)
                #expect(refused.headers.contentType == .html, "\(path)")
            }
            Self.expectRefused(
                try await app.send(.GET, "/v1/me/notifications", bearer: "not-a-token"), "public", quota: 4, window: 60)
            // The pages themselves, with a session, and the API with a good token are not public.
            #expect(try await app.send(.GET, "/v1/me/notifications", bearer: token).status == .ok)
        }
    }

    @Test("a user holds at most the configured number of streams")
    func streamCap() async throws {
        try await withBelfry(.sqlite) { settings in
            settings.maxStreamsPerUser = 2
        } _: { app in
            try await InboxStreamTests.serving(app) { port, client in
                let ada = try await app.userToken("ada")
                let grace = try await app.userToken("grace")
                var open: [EventStreamReader] = []
                for _ in 0..<2 {
                    let (response, stream) = try await InboxStreamTests.open(port, token: ada, client: client)
                    #expect(response.status == .ok)
                    #expect(try await stream.next()?.name == "counts")
                    open.append(stream)
                }
                let third = try await client.execute(
                    HTTPClientRequest(url: "http://127.0.0.1:\(port)/v1/me/stream?token=\(ada)"), timeout: .seconds(30))
                #expect(third.status == .tooManyRequests)
                #expect(third.headers.first(name: "Retry-After") == "15")
                let body = String(buffer: try await third.body.collect(upTo: 4096))
                #expect(body.contains("2 streams"))
                let (others, otherStream) = try await InboxStreamTests.open(port, token: grace, client: client)
                #expect(others.status == .ok)
                #expect(try await otherStream.next()?.name == "counts")
                _ = open
            }
        }
    }

    @Test(
        "an action answered 50 times is recorded and sent once; repeats get the first answer",
        arguments: TestDatabase.allCases)
    func actionOnce(database: TestDatabase) async throws {
        let receiver = try await WebhookReceiver(answers: "200")
        defer { receiver.stop() }
        try await withBelfry(database, webhook: receiver.webhook) { app in
            let ada = try await app.userToken("ada")
            try await InboxAPITests.notify(app, ["ada"], title: "Reply?", category: "edit-user-talk")
            let item = try #require(try await InboxAPITests.page(app, ada).notifications.first)
            struct Answer: Decodable {
                var forwarded: Bool
                var action: String
            }
            let answers = try await withThrowingTaskGroup(of: Answer.self) { group in
                for index in 0..<50 {
                    group.addTask {
                        let action = index == 0 ? "reply" : (index % 2 == 0 ? "reply" : "mark-read")
                        return try await app.send(
                            .POST, "/v1/me/notifications/\(item.id)/actions/\(action)", bearer: ada
                        ).decode(Answer.self)
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(answers.filter(\.forwarded).count == 1)
            #expect(Set(answers.map(\.action)).count == 1, "every answer names the first")
            let actions = try await app.db.sql.raw("SELECT COUNT(*) AS n FROM notification_actions").first()
            #expect(try actions?.decode(column: "n", as: Int.self) == 1)
            try await #require(app.deliveryQueue).runOnce()
            #expect(try receiver.entries().count == 1)
        }
    }

    @Test("the limits setting reads classes and rates, and names what is wrong")
    func setting() throws {
        #expect(try Self.limits("").description == RateLimits.defaults.description)
        let custom = try Self.limits("api=50/s, user=off,signin=3/h")
        #expect(custom.rules[.api] == .init(quota: 50, window: 1))
        #expect(custom.rules[.user] == nil)
        #expect(custom.rules[.signin] == .init(quota: 3, window: 3600))
        #expect(custom.rules[.public] == RateLimits.defaults.rules[.public])
        #expect(custom.description == "api=50/s,user=off,signin=3/h,public=120/min")
        for (bad, expected) in [("api=5/day", "api=N/s"), ("everyone=5/s", "CLASS one of"), ("api=0/s", "N from 1")] {
            guard case .failure(let problem) = RateLimits.parse(bad) else {
                Issue.record("\(bad) was accepted")
                continue
            }
            #expect(problem.message.contains(expected), "\(problem.message)")
        }
    }
}
