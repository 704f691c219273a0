import BelfryCore
import BelfryTestSupport
import Foundation
import Testing
import Vapor
import VaporTesting

@testable import BelfryServer

/// What links in emails and pages' sessions may reach: each probe that once opened an account
/// from a one-click link, step by step, now stops where it should.
@Suite("Sessions: links grant only their page, page tokens only their routes, sign-out revokes")
struct SessionSecurityTests {
    typealias Browser = WebPagesTests.Browser

    /// A preferences page's token: what its scripts receive.
    static func pageToken(_ browser: Browser, page: String) async throws -> TestingHTTPResponse {
        let shown = try await browser.get("/\(page)")
        let csrf = try WebPagesTests.csrf(in: shown)
        return try await browser.app.send(
            .POST, "/web/session/token?page=\(page)",
            headers: ["Cookie": "\(WebSession.cookieName)=\(browser.cookie ?? "")", "X-CSRF-Token": csrf])
    }

    @Test("the unsubscribe chain: one-click answers no credential; an email link opens its page only")
    func unsubscribeChain() async throws {
        try await EmailChannelTests.withEmail(.sqlite) { app, server in
            _ = try await app.putUser("ada", UserUpsert(email: "ada@example.org"))
            _ = try await EmailChannelTests.send(app, to: ["ada"])
            let mail = try #require(try server.received().first)
            let header = try #require(mail.headers["List-Unsubscribe"])
            let unsubscribe = String(header.dropFirst("<\(EmailChannelTests.publicURL)".count).dropLast())

            // 1. One-click, as a mail provider posts it: done, and the answer carries no credential.
            let done = try await app.send(
                .POST, unsubscribe, rawBody: "List-Unsubscribe=One-Click",
                headers: ["Content-Type": "application/x-www-form-urlencoded"])
            #expect(done.status == .ok)
            #expect(done.headers[.setCookie].isEmpty)
            for credential in ["link=", "token=", "/preferences?", "/inbox?"] {
                #expect(!done.body.string.contains(credential), "\(credential)")
            }

            // 2. The email's own preferences link (30 days): it opens the preferences, not the inbox.
            let text = try #require(mail.part("text/plain")?.content)
            let link = try #require(text.firstMatch(of: /\/preferences\?link=[^\s]+/)?.output)
            let browser = try await Browser(app: app).follow(String(link))
            #expect(try await browser.get("/preferences").status == .ok)
            let inbox = try await browser.get("/inbox")
            #expect(inbox.status == .unauthorized)
            #expect(try await browser.get("/inbox?status=all").status == .unauthorized)

            // 3. The session buys tokens for its own page only, and they reach that page's routes only.
            #expect(try await browser.post("/web/session/token?page=inbox", form: []).status == .unauthorized)
            let minted = try await Self.pageToken(browser, page: "preferences")
            #expect(minted.status == .ok)
            let token = try minted.decode(TokenGrant.self).token
            #expect(try await app.send(.GET, "/v1/me/preferences", bearer: token).status == .ok)
            for path in ["/v1/me/devices", "/v1/me/notifications", "/v1/me/notifications/counts", "/v1/me/topics"] {
                let refused = try await app.send(.GET, path, bearer: token)
                #expect(refused.status == .forbidden, "\(path)")
                #expect(refused.body.string.contains("preferences page"), "\(path)")
            }
            #expect(try await app.send(.GET, "/v1/users/ada/preferences", bearer: token).status == .forbidden)
            #expect(try await app.send(.GET, "/v1/me/stream?token=\(token)").status == .forbidden)
            let apns = try await app.send(
                .POST, "/v1/me/devices", bearer: token,
                json: ["platform": "apns", "token": String(repeating: "ab", count: 32), "environment": "sandbox"])
            #expect(apns.status == .forbidden)

            // 4. A page's token signs no browser in, on either page.
            for page in ["inbox", "preferences"] {
                let exchanged = try await app.send(.GET, "/\(page)?token=\(token)")
                #expect(exchanged.status == .unauthorized, "\(page)")
                #expect(WebPagesTests.sessionCookie(exchanged) == nil)
            }
        }
    }

