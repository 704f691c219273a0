import BelfryCore
import BelfryTestServers
import BelfryTestSupport
import Crypto
import Fluent
import Foundation
import Testing
import Vapor
import VaporTesting

@testable import BelfryServer

@Suite("Web pages: HTML, sessions, CSRF and signed links")
struct WebPagesTests {
    /// A browser in a test: the session cookie it holds, sent back on each request.
    struct Browser {
        let app: Application
        var cookie: String?

        func get(_ path: String) async throws -> TestingHTTPResponse {
            try await app.send(.GET, path, headers: cookie.map { ["Cookie": "\(WebSession.cookieName)=\($0)"] } ?? [:])
        }

        func post(
            _ path: String, form: [(String, String)], cookies: [String: String] = [:]
        ) async throws -> TestingHTTPResponse {
            var headers: HTTPHeaders = ["Content-Type": "application/x-www-form-urlencoded"]
            var all = cookies
            if let cookie { all[WebSession.cookieName] = cookie }
            if !all.isEmpty {
                headers.add(name: "Cookie", value: all.map { "\($0.key)=\($0.value)" }.joined(separator: "; "))
            }
            let body = form.map { "\(Self.encode($0.0))=\(Self.encode($0.1))" }.joined(separator: "&")
            return try await app.testing().sendRequest(.POST, path, headers: headers, body: ByteBuffer(string: body))
        }

        static func encode(_ text: String) -> String {
            text.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? text
        }

        /// Signs in with a user token, as a link from an app would.
        static func signIn(_ app: Application, token: String, page: String = "preferences") async throws -> Browser {
            try await Browser(app: app).follow("/\(page)?token=\(token)")
        }

