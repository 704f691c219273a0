import Crypto
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// A local stand-in for Apple's provider API: HTTP/2 only, over TLS with a certificate from a
/// test authority. It checks each request as APNs does (method, path, topic and push type
/// headers, an ES256 provider token signed with its key, payload size), records it, and
/// answers `200` or what the test scripted for the device token.
public final class APNsTestServer: Sendable {
    /// A request the server took.
    public struct Received: Sendable {
        public var deviceToken: String
        /// Header names in lower case.
        public var headers: [String: String]
        public var body: Data
        /// The provider token in the `authorization` header.
        public var providerToken: String?
        /// What the server answered.
        public var status: Int
        public var reason: String?

        /// The body as JSON.
        public var payload: [String: Any] {
            (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] ?? [:]
        }

        /// The payload's `aps` dictionary.
        public var aps: [String: Any] { payload["aps"] as? [String: Any] ?? [:] }
    }

    /// An answer APNs may give.
    public enum Reply: Sendable, Equatable {
        case success
        case failure(status: Int, reason: String)
    }

    public let keyID = "BELFRYKEY1"
    public let teamID = "BELFRYTEAM"
    /// The provider key (a .p8 file's PEM) the server trusts.
    public let keyPEM: String
    /// Whether to record each request (off for benchmarks).
    public let records: Bool
    private let server: HTTP2TestServer
    private let state: NIOLockedValueBox<State>

    struct State {
        var received: [Received] = []
        var scripted: [String: [Reply]] = [:]
        /// Provider tokens whose signature checked out, with their `iat`: a client reuses one
        /// token for many requests, so each is verified once and then compared as a string.
        var verified: [String: Double] = [:]
    }

    /// Starts a server on a free loopback port.
    /// - Parameters:
    ///   - now: the clock against which provider tokens' `iat` is checked (older than an hour: `ExpiredProviderToken`).
    ///   - group: where its connections run.
    ///   - answered: called as each push is answered, with its status (a benchmark's count of arrivals).
    public init(
        records: Bool = true, now: @escaping @Sendable () -> Date = { Date() },
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        answered: (@Sendable (_ status: Int) -> Void)? = nil
    ) async throws {
        let key = P256.Signing.PrivateKey()
        let state = NIOLockedValueBox(State())
        let checker = RequestChecker(
            publicKey: key.publicKey, keyID: keyID, teamID: teamID, now: now, state: state, records: records)
        server = try await HTTP2TestServer(group: group) { request in
            let (status, reason) = checker.answer(request)
            answered?(status)
            var headers = [("apns-id", request.headers["apns-id"] ?? UUID().uuidString)]
            guard let reason else { return .init(status: status, headers: headers) }
            headers.append(("content-type", "application/json"))
            return .init(status: status, headers: headers, body: Data(#"{"reason":"\#(reason)"}"#.utf8))
        }
        keyPEM = key.pemRepresentation
        self.state = state
        self.records = records
    }

    public var port: Int { server.port }
    public var authority: TestCertificateAuthority { server.authority }
    /// The URL for `BELFRY_APNS_URL`.
    public var url: String { server.url }

    /// Requests so far, in the order they arrived.
    public var received: [Received] { state.withLockedValue { $0.received } }

    /// The next answers for `deviceToken`, in order; after them, success.
    public func script(_ replies: [Reply], for deviceToken: String) {
        state.withLockedValue { $0.scripted[deviceToken.lowercased(), default: []].append(contentsOf: replies) }
    }

    public func shutdown() async {
        await server.shutdown()
    }
}

/// What the server checks and answers, shared by all streams.
struct RequestChecker: Sendable {
    let publicKey: P256.Signing.PublicKey
    let keyID: String
    let teamID: String
    let now: @Sendable () -> Date
    let state: NIOLockedValueBox<APNsTestServer.State>
    let records: Bool

    func answer(_ request: HTTP2TestServer.Request) -> (status: Int, reason: String?) {
        let headers = request.headers
        let deviceToken =
            request.path.hasPrefix("/3/device/") ? String(request.path.dropFirst("/3/device/".count)) : ""
        let providerToken = headers["authorization"].flatMap {
            $0.hasPrefix("bearer ") ? String($0.dropFirst("bearer ".count)) : nil
        }
        var (status, reason): (Int, String?) = (200, nil)
        if request.method != "POST" {
            (status, reason) = (405, "MethodNotAllowed")
        } else if deviceToken.isEmpty {
            (status, reason) = (404, "BadPath")
        } else if headers["apns-topic"] == nil {
            (status, reason) = (400, "MissingTopic")
        } else if headers["apns-push-type"] == nil {
            (status, reason) = (400, "InvalidPushType")
        } else if request.body.count > 4096 {
            (status, reason) = (413, "PayloadTooLarge")
        } else if let problem = check(providerToken) {
            (status, reason) = (403, problem)
        } else {
            let scripted = state.withLockedValue { state -> APNsTestServer.Reply? in
                guard var replies = state.scripted[deviceToken.lowercased()], !replies.isEmpty else { return nil }
                let reply = replies.removeFirst()
                state.scripted[deviceToken.lowercased()] = replies
                return reply
            }
            if case .failure(let code, let text) = scripted { (status, reason) = (code, text) }
        }
        if records {
            let received = APNsTestServer.Received(
                deviceToken: deviceToken, headers: headers, body: request.body,
                providerToken: providerToken,
                status: status, reason: reason)
            state.withLockedValue { $0.received.append(received) }
        }
        return (status, reason)
    }

    /// Why APNs would refuse the provider token, or `nil` when it is good.
    private func check(_ token: String?) -> String? {
        guard let token else { return "MissingProviderToken" }
        var issuedAt = state.withLockedValue { $0.verified[token] }
        if issuedAt == nil {
            // The signature is what costs (an ECDSA verification): once per distinct token.
            guard let jwt = SignedJWT(token, publicKey: publicKey), jwt.header["kid"] as? String == keyID,
                jwt.claims["iss"] as? String == teamID
            else { return "InvalidProviderToken" }
            guard let iat = (jwt.claims["iat"] as? NSNumber)?.doubleValue else { return "InvalidProviderToken" }
            issuedAt = iat
            state.withLockedValue { state in
                // A handful of tokens at most in a test; keep the memory bounded all the same.
                if state.verified.count >= 64 { state.verified.removeAll() }
                state.verified[token] = iat
            }
        }
        guard let issuedAt, now().timeIntervalSince1970 - issuedAt < 3600 else { return "ExpiredProviderToken" }
        return nil
    }
}
