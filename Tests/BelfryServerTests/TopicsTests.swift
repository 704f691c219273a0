import BelfryCore
import BelfryTestSupport
import Foundation
import SQLKit
import Testing
import Vapor
import VaporTesting

@testable import BelfryServer

@Suite("Topics: audiences that events name instead of recipients")
struct TopicsTests {
    static func put(_ app: Application, _ topic: String, _ users: [String]) async throws -> TestingHTTPResponse {
        try await app.send(
            .PUT, "/v1/topics/\(topic)/subscribers", bearer: testAPIKey, json: TopicSubscribers(users: users))
    }

    @Test(
        "the server adds and removes subscribers idempotently, creating unknown users; users follow topics themselves")
    func subscriptions() async throws {
        try await withBelfry(.sqlite) { app in
            let added = try await Self.put(app, "page:Bell_tower", ["ada", "bob", "ada"])
            #expect(added.status == .ok)
            #expect(try added.decode(TopicSummary.self) == TopicSummary(topic: "page:Bell_tower", subscribers: 2))
            #expect(try await app.send(.GET, "/v1/users/bob", bearer: testAPIKey).status == .ok, "bob was created")
            #expect(try await Self.put(app, "page:Bell_tower", ["bob"]).decode(TopicSummary.self).subscribers == 2)

            let removed = try await app.send(
                .DELETE, "/v1/topics/page:Bell_tower/subscribers", bearer: testAPIKey,
                json: TopicSubscribers(users: ["bob", "nobody"]))
            #expect(try removed.decode(TopicSummary.self).subscribers == 1)
            #expect(
                try await app.send(.GET, "/v1/topics/page:Bell_tower", bearer: testAPIKey).decode(TopicSummary.self)
                    == TopicSummary(topic: "page:Bell_tower", subscribers: 1))
            #expect(
                try await app.send(.GET, "/v1/topics/never-used", bearer: testAPIKey).decode(TopicSummary.self)
                    .subscribers == 0)