        /// Opens an address with a token or link and answers its "continue as …?" page as a
        /// person would: the browser it returns holds the session that started.
        func follow(_ address: String) async throws -> Browser {
            let asked = try await get(address)
            #expect(asked.status == .ok)
            #expect(WebPagesTests.sessionCookie(asked) == nil, "following a link signs no one in by itself")
            let response = try await post(
                "/web/session", form: WebPagesTests.hiddenFields(in: asked),
                cookies: [WebSignIn.cookieName: try #require(WebPagesTests.cookie(WebSignIn.cookieName, in: asked))])
            #expect(response.status == .seeOther)
            // Unwrapped first: as the argument of an optional parameter, #require would check nothing.
            let cookie: String = try #require(sessionCookie(response), "a session cookie")
            return Browser(app: app, cookie: cookie)
        }
    }

    static func sessionCookie(_ response: TestingHTTPResponse) -> String? {
        cookie(WebSession.cookieName, in: response)
    }

    /// The value a response sets for the cookie `name`, if it sets one that is not being cleared.
    static func cookie(_ name: String, in response: TestingHTTPResponse) -> String? {
        response.headers[.setCookie].lazy.compactMap { header -> String? in
            guard header.hasPrefix("\(name)=") else { return nil }
            let value = String(header.dropFirst(name.count + 1).prefix { $0 != ";" })
            return value.isEmpty ? nil : value
        }.first
    }

    /// The hidden fields of a page's form, as a browser would post them.
    static func hiddenFields(in page: TestingHTTPResponse) -> [(String, String)] {
        page.body.string.matches(of: /<input type="hidden" name="([^"]+)" value="([^"]*)">/).map {
            (String($0.1), String($0.2))
        }
    }

    static func csrf(in page: TestingHTTPResponse) throws -> String {
        let text = page.body.string
        let marker = #"<meta name="belfry-csrf" content=""#
        let start = try #require(text.range(of: marker)).upperBound
        return String(text[start...].prefix { $0 != "\"" })
    }

    static func userID(_ app: Application, _ externalID: String) async throws -> UUID {
        try #require(try await UserModel.query(on: app.db).filter(\.$externalID == externalID).first()).requireID()
    }

    @Test("the HTML builder escapes text and attribute values")
    func escaping() {
        let html = el("p", .class(#"a"b<c>'d"#), .flag("hidden"), .id(nil)) {
            "<script>alert('x')</script> & more"
            void("br")
        }
        #expect(
            html.rendered
                == #"<p class="a&quot;b&lt;c&gt;&#39;d" hidden>&lt;script&gt;alert('x')&lt;/script&gt; &amp; more<br></p>"#
        )
        #expect(HTML.void("input", [.flag("checked", false), .value("1")]).rendered == #"<input value="1">"#)
    }

    /// Email set up (to a relay that is never reached): the pages show channels only when the
    /// server can deliver them.
    static func email(_ settings: inout ServerConfiguration) {
        settings.email = .init(smtp: try! SMTPLocation.parse("smtp://127.0.0.1:9?tls=none").get(), from: "a@b.example")
    }

    @Test("a user token asks first, then becomes a Secure, HttpOnly, SameSite=Lax cookie and leaves the address")
    func tokenExchange() async throws {
        let fcm = try await FCMTestServer()
        defer { Task { await fcm.shutdown() } }
        try await withBelfry(.sqlite) { settings in
            settings.fcm = .init(serviceAccountJSON: fcm.serviceAccountJSON, url: fcm.url)
            settings.apns = .init(
                keyPEM: P256.Signing.PrivateKey().pemRepresentation, keyID: "ABCDE12345", teamID: "TEAM123456")
        } _: { app in
            let token = try await app.userToken("ada", tenants: ["enwiki", "dewiki"])
            let asked = try await app.send(.GET, "/preferences?token=\(token)&tenant=dewiki")
            #expect(asked.status == .ok)
            #expect(asked.headers.first(name: "Referrer-Policy") == "no-referrer")
            #expect(asked.body.string.contains("Continue as ada?"))
            #expect(Self.sessionCookie(asked) == nil)
            let nonceCookie = try #require(asked.headers[.setCookie].first { $0.hasPrefix(WebSignIn.cookieName) })
            #expect(nonceCookie.contains("SameSite=Strict") && nonceCookie.contains("HttpOnly"))
            let nonce = try #require(Self.cookie(WebSignIn.cookieName, in: asked))
            let fields = Self.hiddenFields(in: asked)
            let browser = Browser(app: app)
            let response = try await browser.post(
                "/web/session", form: fields, cookies: [WebSignIn.cookieName: nonce])
            #expect(response.status == .seeOther)
            #expect(response.headers.first(name: .location) == "/preferences?tenant=dewiki")
            let setCookie = try #require(response.headers[.setCookie].first { $0.hasPrefix(WebSession.cookieName) })
            #expect(setCookie.contains("HttpOnly"))
            #expect(setCookie.contains("Secure"))
            #expect(setCookie.contains("SameSite=Lax"))
            let cookie: String = try #require(Self.sessionCookie(response), "a session cookie")
            let signedIn = Browser(app: app, cookie: cookie)
            let page = try await signedIn.get("/preferences?tenant=dewiki")
            #expect(page.status == .ok)
            #expect(page.headers.contentType == .html)
            #expect(page.headers.first(name: "Content-Security-Policy")?.contains("script-src 'self'") == true)
            #expect(page.headers.first(name: .cacheControl) == "no-store")
            let text = page.body.string
            #expect(text.hasPrefix("<!doctype html>"))
            #expect(text.contains(#"<input type="checkbox" role="switch" id="c-mention""#))
            #expect(text.contains(#"name="category:mention""#))
            #expect(text.contains("German Wikipedia"))
            // Every push channel the category uses, Android's included, by its name.
            #expect(text.contains(#"name="channel:mention:android_push""#))
            #expect(text.contains("Android push") && text.contains("iOS push"))
            #expect(!text.contains(token))
            // A browser already signed in as ada goes straight on.
            let again = try await signedIn.get("/preferences?token=\(token)")
            #expect(again.status == .seeOther)
            #expect(again.headers.first(name: .location) == "/preferences")
        }
    }

    @Test("a sign-in form posted from another site signs no one in (login CSRF)")
    func loginCSRF() async throws {
        try await withBelfry(.sqlite) { app in
            let mallory = try await app.userToken("mallory")
            // Mallory reads her own "continue" page, then has Ada's browser post its form.
            let asked = try await app.send(.GET, "/inbox?token=\(mallory)")
            let fields = Self.hiddenFields(in: asked)
            #expect(fields.contains { $0.0 == "token" })
            let victim = Browser(app: app)
            for cookies in [[:], [WebSignIn.cookieName: "a-nonce-of-the-victims-own"]] {
                let posted = try await victim.post("/web/session", form: fields, cookies: cookies)
                #expect(posted.status == .forbidden)
                #expect(Self.sessionCookie(posted) == nil)
            }
        }
    }

    @Test("pages without a session, or with a bad token, answer with an HTML page")
    func unauthenticated() async throws {
        try await withBelfry(.sqlite) { app in
            for path in ["/preferences", "/inbox", "/preferences?token=nonsense", "/inbox?link=nonsense.nonsense"] {
                let response = try await app.send(.GET, path)
                #expect(response.status == .unauthorized, "\(path)")
                #expect(response.headers.contentType == .html, "\(path)")
                #expect(Self.sessionCookie(response) == nil)
            }
            let forged = Browser(app: app, cookie: "eyJraW5kIjoic2Vzc2lvbiJ9.AAAA")
            #expect(try await forged.get("/inbox").status == .unauthorized)
        }
    }

    @Test("form posts need the page's CSRF token", arguments: TestDatabase.allCases)
    func csrfRefusal(database: TestDatabase) async throws {
        try await withBelfry(database, settings: Self.email) { app in
            let token = try await app.userToken("ada")
            let browser = try await Browser.signIn(app, token: token)
            let page = try await browser.get("/preferences")
            let csrf = try Self.csrf(in: page)
            // A form that turns everything off: no boxes checked.
            for bad in [nil, "", "not-the-token", String(csrf.dropLast(2)) + "AA"] {
                var form = [("tenant", "enwiki")]
                if let bad { form.append(("_csrf", bad)) }
                let refused = try await browser.post("/preferences", form: form)
                #expect(refused.status == .forbidden)
                #expect(refused.headers.contentType == .html)
            }
            let other = try await Browser.signIn(app, token: try await app.userToken("grace"))
            let otherCSRF = try Self.csrf(in: try await other.get("/preferences"))
            #expect(try await browser.post("/preferences", form: [("_csrf", otherCSRF)]).status == .forbidden)
            let unchanged = try await app.send(.GET, "/v1/me/preferences", bearer: token).decode(PreferenceData.self)
            #expect(unchanged.sections?.first?.subcategories?.first?.preference == .optIn)

            let saved = try await browser.post(
                "/preferences", form: [("_csrf", csrf), ("tenant", "enwiki"), ("overall:email", "required")])
            #expect(saved.status == .seeOther)
            #expect(saved.headers.first(name: .location) == "/preferences?tenant=enwiki&saved=tenant")
            let data = try await app.send(.GET, "/v1/me/preferences", bearer: token).decode(PreferenceData.self)
            let categories = (data.sections ?? []).flatMap { $0.subcategories ?? [] }
            #expect(categories.first { $0.category == "mention" }?.preference == .optOut)
            #expect(categories.first { $0.category == "login-fail" }?.preference == .optIn)
            #expect(data.channelPreferences?.first { $0.channel == "email" }?.isRestricted == true)
            // The page scripts' token endpoint needs the header.
            #expect(
                try await app.send(
                    .POST, "/web/session/token?page=preferences",
                    headers: ["Cookie": "\(WebSession.cookieName)=\(browser.cookie ?? "")"]
                ).status == .forbidden)
            let minted = try await app.send(
                .POST, "/web/session/token?page=preferences",
                headers: ["Cookie": "\(WebSession.cookieName)=\(browser.cookie ?? "")", "X-CSRF-Token": csrf])
            #expect(minted.status == .ok)
            let pageToken = try minted.decode(TokenGrant.self).token
            #expect(try await app.send(.GET, "/v1/me/preferences", bearer: pageToken).status == .ok)
        }
    }

