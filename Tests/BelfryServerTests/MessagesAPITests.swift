import BelfryCore
import BelfryTestSupport
import Foundation
import Testing
import Vapor

@testable import BelfryServer

/// The message log: `GET /v1/messages` and `GET /v1/messages/{id}`.
@Suite("Message log API", .serialized)
struct MessagesAPITests {
    /// The console's user page and `?user=` read a user's messages: through the user's
    /// notifications, with no table read whole (no index leads with the deliveries' `user_id`).
    @Test("a user's page, first or later, reads no table whole", arguments: TestDatabase.allCases)
    func userPageByIndex(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            for cursor in [nil, UUID()] {
                let page = MessageLog.page(.init(user: UUID()), after: cursor, limit: 50, on: app.db.sql)
                let plan = try await MetricsTests.plan("\(page.query)", on: app.db)
                #expect(plan.contains("notifications_inbox"), "\(plan)")
                #expect(!plan.contains("SCAN ") && !plan.contains("Seq Scan"), "\(plan)")
            }
        }
    }

    @Test(
        "a user's messages page newest first without repeats or gaps, each with its attempts; filters; a user token gets 403",
        arguments: [(TestDatabase.sqlite, 500), (TestDatabase.postgres, 40)])
    func pages(database: TestDatabase, events: Int) async throws {
        try await withBelfry(database) { app in
            let ada = try await app.userToken("ada")
            // Five phones: each event makes five push messages.
            for number in 0..<5 {
                _ = try await APNsChannelTests.register(app, ada, token: String(repeating: "a\(number)", count: 32))
            }
            _ = try await app.userToken("bob")
            for index in 0..<events {
                let event = EventRequest(
                    category: "reverted", recipients: index == 0 ? ["ada", "bob"] : ["ada"],
                    content: .init(title: "T\(index)", body: "b"))
                #expect(try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: event).status == .accepted)
            }
            while try await app.belfryServices.fanout.processBatch(on: app.db) {}
            let worker = try #require(app.deliveryQueue)
            while try await worker.runOnce() > 0 {}

            var seen: [MessageRecord] = []
            var cursor: String?
            repeat {
                let path = "/v1/messages?user=ada&limit=100" + (cursor.map { "&cursor=\($0)" } ?? "")
                let page = try await app.send(.GET, path, bearer: testAPIKey).decode(MessagePage.self)
                seen += page.messages
                cursor = page.nextCursor
            } while cursor != nil
            #expect(seen.count == events * 5, "every push message of ada's, once")
            #expect(Set(seen.map(\.id)).count == seen.count, "no repeats")
            #expect(seen.allSatisfy { $0.user == "ada" && $0.channel == "ios_push" })
            #expect(seen.allSatisfy { $0.status == "failed" && $0.attempts.count == 1 }, "no APNs key here")
            #expect(seen.first?.attempts.first?.error?.contains("no provider") == true)
            #expect(zip(seen, seen.dropFirst()).allSatisfy { $0.createdAt >= $1.createdAt }, "newest first")

            let one = try #require(seen.last)
            let shown = try await app.send(.GET, "/v1/messages/\(one.id)", bearer: testAPIKey).decode(
                MessageRecord.self)
            #expect(shown == one)
            let byEvent = try await app.send(.GET, "/v1/messages?event=\(one.eventID)", bearer: testAPIKey)
                .decode(MessagePage.self)
            #expect(byEvent.messages.count == 5, "ada's five phones; bob has none")
            #expect(
                try await app.send(.GET, "/v1/messages?status=sent", bearer: testAPIKey).decode(MessagePage.self)
                    .messages.isEmpty)

            #expect(try await app.send(.GET, "/v1/messages?user=ada", bearer: ada).status == .forbidden)
            #expect(try await app.send(.GET, "/v1/messages?user=nobody", bearer: testAPIKey).status == .notFound)
            for query in ["status=lost", "limit=1000", "limit=abc", "event=nope", "since=yesterday", "cursor=x"] {
                #expect(
                    try await app.send(.GET, "/v1/messages?\(query)", bearer: testAPIKey).status
                        == .unprocessableEntity,
                    "\(query)")
            }
            #expect(try await app.send(.GET, "/v1/messages/\(UUID())", bearer: testAPIKey).status == .notFound)
        }
    }
}
