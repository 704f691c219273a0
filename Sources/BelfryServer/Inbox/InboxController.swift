import BelfryCore
import Fluent
import Foundation
import Vapor

/// The inbox API, `/v1/me/notifications` (user token): the bell's source of truth.
struct InboxController: RouteCollection {
    /// The server's settings and shared parts (the clock, the workspace, the database).
    let context: BelfryContext
    let inboxChanges: InboxChanges
    let inboxStore: InboxStore

    func boot(routes: any RoutesBuilder) throws {
        let inbox = routes.grouped("v1", "me", "notifications")
        inbox.get(use: list)
        inbox.get("counts", use: counts)
        routes.get("v1", "me", "stream", use: stream)
        inbox.post("read-all") { req in try await markAll(req, .read) }
        inbox.post("seen-all") { req in try await markAll(req, .seen) }
        inbox.post(":notification_id", "actions", ":action_id", use: respond)
        for mark in InboxStore.Mark.allCases {
            inbox.post(":notification_id", .constant(mark.rawValue)) { req in try await self.mark(req, mark) }
        }
    }

    private func store(_ req: Request) -> InboxStore {
        self.inboxStore
    }

    @Sendable func list(req: Request) async throws -> Response {
        let user = try await req.requireUser(context.auth, page: .inbox)
        var filter = InboxStore.Filter()
        if let status = req.query[String.self, at: "status"] {
            guard let parsed = InboxStore.Status(rawValue: status) else {
                throw BelfryError.invalid(
                    "query parameter \"status\" must be one of \(InboxStore.Status.allCases.map(\.rawValue).joined(separator: ", ")), got \"\(status)\""
                )
            }
            filter.status = parsed
        }
        filter.category = req.query[String.self, at: "category"]
        filter.tenant = try req.tenantFilter(in: context.workspace)
        let limitText = req.query[String.self, at: "limit"]
        guard let limit = limitText.map({ Int($0) }) ?? 20, (1...100).contains(limit) else {
            throw BelfryError.invalid("query parameter \"limit\" must be from 1 to 100, got \"\(limitText ?? "")\"")
        }
        var cursor: UUID?
        if let text = req.query[String.self, at: "cursor"] {
            guard let parsed = InboxStore.parseCursor(text) else {
                throw BelfryError.invalid("query parameter \"cursor\" is not a cursor this server gave out")
            }
            cursor = parsed
        }
        let page = try await store(req).page(
            userID: try user.requireID(), filter: filter, limit: limit, after: cursor, on: req.db)
        return try Response.json(page)
    }

    @Sendable func counts(req: Request) async throws -> Response {
        let user = try await req.requireUser(context.auth, page: .inbox)
        return try Response.json(
            try await store(req).counts(
                userID: try user.requireID(), tenant: try req.tenantFilter(in: context.workspace), on: req.db))
    }

    private func mark(_ req: Request, _ mark: InboxStore.Mark) async throws -> Response {
        let user = try await req.requireUser(context.auth, page: .inbox)
        let text = req.parameters.get("notification_id") ?? ""
        // Another user's notification answers exactly like one that does not exist.
        let userID = try user.requireID()
        guard let id = UUID(uuidString: text),
            let item = try await self.inboxChanges.mark(id, mark, userID: userID, on: req.db)
        else {
            throw BelfryError(.notificationNotFound, "no notification \"\(text)\" in your inbox")
        }
        return try Response.json(item)
    }

    /// A custom action chosen on a notification (seed 003's notification actions).
    @Sendable func respond(req: Request) async throws -> Response {
        let user = try await req.requireUser(context.auth, page: .inbox)
        let text = req.parameters.get("notification_id") ?? ""
        let actionID = req.parameters.get("action_id") ?? ""
        let outcome: InboxStore.ActionOutcome =
            if let id = UUID(uuidString: text) {
                try await self.inboxChanges.respond(
                    to: id, action: actionID, userID: try user.requireID(), on: req.db)
            } else { .notFound }
        switch outcome {
        case .notFound:
            throw BelfryError(.notificationNotFound, "no notification \"\(text)\" in your inbox")
        case .unknownAction:
            throw BelfryError(.actionNotFound, "this notification has no action \"\(actionID)\"")
        case .recorded(let item, let forwarded, let action):
            struct Answer: Encodable {
                var notification: InboxNotification
                var forwarded: Bool
                /// The answer that counts: the first one given to this notification.
                var action: String
            }
            return try Response.json(Answer(notification: item, forwarded: forwarded, action: action))
        }
    }

