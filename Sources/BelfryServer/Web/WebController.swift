import BelfryCore
import Fluent
import Foundation
import Vapor

/// The browser pages: `/preferences` and `/inbox` (server-rendered, working without JS), the
/// token and link exchange that signs a browser in, the static assets, and the service worker.
/// The pages' scripts call the JSON API with a short-lived user token the page hands them.
struct WebController: RouteCollection {
    func boot(routes: any RoutesBuilder) throws {
        let pages = routes.grouped(WebErrorMiddleware())
        pages.get("preferences", use: preferences)
        pages.post("preferences", use: savePreferences)
        pages.get("inbox", use: inbox)
        pages.post("inbox", use: changeInbox)
        routes.post("web", "session", "token", use: apiToken)
        routes.get("web", ":file", use: asset)
        routes.get("sw.js", use: serviceWorker)
    }

    /// How long the user token embedded in a page lives; the page asks for a new one before then.
    static let pageTokenLifetime = 900

    // MARK: Signing in

    /// Trades `?token=` (a user token) or `?link=` (a signed one-click link) for a session cookie,
    /// and sends the browser on to the same page without the credential in its address.
    private func exchange(_ req: Request, page: WebLayout.Page) async throws -> Response? {
        let token = req.query[String.self, at: "token"]
        let link = req.query[String.self, at: "link"]
        guard token != nil || link != nil else { return nil }
        let now = req.belfry.now()
        let userID: UUID
        if let token {
            do {
                userID = try await req.belfry.tokens.verify(token, now: now).userID
            } catch .expired {
                throw BelfryError(.tokenExpired, "This sign-in token has expired. Ask the app for a new link.")
            } catch {
                throw BelfryError(.invalidToken, "This sign-in token is not valid.")
            }
        } else {
            guard let link, let parsed = req.webSigner.verify(link, as: WebLink.self), parsed.kind == "link" else {
                throw BelfryError(.invalidLink, "This link is not valid. Ask for a new one.")
            }
            guard parsed.exp > Int(now.timeIntervalSince1970) else {
                throw BelfryError(.linkExpired, "This link has expired. Ask for a new one.")
            }
            guard parsed.page == page.rawValue else {
                throw BelfryError(.invalidLink, "This link is for another page.")
            }
            userID = parsed.uid
        }
        guard let user = try await UserModel.find(userID, on: req.db) else {
            throw BelfryError(.invalidToken, "The account of this link no longer exists.")
        }
        let session = req.webSigner.newSession(userID: try user.requireID(), externalID: user.externalID, now: now)
        var location = "/\(page.rawValue)"
        if let tenant = req.query[String.self, at: "tenant"], req.belfry.workspace.tenant(tenant) != nil {
            location += "?tenant=\(tenant)"
        }
        let response = req.redirect(to: location, redirectType: .normal)
        WebResponse.secure(response)
        response.cookies[WebSession.cookieName] = try req.sessionCookie(session)
        req.logger.info(
            "web session started", metadata: ["belfry.user": "\(user.externalID)", "belfry.page": "\(page.rawValue)"])
        return response
    }

    /// The signed-in session, or a page saying how to sign in.
    private func requireSession(_ req: Request) async throws -> (WebSession, UserModel) {
        guard let signedIn = try await req.webSession() else {
            throw BelfryError(.notSignedIn, "You are not signed in. Open this page from the link in your app or email.")
        }
        return signedIn
    }

    /// A session and a matching CSRF token (form field `_csrf` or header `X-CSRF-Token`), for every change.
    private func requireSessionForChange(
        _ req: Request, form: [String: String] = [:]
    ) async throws -> (
        WebSession, UserModel
    ) {
        let (session, user) = try await requireSession(req)
        let candidate = form["_csrf"] ?? req.headers.first(name: "X-CSRF-Token")
        guard req.webSigner.checkCSRF(candidate, for: session) else {
            throw BelfryError(
                .csrfFailed, "This form has expired or did not come from this site. Reload the page and try again.")
        }
        return (session, user)
    }

    private func layout(
        _ req: Request, page: WebLayout.Page, title: String, session: WebSession, user: UserModel, scripts: [String]
    ) async throws -> WebLayout {
        let context = req.belfry
        let userID = try user.requireID()
        let counts = try await context.inboxStore.counts(userID: userID, tenant: nil, on: req.db)
        let token = try await context.tokens.mint(
            userID: userID, externalID: user.externalID, now: context.now(),
            lifetime: min(Self.pageTokenLifetime, context.tokens.lifetime))
        return WebLayout(
            page: page, title: title, userName: user.externalID, unread: counts.unread,
            csrf: req.webSigner.csrfToken(for: session), apiToken: token.token, scripts: scripts)
    }