    @Test("a form shown before someone else's change saves nothing and shows the current values")
    func staleForm() async throws {
        try await withBelfry(.sqlite) { app in
            let token = try await app.userToken("ada")
            let browser = try await Browser.signIn(app, token: token)
            let page = try await browser.get("/preferences")
            let etag = try #require(page.body.string.firstMatch(of: /name="etag" value="([^"]+)"/)).1
            _ = try await app.send(
                .PATCH, "/v1/me/preferences/categories/mention", bearer: token, json: ["preference": "opt_out"])
            let stale = try await browser.post(
                "/preferences",
                form: [
                    ("_csrf", try Self.csrf(in: page)), ("tenant", "enwiki"),
                    ("etag", String(etag).replacingOccurrences(of: "&quot;", with: "\"")),
                    ("category:mention", "opt_in"), ("category:reverted", "opt_in"),
                ])
            #expect(stale.status == .conflict)
            #expect(stale.body.string.contains("changed in another window"))
            let data = try await app.send(.GET, "/v1/me/preferences", bearer: token).decode(PreferenceData.self)
            let categories = (data.sections ?? []).flatMap { $0.subcategories ?? [] }
            #expect(categories.first { $0.category == "mention" }?.preference == .optOut)
            #expect(categories.first { $0.category == "edit-thank" }?.preference == .optIn)
        }
    }