    private func markAll(_ req: Request, _ mark: InboxStore.Mark) async throws -> Response {
        let user = try await req.requireUser(context.auth, page: .inbox)
        let userID = try user.requireID()
        let tenant = try req.tenantFilter(in: context.workspace)
        let updated = try await self.inboxChanges.markAll(
            mark, userID: userID, tenant: tenant, category: req.query[String.self, at: "category"], on: req.db)
        struct Answer: Encodable {
            var updated: Int
            var counts: InboxCounts
        }
        return try Response.json(
            Answer(updated: updated, counts: try await store(req).counts(userID: userID, tenant: tenant, on: req.db)))
    }
}

extension InboxController {
    /// `GET /v1/me/stream`: server-sent events of the user's inbox. The user token comes in the
    /// `Authorization` header or, for EventSource (which cannot set headers), a `token` query
    /// parameter. A `counts` event comes first; `Last-Event-ID` replays what a reconnecting
    /// client missed in the last few minutes; a comment every 15 s keeps proxies from closing it.
    @Sendable func stream(req: Request) async throws -> Response {
        let subject = try await req.requireUserSubject(context.auth, allowingQueryToken: true, page: .inbox)
        let userID = subject.userID
        // Ids are "<instance>-<n>": one from another instance (the client reconnected elsewhere)
        // replays nothing, and the first `counts` brings the client up to date.
        let lastEventID = req.headers.first(name: "Last-Event-ID").flatMap { id -> Int? in
            let parts = id.split(separator: "-")
            guard parts.count == 2, parts[0] == context.instanceTag else { return nil }
            return Int(parts[1])
        }
        // Subscribed before the counts are read, so that nothing published meanwhile is missed:
        // it waits in the stream until the response starts.
        let stream = InboxStreamWriter(eventLoop: req.eventLoop, instanceTag: context.instanceTag)
        let limit = context.settings.maxStreamsPerUser
        guard
            context.inboxHub.subscribe(
                user: userID, lastEventID: lastEventID, expiresAt: subject.expiresAt, limit: limit, stream: stream)
        else {
            stream.finish()
            throw BelfryError(
                .rateLimited,
                "a user may hold \(limit) streams open at once (\(ServerSetting.maxStreamsPerUser.environment)); close one first",
                .retryAfter(seconds: 15))
        }
        let first: String
        do {
            guard
                let counts = try await self.inboxStore.countsIfUserExists(
                    userID: userID, epoch: subject.epoch, on: req.db)
            else {
                throw Request.userGone
            }
            first = String(decoding: try Response.jsonEncoder.encode(counts), as: UTF8.self)
        } catch {
            stream.finish()
            throw error
        }
        var headers = HTTPHeaders()
        headers.replaceOrAdd(name: .contentType, value: "text/event-stream")
        headers.replaceOrAdd(name: .cacheControl, value: "no-cache")
        headers.replaceOrAdd(name: "X-Accel-Buffering", value: "no")
        // The hub's items are written as they come: events published together in one go; the
        // hub's heartbeat finds a client that went away (the write fails), and a stream lives no
        // longer than the token that opened it (it says so and ends, and the client reconnects
        // with a new token). The hub ends every stream at shutdown.
        return Response(status: .ok, headers: headers, body: stream.body(firstCounts: first))
    }
}

extension Request {
    /// The optional `tenant` query parameter of inbox routes: absent means every tenant.
    func tenantFilter(in workspace: WorkspaceConfig) throws -> String? {
        guard let tenant = query[String.self, at: "tenant"] else { return nil }
        guard workspace.tenant(tenant) != nil else {
            throw BelfryError(.tenantNotFound, "no tenant \"\(tenant)\" in this workspace")
        }
        return tenant
    }
}