            // A user token follows (a followable topic) and leaves topics for its own user only.
            let ada = try await app.userToken("ada")
            #expect(
                try await app.send(.PUT, "/v1/me/topics/page:Main_Page", bearer: ada).decode(UserTopics.self).topics
                    == ["page:Bell_tower", "page:Main_Page"])
            #expect(try await app.send(.PUT, "/v1/me/topics/page:Main_Page", bearer: ada).status == .ok, "again")
            #expect(
                try await app.send(.DELETE, "/v1/me/topics/page:Bell_tower", bearer: ada).decode(UserTopics.self)
                    .topics == ["page:Main_Page"])
            #expect(
                try await app.send(.GET, "/v1/me/topics", bearer: ada).decode(UserTopics.self).topics == [
                    "page:Main_Page"
                ])
            #expect(try await Self.put(app, "project-42", ["ada"]).decode(TopicSummary.self).subscribers == 1)
            #expect(
                try await app.send(
                    .PUT, "/v1/topics/project-42/subscribers", bearer: ada, json: TopicSubscribers(users: ["bob"])
                ).status == .forbidden)
        }
    }

    @Test("users follow only the topics the workspace lists; the rest are the backend's")
    func followableOnly() async throws {
        try await withBelfry(.sqlite) { app in
            #expect(try await Self.put(app, "project-secret", ["alice"]).status == .ok)
            let mallory = try await app.userToken("mallory")
            let refused = try await app.send(.PUT, "/v1/me/topics/project-secret", bearer: mallory)
            #expect(refused.status == .forbidden)
            #expect(try refused.decode(ErrorBody.self).error.code == "topic_not_followable")
            #expect(refused.body.string.contains("followable_topics"))
            #expect(try await app.send(.GET, "/v1/me/topics", bearer: mallory).decode(UserTopics.self).topics == [])

            // The confidential event reaches Alice only.
            let sent = try await app.send(
                .POST, "/v1/events", bearer: testAPIKey,
                json: EventRequest(
                    category: "mention", topic: "project-secret",
                    content: .init(title: "Confidential: layoffs list", body: "…")))
            #expect(sent.status == .accepted)
            try await EventsAPITests.fanOut(app)
            let status = try await EventsAPITests.status(app, try sent.decode(EventAccepted.self).eventID)
            #expect(status.notifications == 1, "Alice's only")
        }
    }

    @Test("followable topics are names or prefixes ending in *")
    func followablePatterns() throws {
        var workspace = WorkspaceConfig.demo
        workspace.followableTopics = ["page:*", "announcements"]
        #expect(workspace.userMayFollow("page:Bell_tower"))
        #expect(workspace.userMayFollow("announcements"))
        #expect(!workspace.userMayFollow("announcements-internal"))
        #expect(!workspace.userMayFollow("project-secret"))
        workspace.followableTopics = nil
        #expect(!workspace.userMayFollow("page:Bell_tower"))
        let bad =
            #"{"channels":[{"id":"inbox","kind":"inbox"}],"categories":[{"id":"c","name":"C","channels":["inbox"]}],"tenants":[{"id":"t","name":"T"}],"followable_topics":["page:*","bad topic","a*b"]}"#
        #expect {
            try WorkspaceConfig.decodeFile(Data(bad.utf8))
        } throws: { error in
            let text = "\(error)"
            return text.contains("followable_topics[1]") && text.contains("followable_topics[2]")
                && !text.contains("followable_topics[0]")
        }
    }

    @Test("bad topics and user lists are refused with the field named")
    func validation() async throws {
        try await withBelfry(.sqlite) { app in
            let tooMany = try await Self.put(app, "big", (0...10_000).map { "u\($0)" })
            #expect(tooMany.status == .unprocessableEntity)
            #expect(tooMany.body.string.contains("1 to 10000"))
            #expect(try await Self.put(app, "t", []).status == .unprocessableEntity)
            let badUser = try await Self.put(app, "t", ["ok", "not ok"])
            #expect(badUser.body.string.contains("users[1]"))
            #expect(try await Self.put(app, "bad%20topic", ["ada"]).status == .unprocessableEntity)
            let both = EventRequest(
                category: "mention", recipients: ["ada"], topic: "t", content: .init(title: "T", body: "B"))
            let refused = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: both)
            #expect(refused.status == .unprocessableEntity)
            #expect(refused.body.string.contains("not both"))
            let neither = try await app.send(
                .POST, "/v1/events", bearer: testAPIKey,
                rawBody: #"{"category": "mention", "content": {"title": "T", "body": "B"}}"#)
            #expect(neither.status == .unprocessableEntity)
            #expect(neither.body.string.contains("or name a"))
        }
    }

    @Test(
        "an event to a topic of 20 000 reaches every subscriber but the excluded one and the one who left",
        arguments: TestDatabase.allCases)
    func topicFanOut(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let users = (0..<20_000).map { "watcher-\($0)" }
            for chunk in users.chunked(10_000) {
                #expect(try await Self.put(app, "page:Bell_tower", Array(chunk)).status == .ok)
            }
            let left = try await app.send(
                .DELETE, "/v1/topics/page:Bell_tower/subscribers", bearer: testAPIKey,
                json: TopicSubscribers(users: ["watcher-17"]))
            #expect(try left.decode(TopicSummary.self).subscribers == 19_999)
            // Someone who follows another topic only is not told.
            _ = try await Self.put(app, "page:Other", ["stranger"])

            let event = EventRequest(
                category: "mention", topic: "page:Bell_tower", exclude: ["watcher-4242", "not-a-subscriber"],
                content: .init(title: "Bell tower edited", body: "by watcher-4242"))
            let id = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: event).decode(EventAccepted.self)
                .eventID
            while try await app.belfryServices.fanout.processBatch(on: app.db) {}
            let status = try await APNsChannelTests.status(app, id)
            #expect(status.state == .done)
            #expect(status.notifications == 19_998)
            #expect(status.recipients == 19_998, "the audience reached, once read to its end")
            #expect(status.processed == 19_998)
            let reached = Set(
                try await app.db.sql.raw(
                    "SELECT users.external_id FROM notifications JOIN users ON users.id = notifications.user_id WHERE event_id = \(bind: id)"
                ).all().map { try $0.decode(column: "external_id", as: String.self) })
            #expect(reached.count == 19_998)
            #expect(reached == Set(users).subtracting(["watcher-17", "watcher-4242"]))
        }
    }

    @Test("an event's exclusions also apply to a list of recipients")
    func excludeFromRecipients() async throws {
        try await withBelfry(.sqlite) { app in
            let event = EventRequest(
                category: "mention", recipients: ["ada", "bob", "carol"], exclude: ["bob"],
                content: .init(title: "T", body: "B"))
            let id = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: event).decode(EventAccepted.self)
                .eventID
            while try await app.belfryServices.fanout.processBatch(on: app.db) {}
            let status = try await APNsChannelTests.status(app, id)
            #expect(status.recipients == 2)
            #expect(status.notifications == 2)
            #expect(try await app.send(.GET, "/v1/users/bob", bearer: testAPIKey).status == .notFound, "never created")
        }
    }
}
