import BelfryCore
import Fluent
import Foundation
import Vapor

/// Topics over HTTP. Server side (API key): `PUT` and `DELETE /v1/topics/{topic}/subscribers`
/// with `{"users": [...]}` (idempotent; unknown users are created on `PUT`), and
/// `GET /v1/topics/{topic}`. User side (user token): `GET /v1/me/topics`, and `PUT` and
/// `DELETE /v1/me/topics/{topic}`.
struct TopicsController: RouteCollection {
    /// The server's settings and shared parts (the clock, the workspace, the database).
    let context: BelfryContext
    let topics: TopicStore

    func boot(routes: any RoutesBuilder) throws {
        // 10 000 user ids of up to 128 characters need more than the default body limit.
        routes.on(.PUT, "v1", "topics", ":topic", "subscribers", bodyLimit: "2mb", use: addSubscribers)
        routes.on(.DELETE, "v1", "topics", ":topic", "subscribers", bodyLimit: "2mb", use: removeSubscribers)
        routes.get("v1", "topics", ":topic", use: show)
        routes.get("v1", "me", "topics", use: mine)
        routes.put("v1", "me", "topics", ":topic", use: follow)
        routes.delete("v1", "me", "topics", ":topic", use: unfollow)
    }

    @Sendable func addSubscribers(req: Request) async throws -> Response {
        try await req.requireServer(context.auth, .publish)
        let topic = try req.topicParameter()
        let users = try Self.users(req)
        let added = try await self.topics.subscribe(users, to: topic, on: req.db)
        req.logger.info(
            "topic subscribers added",
            metadata: ["belfry.topic": "\(topic)", "belfry.users": "\(users.count)", "belfry.new": "\(added)"])
        return try await summary(req, topic)
    }

    @Sendable func removeSubscribers(req: Request) async throws -> Response {
        try await req.requireServer(context.auth, .publish)
        let topic = try req.topicParameter()
        let users = try Self.users(req)
        let removed = try await self.topics.unsubscribe(users, from: topic, on: req.db)
        req.logger.info(
            "topic subscribers removed",
            metadata: ["belfry.topic": "\(topic)", "belfry.users": "\(users.count)", "belfry.removed": "\(removed)"])
        return try await summary(req, topic)
    }

    @Sendable func show(req: Request) async throws -> Response {
        try await req.requireServer(context.auth, .read, .publish)
        return try await summary(req, try req.topicParameter())
    }

    @Sendable func mine(req: Request) async throws -> Response {
        let user = try await req.requireUser(context.auth)
        return try Response.json(
            UserTopics(topics: try await self.topics.topics(of: try user.requireID(), on: req.db)))
    }

    /// Only the topics the workspace lets users follow: the rest (a project's members, a private
    /// page's watchers) are the backend's to grant. Leaving any topic is always the user's choice.
    @Sendable func follow(req: Request) async throws -> Response {
        let user = try await req.requireUser(context.auth)
        let topic = try req.topicParameter()
        guard context.workspace.userMayFollow(topic) else {
            throw BelfryError(
                .topicNotFollowable,
                "users may not follow \"\(topic)\" themselves: the workspace's followable_topics "
                    + "does not list it, so only the backend adds its subscribers")
        }
        try await self.topics.subscribe(userID: try user.requireID(), to: topic, on: req.db)
        return try await mine(req: req)
    }

    @Sendable func unfollow(req: Request) async throws -> Response {
        let user = try await req.requireUser(context.auth)
        let topic = try req.topicParameter()
        try await self.topics.unsubscribe(userID: try user.requireID(), from: topic, on: req.db)
        return try await mine(req: req)
    }

    private func summary(_ req: Request, _ topic: String) async throws -> Response {
        try Response.json(
            TopicSummary(topic: topic, subscribers: try await self.topics.subscribers(of: topic, on: req.db)))
    }

    /// The body's `users`: 1 to 10 000 valid external ids.
    static func users(_ req: Request) throws -> [String] {
        let body = try req.decodeBody(TopicSubscribers.self)
        var problems: [String] = []
        if body.users.isEmpty || body.users.count > TopicStore.maxUsersPerCall {
            problems.append(
                "field \"users\" must list 1 to \(TopicStore.maxUsersPerCall) user ids, got \(body.users.count); "
                    + "send more in several calls")
        }
        for (index, id) in body.users.enumerated().filter({ !UserID.isValid($0.element) }).prefix(3) {
            problems.append("field \"users[\(index)]\": \"\(id.prefix(40))\" is not a valid user id (\(UserID.rule))")
        }
        if !problems.isEmpty { throw BelfryError.invalid(problems.joined(separator: "; ")) }
        return body.users
    }
}

extension Request {
    /// The `{topic}` path parameter.
    func topicParameter() throws -> String {
        let topic = parameters.get("topic") ?? ""
        guard TopicName.isValid(topic) else {
            throw BelfryError.invalid("the topic must be \(TopicName.rule), got \"\(topic.prefix(40))\"")
        }
        return topic
    }
}
