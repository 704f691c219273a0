import BelfryCore
import Fluent
import Foundation
import Vapor

/// The browser pages: `/preferences` and `/inbox` (server-rendered, working without JS), the
/// token and link exchange that signs a browser in, the static assets, and the service worker.
/// The pages' scripts call the JSON API with a short-lived page token that reaches only the
/// routes of the page that handed it out.
struct WebController: RouteCollection {
    /// The server's settings and shared parts (the clock, the workspace, the database).
    let context: BelfryContext
    let inboxChanges: InboxChanges
    let inboxStore: InboxStore
    let preferenceChanges: PreferenceChanges
    let preferenceStore: PreferenceStore

    func boot(routes: any RoutesBuilder) throws {
        let pages = routes.grouped(WebErrorMiddleware())
        pages.get("preferences", use: preferences)
        pages.post("preferences", use: savePreferences)
        pages.get("inbox", use: inbox)
        pages.post("inbox", use: changeInbox)
        pages.grouped(RateLimitMiddleware(limiter: context.rateLimiter, auth: context.auth, byAddress: .public)).post(
            "web", "session", use: signIn)
        routes.post("web", "session", "token", use: apiToken)
        pages.post("web", "signout", use: signOut)
        routes.get("web", ":file", use: asset)
        routes.get("sw.js", use: serviceWorker)
    }

    /// How long the user token embedded in a page lives; the page asks for a new one before then.
    static let pageTokenLifetime = 900

    // MARK: Signing in

    /// What a token or a link on a page's address grants: one user, some pages, until a time.
    private struct Grant {
        var user: UserModel
        var pages: [WebLayout.Page]
        /// Seconds since 1970: a session started from it ends no later.
        var until: Int
    }

    /// The grant of `?token=` (a backend's user token: both pages) or `?link=` (a signed link:
    /// its page only) for `page`, or `nil` when the address carries neither.
    private func grant(token: String?, link: String?, page: WebLayout.Page, _ req: Request) async throws -> Grant? {
        guard token != nil || link != nil else { return nil }
        let now = context.now()
        let userID: UUID
        let pages: [WebLayout.Page]
        let until: Int
        if let token {
            let subject: UserTokens.Subject
            do {
                subject = try await context.tokens.verify(token, now: now)
            } catch .expired {
                throw BelfryError(.tokenExpired, "This sign-in token has expired. Ask the app for a new link.")
            } catch {
                throw BelfryError(.invalidToken, "This sign-in token is not valid.")
            }
            guard subject.page == nil else {
                throw BelfryError(.invalidToken, "This token belongs to a page's scripts and signs no one in.")
            }
            (userID, pages, until) = (
                subject.userID, [.preferences, .inbox], Int(subject.expiresAt.timeIntervalSince1970)
            )
        } else {
            guard let link, let parsed = context.webSigner.verify(link, as: WebLink.self), parsed.kind == "link" else {
                throw BelfryError(.invalidLink, "This link is not valid. Ask for a new one.")
            }
            guard parsed.exp > Int(now.timeIntervalSince1970) else {
                throw BelfryError(.linkExpired, "This link has expired. Ask for a new one.")
            }
            guard parsed.page == page.rawValue else {
                throw BelfryError(.invalidLink, "This link is for another page.")
            }
            (userID, pages, until) = (parsed.uid, [page], parsed.exp)
        }
        guard let user = try await UserModel.find(userID, on: req.db) else {
            throw BelfryError(.invalidToken, "The account of this link no longer exists.")
        }
        return Grant(user: user, pages: pages, until: until)
    }

