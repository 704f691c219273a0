import BelfryCore
import Crypto
import Fluent
import Foundation
import NIOConcurrencyHelpers
import SQLKit
import Vapor

/// An operator signed in to the console with an API key. Kept whole in a signed cookie, like
/// the user pages' sessions, so that every instance sharing the database can read it.
struct ConsoleSession: Codable, Sendable {
    var kind = "console"
    var sid: String
    /// The start of the key's digest: removing the key from the configuration ends its sessions.
    var key: String
    /// Expiry, seconds since 1970.
    var exp: Int
    /// The key's console epoch when it began: signing out raises it and ends every session of the key.
    var ep: Int
    /// The key's name, for the audit log: `environment` for the configuration's keys.
    var name: String

    var actor: String { "console:\(name)" }

    static let cookieName = "belfry_console"
    static let lifetime = 8 * 3600
}

/// `/admin`: the operator console. Recent events with their fan-out and outcomes, an event's
/// deliveries with every attempt, dead deliveries with a retry button, the last hour's queue
/// depth and throughput as charts, and a live feed that keeps the overview current.
struct ConsoleController: RouteCollection {
    /// The server's settings and shared parts (the clock, the workspace, the database).
    let context: BelfryContext
    let auditLog: AuditLog
    let consoleData: ConsoleData
    let deadLetters: DeadLetters
    let devices: DeviceStore
    let eventIntake: EventIntake
    let eventStatuses: EventStatusQuery
    let preferenceStore: PreferenceStore

    func boot(routes: any RoutesBuilder) throws {
        let console = routes.grouped("admin").grouped(WebErrorMiddleware())
        console.get(use: overview)
        console.grouped(RateLimitMiddleware(limiter: context.rateLimiter, auth: context.auth, byAddress: .signin)).post(
            "session", use: signIn)
        console.post("signout", use: signOut)
        console.get("events", use: eventSearch)
        console.get("events", ":event_id", use: event)
        console.get("users", use: userSearch)
        console.get("users", ":user_id", use: user)
        console.post("events", ":event_id", "retry", use: retry)
        console.post("deliveries", ":delivery_id", "retry", use: retryDelivery)
        console.post("status-events", "retry", use: retryStatusEvents)
        console.get("live", use: live)
        console.get("keys", use: keys)
        console.post("keys", "revoke", use: revokeKey)
        console.get("audit", use: audit)
        console.get("templates", use: templates)
        console.post("test", use: sendTest)
    }

    /// Seconds between the live feed's reads.
    static let liveInterval: Duration = .seconds(2)

    // MARK: Signing in

    /// The key a console sign-in offers, if it is an admin key: one of the configuration's, or
    /// a stored key with the admin scope.
    private func adminGrant(_ key: String, _ req: Request) async throws -> KeyGrant? {
        guard let grant = try await req.apiKeyGrant(context.auth, for: key), grant.scope == .admin else { return nil }
        return grant
    }

    @Sendable func signIn(req: Request) async throws -> Response {
        let form = try WebForm.parse(req)
        guard let key = form["api_key"], !key.isEmpty, let grant = try await adminGrant(key, req) else {
            req.logger.warning("console sign-in refused")
            try await self.auditLog.record(
                .consoleSignInFailed, by: "address:\(req.clientAddress)", detail: "not an admin API key", on: req.db)
            return WebResponse.html(
                ConsolePages.signIn(message: "That is not one of this server's admin API keys."), status: .unauthorized)
        }
        let now = Int(context.now().timeIntervalSince1970)
        let fingerprint = grant.fingerprint
        let epoch = try await CredentialEpochs.current(CredentialEpochs.console(fingerprint), on: req.db)
        let session = ConsoleSession(
            sid: randomToken(bytes: 16), key: fingerprint, exp: now + ConsoleSession.lifetime, ep: epoch,
            name: grant.name)
        let response = req.redirect(to: "/admin", redirectType: .normal)
        WebResponse.secure(response)
        response.cookies[ConsoleSession.cookieName] = HTTPCookies.Value(
            string: try context.webSigner.sign(session), maxAge: ConsoleSession.lifetime, path: "/admin",
            isSecure: true, isHTTPOnly: true, sameSite: .strict)
        req.logger.info("console session started")
        try await self.auditLog.record(
            .consoleSignIn, by: session.actor, detail: "key fingerprint \(fingerprint)", on: req.db)
        return response
    }

