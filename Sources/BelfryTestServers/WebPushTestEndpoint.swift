import BelfryWebPush
import Crypto
import Foundation
import NIOConcurrencyHelpers

/// A local push service for Web Push: TLS + HTTP/2, one endpoint path per subscriber. Like a
/// real push service it requires the RFC 8030 headers and a valid VAPID token for its origin;
/// unlike one, it holds the subscribers' private keys, so it decrypts what it receives, as
/// the browser would.
public final class WebPushTestEndpoint: Sendable {
    /// A browser's subscription: the endpoint and keys, and the private half it keeps.
    public struct Subscriber: Sendable {
        public let endpoint: String
        /// The public key, base64url (`keys.p256dh`).
        public let p256dh: String
        /// The authentication secret, base64url (`keys.auth`).
        public let auth: String
        let privateKey: P256.KeyAgreement.PrivateKey
        let authSecret: Data
    }

    public struct Received: Sendable {
        public var path: String
        /// Header names in lower case.
        public var headers: [String: String]
        public var body: Data
        /// The decrypted message, or `nil` when it did not decrypt.
        public var plaintext: Data?
        /// The VAPID public key (`k`) of a request whose token was valid.
        public var vapidKey: String?
        public var status: Int

        /// The decrypted message as JSON.
        public var message: [String: Any] {
            plaintext.flatMap { try? JSONSerialization.jsonObject(with: $0) as? [String: Any] } ?? [:]
        }
    }

    private struct State {
        var subscribers: [String: Subscriber] = [:]
        var received: [Received] = []
        var scripted: [String: [Int]] = [:]
    }

    public let records: Bool
    private let server: HTTP2TestServer
    private let state: NIOLockedValueBox<State>

    public init(records: Bool = true, now: @escaping @Sendable () -> Date = { Date() }) async throws {
        let state = NIOLockedValueBox(State())
        let origin = NIOLockedValueBox("")
        let server = try await HTTP2TestServer { request in
            WebPushTestEndpoint.answer(
                request, state: state, origin: origin.withLockedValue { $0 }, now: now(), records: records)
        }
        origin.withLockedValue { $0 = server.url }
        self.server = server
        self.state = state
        self.records = records
    }

    public var authority: TestCertificateAuthority { server.authority }
    public var origin: String { server.url }

    /// A new subscriber with fresh keys, at `/push/<name>`.
    public func subscribe(_ name: String) -> Subscriber {
        let privateKey = P256.KeyAgreement.PrivateKey()
        let auth = Data((0..<16).map { _ in UInt8.random(in: 0...255) })
        let subscriber = Subscriber(
            endpoint: "\(server.url)/push/\(name)", p256dh: Base64URL.encode(privateKey.publicKey.x963Representation),
            auth: Base64URL.encode(auth), privateKey: privateKey, authSecret: auth)
        state.withLockedValue { $0.subscribers["/push/\(name)"] = subscriber }
        return subscriber
    }

    /// The next answers for a subscriber, in order; after them, 201. A 429 or 503 carries `Retry-After: 30`.
    public func script(_ statuses: [Int], for subscriber: Subscriber) {
        let path = URL(string: subscriber.endpoint)?.path ?? ""
        state.withLockedValue { $0.scripted[path, default: []].append(contentsOf: statuses) }
    }

    public var received: [Received] { state.withLockedValue { $0.received } }

    public func shutdown() async {
        await server.shutdown()
    }

    private static func answer(
        _ request: HTTP2TestServer.Request, state: NIOLockedValueBox<State>, origin: String, now: Date, records: Bool
    ) -> HTTP2TestServer.Response {
        let subscriber = state.withLockedValue { $0.subscribers[request.path] }
        var status = 201
        var vapidKey: String?
        var plaintext: Data?
        if request.method != "POST" {
            status = 405
        } else if subscriber == nil {
            status = 404
        } else if request.headers["ttl"].flatMap(Int.init) == nil || request.headers["content-encoding"] != "aes128gcm"
        {
            status = 400
        } else if request.body.count > 4096 {
            status = 413
        } else if let key = verifyVAPID(request.headers["authorization"], origin: origin, now: now) {
            vapidKey = key
            if let subscriber {
                plaintext = try? WebPushEncryption.decrypt(
                    request.body, privateKey: subscriber.privateKey, authSecret: subscriber.authSecret)
            }
            let scripted = state.withLockedValue { state -> Int? in
                guard var statuses = state.scripted[request.path], !statuses.isEmpty else { return nil }
                let next = statuses.removeFirst()
                state.scripted[request.path] = statuses
                return next
            }
            if let scripted { status = scripted }
        } else {
            status = 403
        }
        if records {
            let received = Received(
                path: request.path, headers: request.headers, body: request.body, plaintext: plaintext,
                vapidKey: vapidKey, status: status)
            state.withLockedValue { $0.received.append(received) }
        }
        // Busy answers ask for 30 seconds' patience, as push services may.
        let headers =
            status == 429 || status == 503
            ? [("retry-after", "30")] : [("location", "\(origin)/message/\(UUID())")]
        return HTTP2TestServer.Response(status: status, headers: headers)
    }

    /// The `k` of a valid `vapid t=…, k=…` header for this origin (RFC 8292), or `nil`.
    private static func verifyVAPID(_ header: String?, origin: String, now: Date) -> String? {
        guard let header, header.hasPrefix("vapid ") else { return nil }
        var fields: [String: String] = [:]
        for part in header.dropFirst(6).split(separator: ",") {
            let pair = part.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
            if pair.count == 2 { fields[String(pair[0])] = String(pair[1]) }
        }
        guard let token = fields["t"], let k = fields["k"], let keyData = Base64URL.decode(k),
            let publicKey = try? P256.Signing.PublicKey(x963Representation: keyData)
        else { return nil }
        guard let claims = SignedJWT(token, publicKey: publicKey)?.claims, claims["aud"] as? String == origin,
            let exp = (claims["exp"] as? NSNumber)?.doubleValue,
            exp > now.timeIntervalSince1970, exp <= now.timeIntervalSince1970 + 24 * 3600,
            let sub = claims["sub"] as? String, sub.hasPrefix("mailto:") || sub.hasPrefix("https:")
        else { return nil }
        return k
    }
}