    /// `GET /{page}?token=…` or `?link=…`: asks before signing in. Following a link signs
    /// nobody in by itself, so a link from another site cannot sign a browser in as the
    /// link's owner (login CSRF); a browser already signed in as that user goes straight on.
    private func exchange(_ req: Request, page: WebLayout.Page) async throws -> Response? {
        let token = req.query[String.self, at: "token"]
        let link = req.query[String.self, at: "link"]
        guard token != nil || link != nil else { return nil }
        // Tries at links count against the address, like the sign-in form's.
        if let decision = context.rateLimiter.take(.public, caller: req.clientAddress),
            !decision.allowed
        {
            throw decision.refusal
        }
        guard let grant = try await grant(token: token, link: link, page: page, req) else { return nil }
        let tenant = req.query[String.self, at: "tenant"].flatMap { context.workspace.tenant($0)?.id }
        if let (session, user) = try await req.webSession(context), user.id == grant.user.id,
            session.opens(page, at: context.now())
        {
            return Self.redirect(req, to: page, tenant: tenant)
        }
        let nonce = randomToken(bytes: 16)
        var fields = [("page", page.rawValue), ("_csrf", context.webSigner.csrfToken(nonce: "signin:\(nonce)"))]
        if let token { fields.append(("token", token)) } else if let link { fields.append(("link", link)) }
        if let tenant { fields.append(("tenant", tenant)) }
        let response = WebResponse.html(
            WebResponse.signInPage(page: page, userName: grant.user.externalID, fields: fields))
        WebResponse.secure(response)
        response.cookies[WebSignIn.cookieName] = HTTPCookies.Value(
            string: nonce, maxAge: WebSignIn.lifetime, path: "/web/session", isSecure: true, isHTTPOnly: true,
            sameSite: .strict)
        return response
    }

    /// `POST /web/session`: the form of the "continue as …?" page. Starts (or adds the page to)
    /// the browser's session, never for longer than the token or link allows.
    @Sendable func signIn(req: Request) async throws -> Response {
        let form = try WebForm.parse(req)
        guard let page = form["page"].flatMap(WebLayout.Page.init(rawValue:)) else {
            throw BelfryError.badRequest("A sign-in names its page: preferences or inbox.")
        }
        guard let nonce = req.cookies[WebSignIn.cookieName]?.string,
            context.webSigner.checkCSRF(form["_csrf"], nonce: "signin:\(nonce)")
        else {
            throw BelfryError(
                .csrfFailed, "This sign-in did not start on this site, or has expired. Open your link again.")
        }
        guard let grant = try await grant(token: form["token"], link: form["link"], page: page, req) else {
            throw BelfryError(.invalidLink, "This sign-in carries no token or link. Open your link again.")
        }
        let now = context.now()
        let existing = try await req.webSession(context)?.0
        let session = try context.webSigner.session(
            for: grant.user, pages: grant.pages, until: grant.until, now: now, adding: existing)
        let response = Self.redirect(
            req, to: page, tenant: form["tenant"].flatMap { context.workspace.tenant($0)?.id })
        response.cookies[WebSession.cookieName] = try req.sessionCookie(session, context)
        response.cookies[WebSignIn.cookieName] = HTTPCookies.Value(
            string: "", expires: Date(timeIntervalSince1970: 0), maxAge: 0, path: "/web/session", isSecure: true,
            isHTTPOnly: true, sameSite: .strict)
        req.logger.info(
            "web session started",
            metadata: [
                "belfry.user": "\(grant.user.externalID)",
                "belfry.pages": "\(grant.pages.map(\.rawValue).joined(separator: ","))",
            ])
        return response
    }

    private static func redirect(_ req: Request, to page: WebLayout.Page, tenant: String?) -> Response {
        var location = "/\(page.rawValue)"
        if let tenant, let encoded = tenant.addingPercentEncoding(withAllowedCharacters: .alphanumerics) {
            location += "?tenant=\(encoded)"
        }
        let response = req.redirect(to: location, redirectType: .normal)
        WebResponse.secure(response)
        return response
    }

    /// The signed-in session, if it opens `page`, or a page saying how to sign in.
    private func requireSession(_ req: Request, page: WebLayout.Page) async throws -> (WebSession, UserModel) {
        guard let signedIn = try await req.webSession(context) else {
            throw BelfryError(.notSignedIn, "You are not signed in. Open this page from the link in your app or email.")
        }
        guard signedIn.0.opens(page, at: context.now()) else {
            throw BelfryError(
                .notSignedIn,
                "Your link opened another page only. Open your \(page.title) from the link in your app or email.")
        }
        return signedIn
    }