    @Sendable func signOut(req: Request) async throws -> Response {
        let session = try await requireSessionForChange(req, form: try WebForm.parse(req))
        // Server-side: the cookie may have been copied, and a cleared cookie revokes nothing.
        let credential = CredentialEpochs.console(session.key)
        try await context.database.write(req.db) { db in try await CredentialEpochs.raise(credential, on: db) }
        req.logger.info("console signed out")
        try await self.auditLog.record(.consoleSignOut, by: session.actor, on: req.db)
        let response = req.redirect(to: "/admin", redirectType: .normal)
        WebResponse.secure(response)
        response.cookies[ConsoleSession.cookieName] = HTTPCookies.Value(
            string: "", expires: Date(timeIntervalSince1970: 0), maxAge: 0, path: "/admin", isSecure: true,
            isHTTPOnly: true, sameSite: .strict)
        return response
    }

    /// The signed-in session, if the cookie is valid, unexpired, its key still configured and
    /// not signed out since.
    private func session(_ req: Request) async throws -> ConsoleSession? {
        guard let cookie = req.cookies[ConsoleSession.cookieName]?.string,
            let session = context.webSigner.verify(cookie, as: ConsoleSession.self), session.kind == "console",
            session.exp > Int(context.now().timeIntervalSince1970)
        else { return nil }
        let keyActive =
            if context.apiKeys.has(fingerprint: session.key) { true } else {
                try await context.keyStore.isActive(fingerprint: session.key, on: req.db)
            }
        guard keyActive,
            try await CredentialEpochs.current(CredentialEpochs.console(session.key), on: req.db) == session.ep
        else { return nil }
        return session
    }

    private func requireSession(_ req: Request) async throws -> ConsoleSession {
        guard let session = try await session(req) else {
            throw BelfryError(.notSignedIn, "Sign in to the console at /admin with an API key.")
        }
        return session
    }

    private func requireSessionForChange(_ req: Request, form: [String: String]) async throws -> ConsoleSession {
        let session = try await requireSession(req)
        guard context.webSigner.checkCSRF(form["_csrf"], nonce: session.csrfNonce) else {
            throw BelfryError(
                .csrfFailed, "This form has expired or did not come from this site. Reload the page and try again.")
        }
        return session
    }

    // MARK: Pages

    @Sendable func overview(req: Request) async throws -> Response {
        guard let session = try await session(req) else {
            return WebResponse.html(ConsolePages.signIn(message: nil))
        }
        let data = try await self.consoleData.overview(on: req.db)
        let flash = req.query[Int.self, at: "retried"].map(Self.retried)
        return WebResponse.html(
            ConsolePages.overview(
                data, csrf: context.webSigner.csrfToken(nonce: session.csrfNonce),
                openStreams: context.inboxHub.openStreams,
                flash: flash, categories: context.workspace.categories))
    }

    @Sendable func event(req: Request) async throws -> Response {
        let session = try await requireSession(req)
        let id = try Self.eventID(req)
        guard let detail = try await self.consoleData.event(id, on: req.db) else {
            throw BelfryError(.eventNotFound, "There is no event \(id.uuidString.lowercased()).")
        }
        let flash = req.query[Int.self, at: "retried"].map(Self.retried)
        return WebResponse.html(
            ConsolePages.event(detail, csrf: context.webSigner.csrfToken(nonce: session.csrfNonce), flash: flash))
    }

    /// Queues the event's failed and dead deliveries again, then goes back where the button was.
    @Sendable func retry(req: Request) async throws -> Response {
        let form = try WebForm.parse(req)
        let session = try await requireSessionForChange(req, form: form)
        let id = try Self.eventID(req)
        guard try await self.eventStatuses.exists(id, on: req.db) else {
            throw BelfryError(.eventNotFound, "There is no event \(id.uuidString.lowercased()).")
        }
        let queued = try await self.deadLetters.retry(event: id, on: req.db)
        if queued > 0 { context.deliveryWake() }
        try await self.auditLog.record(
            .deliveriesRetried, by: session.actor, subject: id.uuidString.lowercased(), detail: "\(queued) queued",
            on: req.db)
        req.logger.info(
            "deliveries queued again",
            metadata: ["belfry.event": "\(id)", "belfry.queued": "\(queued)", "belfry.via": "console"])
        let back = form["return"] == "event" ? "/admin/events/\(id.uuidString.lowercased())" : "/admin"
        let response = req.redirect(to: "\(back)?retried=\(queued)", redirectType: .normal)
        WebResponse.secure(response)
        return response
    }