    /// `POST /web/session/token` (session cookie and `X-CSRF-Token`): a fresh user token for the page's scripts.
    @Sendable func apiToken(req: Request) async throws -> Response {
        let (_, user) = try await requireSessionForChange(req)
        let context = req.belfry
        let minted = try await context.tokens.mint(
            userID: try user.requireID(), externalID: user.externalID, now: context.now(),
            lifetime: min(Self.pageTokenLifetime, context.tokens.lifetime))
        let response = try Response.json(TokenGrant(token: minted.token, expiresAt: minted.expiresAt))
        response.headers.replaceOrAdd(name: .cacheControl, value: "no-store")
        return response
    }

    // MARK: Preferences

    @Sendable func preferences(req: Request) async throws -> Response {
        if let exchanged = try await exchange(req, page: .preferences) { return exchanged }
        let (session, user) = try await requireSession(req)
        let flash: PreferenceCenterPage.Flash? =
            switch req.query[String.self, at: "saved"] {
            case "tenant": .init(text: "Saved.", isError: false)
            case "all": .init(text: "Saved for all your sites.", isError: false)
            default: nil
            }
        return try await renderPreferences(req, session: session, user: user, tenant: try req.webTenant(), flash: flash)
    }

    private func renderPreferences(
        _ req: Request, session: WebSession, user: UserModel, tenant: String, flash: PreferenceCenterPage.Flash?,
        status: HTTPStatus = .ok
    ) async throws -> Response {
        let view = try await req.belfry.preferenceStore.view(
            userID: try user.requireID(), scope: .tenant(tenant), on: req.db)
        let page = PreferenceCenterPage(
            workspace: req.belfry.workspace, data: view.data, tenant: tenant, etag: view.etag,
            userTenants: try await user.tenantIDs(on: req.db), flash: flash, csrf: req.webSigner.csrfToken(for: session)
        )
        let layout = try await layout(
            req, page: .preferences, title: "Notification preferences", session: session, user: user,
            scripts: ["preferences.js", "push.js"])
        return WebResponse.html(page.render(layout: layout), status: status)
    }

    /// The no-JS form: the whole page's state in one post. Unchecked boxes are absent from a
    /// form post, so every editable item of the page is compared with what the form holds.
    @Sendable func savePreferences(req: Request) async throws -> Response {
        let form = try WebForm.parse(req)
        let (session, user) = try await requireSessionForChange(req, form: form)
        let tenant = try req.webTenant(form["tenant"])
        let userID = try user.requireID()
        let store = req.belfry.preferenceStore
        let current = try await store.view(userID: userID, scope: .tenant(tenant), on: req.db)
        let everywhere = form["apply"] == "all"
        let changes = Self.changes(from: form, against: current.data, all: everywhere)
        var scopes: [PreferenceScope] = [.tenant(tenant)]
        if everywhere {
            scopes += try await user.tenantIDs(on: req.db).filter { $0 != tenant }.map(PreferenceScope.tenant)
            scopes.append(.userDefaults)
        }
        if !changes.isEmpty {
            let expected = form["etag"].map { [PreferenceScope.tenant(tenant): $0] } ?? [:]
            do {
                _ = try await req.belfry.preferenceChanges.change(
                    userID: userID, scopes: scopes, changes: changes, expected: expected, on: req.db)
            } catch let error as BelfryError where error.code == .preconditionFailed {
                return try await renderPreferences(
                    req, session: session, user: user, tenant: tenant,
                    flash: .init(
                        text:
                            "Your preferences changed in another window, so nothing was saved. Here they are now: make your change again.",
                        isError: true),
                    status: .conflict)
            }
            req.logger.info(
                "preferences changed",
                metadata: [
                    "belfry.user": "\(user.externalID)", "belfry.scopes": "\(scopes.map(\.key).joined(separator: ","))",
                    "belfry.changes": "\(changes.count)", "belfry.via": "web form",
                ])
        }
        let response = req.redirect(
            to: "/preferences?tenant=\(tenant)&saved=\(everywhere ? "all" : "tenant")", redirectType: .normal)
        WebResponse.secure(response)
        return response
    }

