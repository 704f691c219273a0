import BelfryWebPush
import Crypto
import Fluent
import Foundation
import Vapor

/// A signed-in browser: who it is, until when, and the nonce its CSRF token derives from.
/// Kept whole in the session cookie, signed, so that any instance sharing the database can read it.
struct WebSession: Codable, Sendable {
    var kind = "session"
    /// The user's internal id: an erased user's session stops working even if the external id is reused.
    var uid: UUID
    var sub: String
    var sid: String
    /// Expiry, seconds since 1970.
    var exp: Int

    static let cookieName = "belfry_session"
    /// How long a browser stays signed in after exchanging a token or a link.
    static let lifetime = 12 * 3600
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
        guard parts.count == 2, let payload = Base64URL.decode(String(parts[0])),
            let mac = Base64URL.decode(String(parts[1])),
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
        guard let candidate, let given = Base64URL.decode(candidate) else { return false }
        return HMAC<SHA256>.isValidAuthenticationCode(given, authenticating: Data("csrf:\(nonce)".utf8), using: key)
    }

    func newSession(userID: UUID, externalID: String, now: Date) -> WebSession {
        WebSession(
            uid: userID, sub: externalID, sid: randomToken(bytes: 16),
            exp: Int(now.timeIntervalSince1970) + WebSession.lifetime)
    }

    /// A link to `page` (`preferences` or `inbox`) that signs `user` in for `lifetime` seconds.
    func link(page: String, userID: UUID, externalID: String, now: Date, lifetime: Int) throws -> String {
        try sign(WebLink(uid: userID, sub: externalID, page: page, exp: Int(now.timeIntervalSince1970) + lifetime))
    }
}

extension Request {
    var webSigner: WebSigner { belfry.webSigner }

    /// The signed-in browser's session and user, or `nil` when there is no valid, unexpired session.
    func webSession() async throws -> (WebSession, UserModel)? {
        guard let cookie = cookies[WebSession.cookieName]?.string,
            let session = webSigner.verify(cookie, as: WebSession.self), session.kind == "session",
            session.exp > Int(belfry.now().timeIntervalSince1970),
            let user = try await UserModel.find(session.uid, on: db)
        else { return nil }
        return (session, user)
    }

    /// The session cookie for `session`: `Secure` always (browsers accept it on http://127.0.0.1
    /// and localhost too, which count as secure contexts), `HttpOnly`, `SameSite=Lax` so that a
    /// link followed from an email arrives signed in.
    func sessionCookie(_ session: WebSession) throws -> HTTPCookies.Value {
        HTTPCookies.Value(
            string: try webSigner.sign(session), maxAge: WebSession.lifetime, path: "/",
            isSecure: true, isHTTPOnly: true, sameSite: .lax)
    }
}