    @Test("signed links open their page only, and never for longer than the link")
    func signedLinks() async throws {
        let clock = TestClock()
        try await withBelfry(.sqlite, clock: clock) { app in
            _ = try await app.userToken("ada")
            let id = try await Self.userID(app, "ada")
            let link = try app.belfry.webSigner.link(
                page: "inbox", userID: id, externalID: "ada", now: clock.now, lifetime: 600)
            let browser = try await Browser(app: app).follow("/inbox?link=\(link)")
            #expect(try await browser.get("/inbox").status == .ok)
            // The inbox's session does not open the preferences.
            let other = try await browser.get("/preferences")
            #expect(other.status == .unauthorized)
            #expect(other.body.string.contains("another page only"))

            #expect(try await app.send(.GET, "/preferences?link=\(link)").status == .unauthorized)
            let tampered = link.replacingOccurrences(of: "inbox", with: "preferences")
            #expect(try await app.send(.GET, "/preferences?link=\(tampered)").status == .unauthorized)
            var payload = Array(link.split(separator: ".")[0])
            payload[payload.count / 2] = payload[payload.count / 2] == "A" ? "B" : "A"
            #expect(
                try await app.send(.GET, "/inbox?link=\(String(payload)).\(link.split(separator: ".")[1])").status
                    == .unauthorized)

            clock.advance(by: 601)
            let expired = try await app.send(.GET, "/inbox?link=\(link)")
            #expect(expired.status == .unauthorized)
            #expect(expired.body.string.contains("expired"))
            // The session it started ended with the link.
            #expect(try await browser.get("/inbox").status == .unauthorized)
        }
    }