    @Test("a session lasts no longer than the link that started it")
    func sessionEndsWithLink() async throws {
        let clock = TestClock()
        try await withBelfry(.sqlite, clock: clock) { app in
            _ = try await app.userToken("ada")
            let id = try await WebPagesTests.userID(app, "ada")
            let link = try app.belfry.webSigner.link(
                page: "preferences", userID: id, externalID: "ada", now: clock.now, lifetime: 300)
            let asked = try await app.send(.GET, "/preferences?link=\(link)")
            let posted = try await Browser(app: app).post(
                "/web/session", form: WebPagesTests.hiddenFields(in: asked),
                cookies: [WebSignIn.cookieName: try #require(WebPagesTests.cookie(WebSignIn.cookieName, in: asked))])
            let setCookie = try #require(posted.headers[.setCookie].first { $0.hasPrefix(WebSession.cookieName) })
            #expect(setCookie.contains("Max-Age=300"), "\(setCookie)")
            let browser = Browser(app: app, cookie: try #require(WebPagesTests.sessionCookie(posted)))
            // Its page token lives no longer either.
            let grant = try await Self.pageToken(browser, page: "preferences").decode(TokenGrant.self)
            #expect(grant.expiresAt <= clock.now.addingTimeInterval(300))
            clock.advance(by: 299)
            #expect(try await browser.get("/preferences").status == .ok)
            clock.advance(by: 2)
            #expect(try await browser.get("/preferences").status == .unauthorized)
        }
    }

    @Test("signing out everywhere ends every browser session and page token", arguments: TestDatabase.allCases)
    func signOutEverywhere(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let token = try await app.userToken("ada")
            let first = try await Browser.signIn(app, token: token, page: "inbox")
            let second = try await Browser.signIn(app, token: token)
            let pageToken = try await Self.pageToken(first, page: "inbox").decode(TokenGrant.self).token
            #expect(try await app.send(.GET, "/v1/me/notifications", bearer: pageToken).status == .ok)

            // Only the user or a backend may.
            let grace = try await app.userToken("grace")
            #expect(try await app.send(.DELETE, "/v1/users/ada/sessions", bearer: grace).status == .forbidden)
            #expect(try await app.send(.DELETE, "/v1/users/ada/sessions", bearer: pageToken).status == .forbidden)
            #expect(try await first.get("/inbox").status == .ok)

            #expect(try await app.send(.DELETE, "/v1/users/ada/sessions", bearer: testAPIKey).status == .noContent)
            #expect(try await first.get("/inbox").status == .unauthorized)
            #expect(try await second.get("/preferences").status == .unauthorized)
            #expect(try await app.send(.GET, "/v1/me/notifications", bearer: pageToken).status == .unauthorized)
            #expect(try await app.send(.GET, "/v1/me/stream?token=\(pageToken)").status == .unauthorized)
            // The backend's own token is not a browser session: it still works, and signs in anew.
            #expect(try await app.send(.GET, "/v1/me/notifications", bearer: token).status == .ok)
            let again = try await Browser.signIn(app, token: token, page: "inbox")
            #expect(try await again.get("/inbox").status == .ok)
        }
    }

    @Test("an erased user's session ends, even if the same id comes back")
    func erasureEndsSessions() async throws {
        try await withBelfry(.sqlite) { app in
            let browser = try await Browser.signIn(app, token: try await app.userToken("ada"))
            #expect(try await app.send(.DELETE, "/v1/users/ada", bearer: testAPIKey).status == .noContent)
            _ = try await app.userToken("ada")
            #expect(try await browser.get("/preferences").status == .unauthorized)
        }
    }
}
