import BelfryWebPush
import Crypto
import Fluent
import Foundation
import Vapor

/// A signed-in browser: who it is, which pages it opens until when, and the nonce its CSRF
/// token derives from. Kept whole in the session cookie, signed, so that any instance sharing
/// the database can read it.
struct WebSession: Codable, Sendable {
    var kind = "session"
    /// The user's internal id: an erased user's session stops working even if the external id is reused.
    var uid: UUID
    var sub: String
    var sid: String
    /// The pages it opens, each until its own expiry (seconds since 1970): a link opens only its
    /// page, and never for longer than the link itself would.
    var pages: [String: Int]
    /// The user's session epoch when it began: "sign out everywhere" raises the user's.
    var ep: Int

    static let cookieName = "belfry_session"
    /// The longest a browser stays signed in after exchanging a token or a link.
    static let lifetime = 12 * 3600

    /// When the last of its pages closes: the cookie's own expiry.
    var exp: Int { pages.values.max() ?? 0 }

    func opens(_ page: WebLayout.Page, at now: Date) -> Bool {
        (pages[page.rawValue] ?? 0) > Int(now.timeIntervalSince1970)
    }

    /// Seconds `page` stays open from `now`.
    func remaining(_ page: WebLayout.Page, at now: Date) -> Int {
        max(0, (pages[page.rawValue] ?? 0) - Int(now.timeIntervalSince1970))
    }
}

/// A sign-in in progress: the page that asks "continue as …?" sets a random nonce in a cookie
/// only this site reads, and its form carries a MAC of it, so a form posted from another site
/// cannot sign a browser in as someone else.
enum WebSignIn {
    static let cookieName = "belfry_signin"
    static let lifetime = 900
}

/// A one-click link for emails: opens `page` as the user until it expires.
struct WebLink: Codable, Sendable {
    var kind = "link"
    var uid: UUID
    var sub: String
    var page: String
    var exp: Int

    static let pages = ["preferences", "inbox"]
}

/// An email's one-click unsubscribe (RFC 8058): turns `channel` off for `category` in `tenant`.
struct UnsubscribeLink: Codable, Sendable {
    var kind = "unsubscribe"
    var uid: UUID
    var category: String
    var channel: String
    var tenant: String
    var exp: Int
}

/// Signs and checks what the web pages hand to browsers: session cookies, CSRF tokens and
/// one-click links. The key derives from the user-token secret, so it needs no setting of its
/// own and is the same on every instance.
struct WebSigner: Sendable {
    private let key: SymmetricKey

    init(secret: String) {
        let derived = HMAC<SHA256>.authenticationCode(
            for: Data("belfry web pages v1".utf8), using: SymmetricKey(data: Data(secret.utf8)))
        key = SymmetricKey(data: Data(derived))
    }

    /// `base64url(JSON).base64url(HMAC-SHA256)`.
    func sign(_ value: some Encodable) throws -> String {
        let payload = try JSONEncoder().encode(value)
        let mac = HMAC<SHA256>.authenticationCode(for: payload, using: key)
        return payload.base64URLEncodedString() + "." + Data(mac).base64URLEncodedString()
    }

    /// The payload, if the signature holds; `nil` for anything tampered with or malformed.
    func verify<T: Decodable>(_ text: String, as type: T.Type) -> T? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let payload = Base64URL.decodeCanonical(String(parts[0])),
            let mac = Base64URL.decodeCanonical(String(parts[1])),
            HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: payload, using: key)
        else { return nil }
        return try? JSONDecoder().decode(T.self, from: payload)
    }

    /// The CSRF token of a session: a MAC of its nonce, so it needs no storage and changes with each session.
    func csrfToken(for session: WebSession) -> String {
        csrfToken(nonce: session.sid)
    }

    func checkCSRF(_ candidate: String?, for session: WebSession) -> Bool {
        checkCSRF(candidate, nonce: session.sid)
    }

    /// The CSRF token of any session, by its nonce.
    func csrfToken(nonce: String) -> String {
        Data(HMAC<SHA256>.authenticationCode(for: Data("csrf:\(nonce)".utf8), using: key)).base64URLEncodedString()
    }

    func checkCSRF(_ candidate: String?, nonce: String) -> Bool {
        guard let candidate, let given = Base64URL.decodeCanonical(candidate) else { return false }
        return HMAC<SHA256>.isValidAuthenticationCode(given, authenticating: Data("csrf:\(nonce)".utf8), using: key)
    }

    /// A session opening `pages` for `user` until `until` (capped at the session lifetime); it
    /// adds to `existing` when that is the same user's current session, so a link to the inbox
    /// does not close the preferences a token opened.
    func session(
        for user: UserModel, pages: [WebLayout.Page], until: Int, now: Date, adding existing: WebSession?
    ) throws -> WebSession {
        let userID = try user.requireID()
        let expiry = min(until, Int(now.timeIntervalSince1970) + WebSession.lifetime)
        var session = WebSession(
            uid: userID, sub: user.externalID, sid: randomToken(bytes: 16), pages: [:], ep: user.sessionEpoch)
        if let existing, existing.uid == userID, existing.ep == user.sessionEpoch {
            session.pages = existing.pages.filter { $0.value > Int(now.timeIntervalSince1970) }
        }
        for page in pages {
            session.pages[page.rawValue] = max(session.pages[page.rawValue] ?? 0, expiry)
        }
        return session
    }

    /// A link to `page` (`preferences` or `inbox`) that signs `user` in for `lifetime` seconds.
    func link(page: String, userID: UUID, externalID: String, now: Date, lifetime: Int) throws -> String {
        try sign(WebLink(uid: userID, sub: externalID, page: page, exp: Int(now.timeIntervalSince1970) + lifetime))
    }
}

extension Request {
    /// The signed-in browser's session and user, or `nil` when there is no valid, unexpired
    /// session of a user who has not signed out everywhere since.
    func webSession(_ context: BelfryContext) async throws -> (WebSession, UserModel)? {
        guard let cookie = cookies[WebSession.cookieName]?.string,
            let session = context.webSigner.verify(cookie, as: WebSession.self), session.kind == "session",
            session.exp > Int(context.now().timeIntervalSince1970),
            let user = try await UserModel.find(session.uid, on: db), user.sessionEpoch == session.ep
        else { return nil }
        return (session, user)
    }

    /// The session cookie for `session`: `Secure` always (browsers accept it on http://127.0.0.1
    /// and localhost too, which count as secure contexts), `HttpOnly`, `SameSite=Lax` so that a
    /// link followed from an email arrives signed in.
    func sessionCookie(_ session: WebSession, _ context: BelfryContext) throws -> HTTPCookies.Value {
        HTTPCookies.Value(
            string: try context.webSigner.sign(session),
            maxAge: max(0, session.exp - Int(context.now().timeIntervalSince1970)),
            path: "/", isSecure: true, isHTTPOnly: true, sameSite: .lax)
    }
}