    @Test(
        "the inbox page escapes what senders wrote, and its buttons work without script",
        arguments: TestDatabase.allCases)
    func inboxPage(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let token = try await app.userToken("ada")
            try await InboxAPITests.notify(app, ["ada"], title: #"<script>alert("hi")</script>"#)
            let browser = try await Browser.signIn(app, token: token, page: "inbox")
            let page = try await browser.get("/inbox")
            let text = page.body.string
            #expect(!text.contains("<script>alert"))
            #expect(text.contains("&lt;script&gt;alert(\"hi\")&lt;/script&gt;"))
            #expect(text.contains("<title id=\"page-title\" data-title=\"Inbox\">(1) Inbox · Belfry</title>"))
            let id = try #require(try await InboxAPITests.page(app, token).notifications.first).id
            let csrf = try Self.csrf(in: page)
            let read = try await browser.post(
                "/inbox", form: [("_csrf", csrf), ("id", id.uuidString), ("op", "read")])
            #expect(read.status == .seeOther)
            let counts = try await app.send(.GET, "/v1/me/notifications/counts", bearer: token).decode(InboxCounts.self)
            #expect(counts.unread == 0)
            let refused = try await browser.post("/inbox", form: [("id", id.uuidString), ("op", "unread")])
            #expect(refused.status == .forbidden)
            let other = try await Browser.signIn(app, token: try await app.userToken("grace"), page: "inbox")
            let otherCSRF = try Self.csrf(in: try await other.get("/inbox"))
            let foreign = try await other.post(
                "/inbox", form: [("_csrf", otherCSRF), ("id", id.uuidString), ("op", "unread")])
            #expect(foreign.status == .notFound)
        }
    }