    /// A session for `page` and a matching CSRF token (form field `_csrf` or header `X-CSRF-Token`), for every change.
    private func requireSessionForChange(
        _ req: Request, page: WebLayout.Page, form: [String: String] = [:]
    ) async throws -> (WebSession, UserModel) {
        let (session, user) = try await requireSession(req, page: page)
        let candidate = form["_csrf"] ?? req.headers.first(name: "X-CSRF-Token")
        guard context.webSigner.checkCSRF(candidate, for: session) else {
            throw BelfryError(
                .csrfFailed, "This form has expired or did not come from this site. Reload the page and try again.")
        }
        return (session, user)
    }

    /// A token for `page`'s scripts: it reaches only that page's routes, ends with the session
    /// (and with "sign out everywhere"), and lives at most `pageTokenLifetime`.
    private func pageToken(
        _ req: Request, page: WebLayout.Page, session: WebSession, user: UserModel
    ) async throws -> UserTokens.Minted {
        let now = context.now()
        return try await context.tokens.mint(
            userID: try user.requireID(), externalID: user.externalID, now: now,
            lifetime: min(Self.pageTokenLifetime, session.remaining(page, at: now)), page: page,
            epoch: user.sessionEpoch)
    }

    private func layout(
        _ req: Request, page: WebLayout.Page, title: String, session: WebSession, user: UserModel, scripts: [String]
    ) async throws -> WebLayout {
        let counts = try await self.inboxStore.counts(userID: try user.requireID(), tenant: nil, on: req.db)
        let token = try await pageToken(req, page: page, session: session, user: user)
        return WebLayout(
            page: page, title: title, userName: user.externalID, unread: counts.unread,
            csrf: context.webSigner.csrfToken(for: session), apiToken: token.token, scripts: scripts)
    }

    /// Ends this browser's session: the cookie is cleared and a page says so. The page's script
    /// has already unsubscribed the browser from push, so that a shared computer stops getting
    /// the user's notifications.
    @Sendable func signOut(req: Request) async throws -> Response {
        let form = try WebForm.parse(req)
        guard let page = form["page"].flatMap(WebLayout.Page.init(rawValue:)) else {
            throw BelfryError.badRequest("This form has no page to sign out of. Reload the page and try again.")
        }
        let (_, user) = try await requireSessionForChange(req, page: page, form: form)
        req.logger.info("signed out of the web pages", metadata: ["belfry.user": "\(user.externalID)"])
        let response = WebResponse.html(
            WebResponse.standalone(title: "Signed out", kind: "signed-out-page") {
                el("p") { "You are signed out on this browser. Open a link from the app or an email to come back." }
            })
        response.cookies[WebSession.cookieName] = HTTPCookies.Value(
            string: "", expires: Date(timeIntervalSince1970: 0), maxAge: 0, path: "/", isSecure: true,
            isHTTPOnly: true, sameSite: .lax)
        return response
    }

    /// `POST /web/session/token?page=…` (session cookie and `X-CSRF-Token`): a fresh token for
    /// the page's scripts, reaching that page's routes only.
    @Sendable func apiToken(req: Request) async throws -> Response {
        guard let page = req.query[String.self, at: "page"].flatMap(WebLayout.Page.init(rawValue:)) else {
            throw BelfryError.badRequest("Name the page the token is for: ?page=preferences or ?page=inbox.")
        }
        let (session, user) = try await requireSessionForChange(req, page: page)
        let minted = try await pageToken(req, page: page, session: session, user: user)
        let response = try Response.json(TokenGrant(token: minted.token, expiresAt: minted.expiresAt))
        response.headers.replaceOrAdd(name: .cacheControl, value: "no-store")
        return response
    }

    // MARK: Preferences

    @Sendable func preferences(req: Request) async throws -> Response {
        if let exchanged = try await exchange(req, page: .preferences) { return exchanged }
        let (session, user) = try await requireSession(req, page: .preferences)
        let flash: PreferenceCenterPage.Flash? =
            switch req.query[String.self, at: "saved"] {
            case "tenant": .init(text: "Saved.", isError: false)
            case "all": .init(text: "Saved for all your sites.", isError: false)
            default: nil
            }
        return try await renderPreferences(
            req, session: session, user: user, tenant: try req.webTenant(in: context.workspace), flash: flash)
    }