    /// Queues one failed or dead delivery again: the row's Retry button retries that row only.
    @Sendable func retryDelivery(req: Request) async throws -> Response {
        let form = try WebForm.parse(req)
        let session = try await requireSessionForChange(req, form: form)
        let text = req.parameters.get("delivery_id") ?? ""
        guard let id = UUID(uuidString: text),
            let ended = try await req.db.sql.select().column("event_id").from(Tables.deliveries).where("id", .equal, id)
                .first().map({ try $0.decode(column: "event_id", as: UUID.self) }),
            try await self.deadLetters.retry(delivery: id, on: req.db)
        else {
            throw BelfryError(.notFound, "There is no failed or dead delivery \"\(text.prefix(40))\".")
        }
        context.deliveryWake()
        try await self.auditLog.record(
            .deliveriesRetried, by: session.actor, subject: id.uuidString.lowercased(), detail: "1 delivery queued",
            on: req.db)
        let back = form["return"] == "event" ? "/admin/events/\(ended.uuidString.lowercased())" : "/admin"
        let response = req.redirect(to: "\(back)?retried=1", redirectType: .normal)
        WebResponse.secure(response)
        return response
    }

    /// Queues failed and dead status events again: the one the form names, or all of them.
    @Sendable func retryStatusEvents(req: Request) async throws -> Response {
        let form = try WebForm.parse(req)
        let session = try await requireSessionForChange(req, form: form)
        let only: UUID? = try form["id"].map { text in
            guard let id = UUID(uuidString: text) else {
                throw BelfryError(.notFound, "There is no status event \"\(text.prefix(40))\".")
            }
            return id
        }
        let now = context.now()
        let queued = try await context.database.write(req.db) { db in
            let update = db.sql.update(Tables.statusEvents)
                .set("status", to: StatusEventSender.Status.queued.rawValue)
                .set("attempts", to: 0)
                .set("next_attempt_at", to: now)
                .set("updated_at", to: now)
                .where(
                    "status", .in,
                    [StatusEventSender.Status.failed.rawValue, StatusEventSender.Status.dead.rawValue])
            if let only { update.where("id", .equal, only) }
            return try await update.returning("id").all().count
        }
        if only != nil && queued == 0 {
            throw BelfryError(.notFound, "There is no failed or dead status event \(only!.uuidString.lowercased()).")
        }
        context.statusSignal.wake()
        try await self.auditLog.record(
            .deliveriesRetried, by: session.actor, subject: only?.uuidString.lowercased() ?? "status events",
            detail: "\(queued) status events queued", on: req.db)
        let response = req.redirect(to: "/admin?retried=\(queued)", redirectType: .normal)
        WebResponse.secure(response)
        return response
    }

    static let eventsPerPage = 25

    /// Events by id, category and time, newest first, a page at a time.
    @Sendable func eventSearch(req: Request) async throws -> Response {
        let session = try await requireSession(req)
        var filters = ConsolePages.EventFilters()
        if let text = req.query[String.self, at: "id"]?.trimmingCharacters(in: .whitespaces), !text.isEmpty {
            if let id = UUID(uuidString: text), try await self.eventStatuses.exists(id, on: req.db) {
                let response = req.redirect(to: "/admin/events/\(id.uuidString.lowercased())", redirectType: .normal)
                WebResponse.secure(response)
                return response
            }
            filters.notFound = String(text.prefix(40))
        }
        filters.category = req.query[String.self, at: "category"].flatMap { context.workspace.category($0)?.id }
        filters.since = req.query[String.self, at: "since"].flatMap { value in
            ConsolePages.eventSpans.contains { $0.0 == value } ? value : nil
        }
        let span: TimeInterval? =
            switch filters.since {
            case "1h": 3600
            case "24h": 86_400
            case "7d": 7 * 86_400
            default: nil
            }
        let ids = try await self.eventStatuses.search(
            category: filters.category, since: span.map { context.now().addingTimeInterval(-$0) },
            before: req.query[String.self, at: "before"].flatMap(UUID.init(uuidString:)), limit: Self.eventsPerPage,
            on: req.db)
        let statuses = try await self.eventStatuses.statuses(of: ids, on: req.db)
        let events = ids.compactMap { statuses[$0] }
        let older = events.count == Self.eventsPerPage ? events.last.map { $0.id.uuidString.lowercased() } : nil
        return WebResponse.html(
            ConsolePages.eventSearch(
                events, filters: filters, older: older, categories: context.workspace.categories,
                csrf: context.webSigner.csrfToken(nonce: session.csrfNonce)))
    }

