import BelfryCore
import Fluent
import Foundation
import Vapor

/// `GET /v1/messages` and `GET /v1/messages/{message_id}`: the message log, for the backend's
/// support and analytics (an API key with the `read` scope, or `admin`).
struct MessagesController: RouteCollection {
    let auth: Authenticator
    let messageLog: MessageLog

    static let defaultLimit = 50
    static let maxLimit = 100

    func boot(routes: any RoutesBuilder) throws {
        routes.get("v1", "messages", use: list)
        routes.get("v1", "messages", ":message_id", use: show)
    }

    @Sendable func list(req: Request) async throws -> Response {
        try await req.requireServer(auth, .read)
        var filter = MessageLog.Filter()
        if let user = req.query[String.self, at: "user"] {
            guard let model = try await UserModel.query(on: req.db).filter(\.$externalID == user).first() else {
                throw BelfryError(.userNotFound, "no user \"\(user.prefix(64))\"")
            }
            filter.user = try model.requireID()
        }
        if let text = req.query[String.self, at: "event"] {
            guard let event = UUID(uuidString: text) else {
                throw BelfryError.invalid("\"event\" must be an event id (a UUID), got \"\(text.prefix(40))\"")
            }
            filter.event = event
        }
        filter.channel = req.query[String.self, at: "channel"]
        if let status = req.query[String.self, at: "status"] {
            guard DeliveryStatus(rawValue: status) != nil else {
                throw BelfryError.invalid(
                    "\"status\" must be one of queued, running, sent, failed, dead, skipped; got \"\(status.prefix(20))\""
                )
            }
            filter.status = status
        }
        if let since = req.query[String.self, at: "since"] {
            guard let date = try? Date(since, strategy: .iso8601) else {
                throw BelfryError.invalid("\"since\" must be an ISO 8601 time such as 2026-11-26T08:00:00Z")
            }
            filter.since = date
        }
        let limitText = req.query[String.self, at: "limit"]
        let limit = limitText.map { Int($0) ?? 0 } ?? Self.defaultLimit
        guard (1...Self.maxLimit).contains(limit) else {
            throw BelfryError.invalid("\"limit\" must be from 1 to \(Self.maxLimit)")
        }
        var cursor: UUID?
        if let text = req.query[String.self, at: "cursor"] {
            guard let id = UUID(uuidString: text) else {
                throw BelfryError.invalid("\"cursor\" must be a next_cursor this endpoint gave")
            }
            cursor = id
        }
        let messages = try await self.messageLog.page(filter, after: cursor, limit: limit, on: req.db)
        let next = messages.count == limit ? messages.last.map { $0.id.uuidString.lowercased() } : nil
        return try Response.json(MessagePage(messages: messages, nextCursor: next))
    }

    @Sendable func show(req: Request) async throws -> Response {
        try await req.requireServer(auth, .read)
        let text = req.parameters.get("message_id") ?? ""
        guard let id = UUID(uuidString: text), let message = try await self.messageLog.message(id, on: req.db)
        else {
            throw BelfryError(.notFound, "no message \"\(text.prefix(40))\"")
        }
        return try Response.json(message)
    }
}