    private func renderPreferences(
        _ req: Request, session: WebSession, user: UserModel, tenant: String, flash: PreferenceCenterPage.Flash?,
        status: HTTPStatus = .ok
    ) async throws -> Response {
        let view = try await self.preferenceStore.view(
            userID: try user.requireID(), scope: .tenant(tenant), on: req.db)
        let page = PreferenceCenterPage(
            workspace: context.workspace, data: view.data.showing(context.settings.channelsShownToUsers),
            tenant: tenant, etag: view.etag,
            userTenants: try await user.tenantIDs(on: req.db), flash: flash,
            csrf: context.webSigner.csrfToken(for: session)
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
        let (session, user) = try await requireSessionForChange(req, page: .preferences, form: form)
        let tenant = try req.webTenant(form["tenant"], in: context.workspace)
        let userID = try user.requireID()
        let store = self.preferenceStore
        let current = try await store.view(userID: userID, scope: .tenant(tenant), on: req.db)
        let everywhere = form["apply"] == "all"
        // The page showed only some channels: the others are not in the form, and stay as they are.
        let changes = Self.changes(
            from: form, against: current.data.showing(context.settings.channelsShownToUsers), all: everywhere)
        var scopes: [PreferenceScope] = [.tenant(tenant)]
        if everywhere {
            scopes += try await user.tenantIDs(on: req.db).filter { $0 != tenant }.map(PreferenceScope.tenant)
            scopes.append(.userDefaults)
        }
        if !changes.isEmpty {
            let expected = form["etag"].map { [PreferenceScope.tenant(tenant): $0] } ?? [:]
            do {
                _ = try await self.preferenceChanges.change(
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
    /// editable item (other sites may differ from the one shown). Items users cannot change are
    /// never sent, nor the channels of a category that was off: the page showed them disabled.
    static func changes(from form: [String: String], against current: PreferenceData, all: Bool) -> [PreferenceChange] {
        var changes: [PreferenceChange] = []
        for category in (current.sections ?? []).flatMap({ $0.subcategories ?? [] }) {
            if category.isEditable {
                let wanted: PreferenceOptions =
                    form[PreferenceCenterPage.categoryField(category.category)] == nil ? .optOut : .optIn
                if all || wanted != category.preference { changes.append(.category(category.category, wanted)) }
            }
            for channel in category.channels ?? [] where channel.isEditable && category.preference == .optIn {
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
        let (session, user) = try await requireSession(req, page: .inbox)
        let filter = NotificationCenterPage.Filter(rawValue: req.query[String.self, at: "status"] ?? "all") ?? .all
        var storeFilter = InboxStore.Filter()
        storeFilter.status =
            switch filter {
            case .all: .all
            case .unread: .unread
            case .archived: .archived
            }
        let cursor = req.query[String.self, at: "cursor"].flatMap(InboxStore.parseCursor)
        let page = try await self.inboxStore.page(
            userID: try user.requireID(), filter: storeFilter, limit: 20, after: cursor, on: req.db)
        let layout = try await layout(
            req, page: .inbox, title: "Inbox", session: session, user: user, scripts: ["inbox.js"])
        let view = NotificationCenterPage(
            workspace: context.workspace, page: page, filter: filter, csrf: layout.csrf)
        return WebResponse.html(view.render(layout: layout))
    }

    /// The no-JS inbox buttons: `op` is `read`, `unread`, `archive`, `unarchive`, `read-all`
    /// or `action:<action id>`, with the notification's `id`.
    @Sendable func changeInbox(req: Request) async throws -> Response {
        let form = try WebForm.parse(req)
        let (_, user) = try await requireSessionForChange(req, page: .inbox, form: form)
        let userID = try user.requireID()
        let changes = self.inboxChanges
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
    func webTenant(_ given: String? = nil, in workspace: WorkspaceConfig) throws -> String {
        let id = given ?? query[String.self, at: "tenant"] ?? workspace.defaultTenant
        guard workspace.tenant(id) != nil else {
            throw BelfryError(.tenantNotFound, "There is no site \"\(id)\" here.")
        }
        return id
    }
}