    /// The user search: an external id that exists leads to the user's page.
    @Sendable func userSearch(req: Request) async throws -> Response {
        let session = try await requireSession(req)
        var notFound: String?
        if let id = req.query[String.self, at: "id"]?.trimmingCharacters(in: .whitespaces), !id.isEmpty {
            if try await UserModel.query(on: req.db).filter(\.$externalID == id).first() != nil,
                let escaped = id.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed)
            {
                let response = req.redirect(to: "/admin/users/\(escaped)", redirectType: .normal)
                WebResponse.secure(response)
                return response
            }
            notFound = String(id.prefix(64))
        }
        return WebResponse.html(
            ConsolePages.userSearch(notFound: notFound, csrf: context.webSigner.csrfToken(nonce: session.csrfNonce)))
    }

    /// A user's details, devices, preferences per site and messages with their attempts.
    @Sendable func user(req: Request) async throws -> Response {
        let session = try await requireSession(req)
        let id = req.parameters.get("user_id") ?? ""
        guard
            let detail = try await self.consoleData.user(
                id, before: req.query[String.self, at: "before"].flatMap(UUID.init(uuidString:)),
                preferences: self.preferenceStore, devices: self.devices, on: req.db)
        else {
            throw BelfryError(.userNotFound, "There is no user \"\(id.prefix(64))\".")
        }
        return WebResponse.html(
            ConsolePages.user(
                detail, older: detail.older.map { $0.uuidString.lowercased() },
                csrf: context.webSigner.csrfToken(nonce: session.csrfNonce)))
    }

    /// A test notification to one existing user, through the API's intake; then its event page.
    @Sendable func sendTest(req: Request) async throws -> Response {
        let form = try WebForm.parse(req)
        let session = try await requireSessionForChange(req, form: form)
        let user = (form["user"] ?? "").trimmingCharacters(in: .whitespaces)
        // A test never creates a user: a typo would otherwise make one.
        _ = try await UserModel.find(externalID: user, on: req.db)
        let request = EventRequest(
            category: form["category"] ?? "", recipients: [user],
            content: .init(title: form["title"] ?? "", body: form["body"] ?? ""))
        let accepted = try await self.eventIntake.accept(request, on: req.db)
        let id = accepted.id.uuidString.lowercased()
        try await self.auditLog.record(
            .testNotificationSent, by: session.actor, subject: id, detail: "to \(user), \(request.category)",
            on: req.db)
        let response = req.redirect(to: "/admin/events/\(id)", redirectType: .normal)
        WebResponse.secure(response)
        return response
    }

    // MARK: Keys and the audit log

    @Sendable func keys(req: Request) async throws -> Response {
        let session = try await requireSession(req)
        let flash = req.query[String.self, at: "revoked"].map { "The key \"\($0)\" is revoked." }
        return WebResponse.html(
            ConsolePages.keys(
                try await context.keyStore.list(on: req.db),
                csrf: context.webSigner.csrfToken(nonce: session.csrfNonce),
                flash: flash))
    }

    @Sendable func revokeKey(req: Request) async throws -> Response {
        let form = try WebForm.parse(req)
        let session = try await requireSessionForChange(req, form: form)
        let name = form["name"] ?? ""
        guard try await context.keyStore.revoke(name: name, on: req.db) else {
            throw BelfryError(.notFound, "There is no active key named \"\(name.prefix(64))\".")
        }
        try await self.auditLog.record(.keyRevoked, by: session.actor, subject: name, on: req.db)
        let encoded = name.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
        let response = req.redirect(to: "/admin/keys?revoked=\(encoded)", redirectType: .normal)
        WebResponse.secure(response)
        return response
    }

    @Sendable func audit(req: Request) async throws -> Response {
        let session = try await requireSession(req)
        let before = req.query[String.self, at: "before"].flatMap(UUID.init(uuidString:))
        let page = try await self.auditLog.entries(limit: 100, before: before, on: req.db)
        return WebResponse.html(
            ConsolePages.audit(page, csrf: context.webSigner.csrfToken(nonce: session.csrfNonce)))
    }

    /// `GET /admin/templates`: a category's content previewed from sample data in each language.
    @Sendable func templates(req: Request) async throws -> Response {
        let session = try await requireSession(req)
        let workspace = context.workspace
        let categories = workspace.categories.filter { $0.content != nil || $0.batch != nil }
        let chosen = req.query[String.self, at: "category"].flatMap(workspace.category) ?? categories.first
        var form = ConsolePages.TemplatesForm(
            categories: categories, chosen: chosen, data: "{}",
            locale: (req.query[String.self, at: "locale"] ?? "").trimmingCharacters(in: .whitespaces),
            count: min(max(req.query[Int.self, at: "count"] ?? 1, 1), 1_000))
        if let chosen {
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            let sample =
                (try? encoder.encode(JSONValue.object(TemplatePreview.sampleData(for: chosen)))) ?? Data("{}".utf8)
            form.data = req.query[String.self, at: "data"] ?? String(decoding: sample, as: UTF8.self)
            if case .object(let data)? = try? JSONDecoder().decode(JSONValue.self, from: Data(form.data.utf8)) {
                do {
                    form.preview = try TemplatePreview(
                        chosen, data: data, tenant: workspace.defaultTenant,
                        locale: form.locale.isEmpty ? nil : form.locale, count: form.count, workspace: workspace)
                } catch {
                    form.problem = "The templates do not render: \(error)"
                }
            } else {
                form.problem = "The sample data must be a JSON object, such as {\"page\": \"Glocke\"}."
            }
        }
        return WebResponse.html(
            ConsolePages.templates(form, csrf: context.webSigner.csrfToken(nonce: session.csrfNonce)))
    }

    private static func retried(_ count: Int) -> String {
        count == 1 ? "1 delivery queued again." : "\(count) deliveries queued again."
    }

    private static func eventID(_ req: Request) throws -> UUID {
        let text = req.parameters.get("event_id") ?? ""
        guard let id = UUID(uuidString: text) else {
            throw BelfryError(.eventNotFound, "\"\(text)\" is not an event id.")
        }
        return id
    }

    // MARK: The live feed

    /// `GET /admin/live`: server-sent events. Every two seconds the overview is read again, and
    /// an `overview` event carries the sections that changed, as HTML by element id.
    @Sendable func live(req: Request) async throws -> Response {
        let session = try await requireSession(req)
        let csrf = context.webSigner.csrfToken(nonce: session.csrfNonce)
        let db = req.db
        var headers = HTTPHeaders()
        headers.replaceOrAdd(name: .contentType, value: "text/event-stream")
        headers.replaceOrAdd(name: .cacheControl, value: "no-cache")
        headers.replaceOrAdd(name: "X-Accel-Buffering", value: "no")
        let body = Response.Body(asyncStream: { writer in
            var sent: [String: String] = [:]
            var quiet = Duration.zero
            try? await writer.writeBuffer(ByteBuffer(string: "retry: 3000\n\n"))
            // Ends when the client goes (a write fails), the server shuts down, or the session expires.
            while !context.shutdown.isShuttingDown,
                session.exp > Int(context.now().timeIntervalSince1970)
            {
                do {
                    let data = try await self.consoleData.overview(on: db)
                    var changed: [String: String] = [:]
                    for (id, html) in ConsolePages.sections(data, csrf: csrf, openStreams: context.inboxHub.openStreams)
                    {
                        let text = html.rendered
                        if sent[id] != text { changed[id] = text }
                    }
                    if !changed.isEmpty {
                        let json = String(decoding: try JSONEncoder().encode(changed), as: UTF8.self)
                        try await writer.writeBuffer(ByteBuffer(string: "event: overview\ndata: \(json)\n\n"))
                        sent.merge(changed) { _, new in new }
                        quiet = .zero
                    } else if quiet >= .seconds(14) {
                        try await writer.writeBuffer(ByteBuffer(string: ": heartbeat\n\n"))
                        quiet = .zero
                    }
                } catch {
                    break
                }
                try? await Task.sleep(for: Self.liveInterval)
                quiet += Self.liveInterval
            }
            try? await writer.write(.end)
        })
        return Response(status: .ok, headers: headers, body: body)
    }
}

extension ConsoleSession {
    /// What the session's CSRF token derives from; never the same as a user page's.
    var csrfNonce: String { "console:\(sid)" }
}

/// Set once the application starts shutting down, for responses that would otherwise run on.
final class ShutdownFlag: Sendable {
    private let flag = NIOLockedValueBox(false)

    var isShuttingDown: Bool { flag.withLockedValue { $0 } }

    func set() {
        flag.withLockedValue { $0 = true }
    }
}