    /// The changes a posted form makes to `current`: only what differs, or, with `all`, every
    /// editable item (other sites may differ from the one shown). Items users cannot change are never sent.
    static func changes(from form: [String: String], against current: PreferenceData, all: Bool) -> [PreferenceChange] {
        var changes: [PreferenceChange] = []
        for category in (current.sections ?? []).flatMap({ $0.subcategories ?? [] }) {
            if category.isEditable {
                let wanted: PreferenceOptions =
                    form[PreferenceCenterPage.categoryField(category.category)] == nil ? .optOut : .optIn
                if all || wanted != category.preference { changes.append(.category(category.category, wanted)) }
            }
            for channel in category.channels ?? [] where channel.isEditable {
                let wanted: PreferenceOptions =
                    form[PreferenceCenterPage.channelField(category.category, channel.channel)] == nil
                    ? .optOut : .optIn
                if all || wanted != channel.preference {
                    changes.append(.channelInCategory(channel: channel.channel, category: category.category, wanted))
                }
            }
        }
        for channel in current.channelPreferences ?? [] {
            guard let text = form[PreferenceCenterPage.overallField(channel.channel)],
                let wanted = ChannelLevelPreferenceOptions(rawValue: text)
            else { continue }
            if all || (wanted == .required) != channel.isRestricted {
                changes.append(.overallChannel(channel.channel, wanted))
            }
        }
        return changes
    }

    // MARK: Inbox

    /// Also for another user's notification, which answers exactly like one that does not exist.
    static let noSuchNotification = BelfryError(.notificationNotFound, "There is no such notification in your inbox.")

    @Sendable func inbox(req: Request) async throws -> Response {
        if let exchanged = try await exchange(req, page: .inbox) { return exchanged }
        let (session, user) = try await requireSession(req)
        let filter = NotificationCenterPage.Filter(rawValue: req.query[String.self, at: "status"] ?? "all") ?? .all
        var storeFilter = InboxStore.Filter()
        storeFilter.status =
            switch filter {
            case .all: .all
            case .unread: .unread
            case .archived: .archived
            }
        let cursor = req.query[String.self, at: "cursor"].flatMap(InboxStore.parseCursor)
        let page = try await req.belfry.inboxStore.page(
            userID: try user.requireID(), filter: storeFilter, limit: 20, after: cursor, on: req.db)
        let layout = try await layout(
            req, page: .inbox, title: "Inbox", session: session, user: user, scripts: ["inbox.js"])
        let view = NotificationCenterPage(
            workspace: req.belfry.workspace, page: page, filter: filter, csrf: layout.csrf)
        return WebResponse.html(view.render(layout: layout))
    }

    /// The no-JS inbox buttons: `op` is `read`, `unread`, `archive`, `unarchive`, `read-all`
    /// or `action:<action id>`, with the notification's `id`.
    @Sendable func changeInbox(req: Request) async throws -> Response {
        let form = try WebForm.parse(req)
        let (_, user) = try await requireSessionForChange(req, form: form)
        let userID = try user.requireID()
        let changes = req.belfry.inboxChanges
        let op = form["op"] ?? ""
        if op == "read-all" {
            _ = try await changes.markAll(.read, userID: userID, tenant: nil, category: nil, on: req.db)
        } else {
            guard let id = form["id"].flatMap(UUID.init(uuidString:)) else {
                throw Self.noSuchNotification
            }
            if op.hasPrefix("action:") {
                switch try await changes.respond(to: id, action: String(op.dropFirst(7)), userID: userID, on: req.db) {
                case .notFound:
                    throw Self.noSuchNotification
                case .unknownAction:
                    throw BelfryError(.actionNotFound, "This notification has no such action.")
                case .recorded:
                    break
                }
            } else {
                guard let mark = InboxStore.Mark(rawValue: op), mark != .seen else {
                    throw BelfryError.badRequest("Unknown inbox operation.")
                }
                guard try await changes.mark(id, mark, userID: userID, on: req.db) != nil else {
                    throw Self.noSuchNotification
                }
            }
        }
        let response = req.redirect(to: "/inbox", redirectType: .normal)
        WebResponse.secure(response)
        return response
    }

    // MARK: Assets

    @Sendable func asset(req: Request) async throws -> Response {
        guard let name = req.parameters.get("file"), let asset = WebAssets.file(name), name != "sw.js" else {
            throw BelfryError(.notFound, "no such file")
        }
        return asset.response(for: req)
    }

    /// Served from the root so that its scope covers every page.
    @Sendable func serviceWorker(req: Request) async throws -> Response {
        guard let asset = WebAssets.file("sw.js") else { throw BelfryError(.notFound, "no such file") }
        return asset.response(for: req)
    }
}

extension Request {
    /// `?tenant=` (or a form's tenant) for a page: the workspace default when absent.
    func webTenant(_ given: String? = nil) throws -> String {
        let id = given ?? query[String.self, at: "tenant"] ?? belfry.workspace.defaultTenant
        guard belfry.workspace.tenant(id) != nil else {
            throw BelfryError(.tenantNotFound, "There is no site \"\(id)\" here.")
        }
        return id
    }
}