    @Test("static assets and the service worker are served with their types")
    func assets() async throws {
        try await withBelfry(.sqlite) { app in
            let script = try await app.send(.GET, "/web/preferences.js")
            #expect(script.status == .ok)
            #expect(script.headers.contentType?.subType == "javascript")
            let etag = try #require(script.etag)
            #expect(
                try await app.send(.GET, "/web/preferences.js", headers: ["If-None-Match": etag]).status == .notModified
            )
            #expect(try await app.send(.GET, "/web/belfry.css").headers.contentType?.subType == "css")
            #expect(try await app.send(.GET, "/sw.js").body.string.contains("notificationclick"))
            #expect(try await app.send(.GET, "/web/sw.js").status == .notFound)
            #expect(try await app.send(.GET, "/web/..%2Fopenapi.yaml").status == .notFound)
        }
    }

    @Test("the preference center shows only channels the server delivers, never the internal ones")
    func shownChannels() async throws {
        try await withBelfry(.sqlite) { app in
            let token = try await app.userToken("ada")
            let page = try await Browser.signIn(app, token: token).get("/preferences").body.string
            #expect(page.contains(#"name="channel:mention:inbox""#))
            for hidden in ["ios_push", "android_push", "web_push", "email", "webhook"] {
                #expect(!page.contains(#"name="channel:mention:\#(hidden)""#), "\(hidden)")
                #expect(!page.contains(#"name="overall:\#(hidden)""#), "\(hidden)")
            }
            #expect(!page.contains("Integrations"), "the webhook is the backend's: internal by default")
            #expect(!page.contains("Push notifications on this browser"), "no Web Push on this server")
            #expect(!page.contains("BELFRY_"), "no operator-facing text")
        }
        try await withBelfry(.sqlite, settings: Self.email) { app in
            let token = try await app.userToken("ada")
            let page = try await Browser.signIn(app, token: token).get("/preferences").body.string
            #expect(page.contains(#"name="channel:mention:email""#) && page.contains(#"name="overall:email""#))
        }
    }

    @Test("a category that is off shows its channels disabled, and a form post leaves them as they were")
    func categoryOffDisablesChannels() async throws {
        try await withBelfry(.sqlite, settings: Self.email) { app in
            let token = try await app.userToken("ada")
            let browser = try await Browser.signIn(app, token: token)
            let before = try await browser.get("/preferences")
            let csrf = try Self.csrf(in: before)
            // Everything on but mention.
            var form = [("_csrf", csrf), ("tenant", "enwiki")]
            let data = try await app.send(.GET, "/v1/me/preferences", bearer: token).decode(PreferenceData.self)
            for category in (data.sections ?? []).flatMap({ $0.subcategories ?? [] })
            where category.category != "mention" {
                form.append((PreferenceCenterPage.categoryField(category.category), "opt_in"))
                for channel in category.channels ?? [] where channel.preference == .optIn {
                    form.append((PreferenceCenterPage.channelField(category.category, channel.channel), "opt_in"))
                }
            }
            form.append((PreferenceCenterPage.channelField("mention", "inbox"), "opt_in"))
            #expect(try await browser.post("/preferences", form: form).status == .seeOther)
            let page = try await browser.get("/preferences").body.string
            let box = try #require(page.firstMatch(of: /<input[^>]*id="ch-mention-inbox"[^>]*>/)?.output)
            #expect(box.contains("disabled") && box.contains("checked"), "\(box)")
            let other = try #require(page.firstMatch(of: /<input[^>]*id="ch-reverted-inbox"[^>]*>/)?.output)
            #expect(!other.contains("disabled"))
            // Posting the page as it is (the disabled boxes are not sent) keeps mention's channels.
            let csrfNow = try Self.csrf(in: try await browser.get("/preferences"))
            form[0] = ("_csrf", csrfNow)
            form.removeAll { $0.0 == PreferenceCenterPage.channelField("mention", "inbox") }
            #expect(try await browser.post("/preferences", form: form).status == .seeOther)
            let after = try await app.send(.GET, "/v1/me/preferences", bearer: token).decode(PreferenceData.self)
            let mention = (after.sections ?? []).flatMap { $0.subcategories ?? [] }.first { $0.category == "mention" }
            #expect(mention?.preference == .optOut)
            #expect(mention?.channels?.first { $0.channel == "inbox" }?.preference == .optIn)
        }
    }

    @Test("a category's own Mark as read action is the only such button of its unread notifications")
    func oneMarkAsRead() async throws {
        try await withBelfry(.sqlite) { app in
            let token = try await app.userToken("ada")
            try await InboxAPITests.notify(app, ["ada"], title: "Talk", category: "edit-user-talk")
            try await InboxAPITests.notify(app, ["ada"], title: "Mention", category: "mention")
            let page = try await Browser.signIn(app, token: token, page: "inbox").get("/inbox").body.string
            #expect(page.components(separatedBy: ">Mark as read<").count - 1 == 2, "one per notification")
            #expect(page.contains(#"value="action:mark-read""#))
        }
    }

    @Test("the no-JS form's changes: only what differs, never items users cannot change")
    func formChanges() {
        let data = PreferenceData(ResolvedPreferences(config: .demo, userDefaults: PreferenceSelections()))
        #expect(
            WebController.changes(
                from: ["category:mention": "opt_in", "overall:email": "all"], against: data, all: false
            ).contains(.category("edit-thank", .optOut)))
        let changes = WebController.changes(from: [:], against: data, all: false)
        #expect(!changes.contains { if case .category("login-fail", _) = $0 { true } else { false } })
        #expect(!changes.contains { if case .channelInCategory("email", "login-fail", _) = $0 { true } else { false } })
        #expect(changes.contains(.category("mention", .optOut)))
        #expect(!changes.contains { if case .overallChannel = $0 { true } else { false } })
    }

    @Test("link lifetimes read as seconds, minutes, hours or days")
    func linkDurations() {
        #expect(LinkCommand.seconds("3600") == 3600)
        #expect(LinkCommand.seconds("90m") == 5400)
        #expect(LinkCommand.seconds("12h") == 43200)
        #expect(LinkCommand.seconds("7d") == 604_800)
        #expect(LinkCommand.seconds("0") == nil)
        #expect(LinkCommand.seconds("-1d") == nil)
        #expect(LinkCommand.seconds("week") == nil)
    }
}
