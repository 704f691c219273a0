import BelfryWebPush
import Crypto
import CryptoExtras
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// A local stand-in for Google's OAuth token endpoint and FCM's HTTP v1 send API, on one HTTP/2
/// server over TLS with a certificate from a test authority. The token endpoint checks the
/// assertion as Google does (RS256 against the service account's public key, key id, issuer,
/// scope, audience, an hour at most, not expired) and grants access tokens; the send API checks
/// the path, the access token on every send and the message's token, records the send, and
/// answers what the test scripted for that device token, else success.
public final class FCMTestServer: Sendable {
    /// A send the server took.
    public struct Received: Sendable {
        public var token: String
        /// Header names in lower case.
        public var headers: [String: String]
        public var body: Data
        public var status: Int
        /// FCM's error code, when it refused the send.
        public var errorCode: String?

        /// The body's `message` object.
        public var message: [String: Any] {
            ((try? JSONSerialization.jsonObject(with: body)) as? [String: Any])?["message"] as? [String: Any] ?? [:]
        }
    }

    /// An answer FCM may give to a send.
    public enum Reply: Sendable, Equatable {
        case success
        /// `errorCode` goes in the answer's `FcmError` detail; `retryAfter` in its header.
        case failure(status: Int, errorCode: String?, message: String, retryAfter: Int? = nil)
    }

    /// An answer the token endpoint may give.
    public enum GrantReply: Sendable, Equatable {
        case grant(expiresIn: Int)
        case refused(status: Int, error: String, description: String)
    }

    public let projectID = "belfry-test"
    public let privateKeyID = "0123456789abcdef0123456789abcdef01234567"
    public let clientEmail = "belfry-push@belfry-test.iam.gserviceaccount.com"
    /// The service account key file (JSON) whose key the server trusts, token URI included.
    public let serviceAccountJSON: String
    /// Whether to record each send (off for benchmarks).
    public let records: Bool
    private let server: HTTP2TestServer
    private let state: NIOLockedValueBox<State>

    struct State {
        var received: [Received] = []
        var scripted: [String: [Reply]] = [:]
        var grantReplies: [GrantReply] = []
        /// Access tokens granted and still honoured, with when they expire.
        var accessTokens: [String: Date] = [:]
        var grants = 0
        var refusedTokens = 0
    }

    /// Starts a server on a free loopback port.
    /// - Parameters:
    ///   - now: the clock against which assertions and access tokens are checked.
    ///   - answered: called as each send is answered (not a token grant), with its status: a
    ///     benchmark's count of arrivals.
    public init(
        records: Bool = true, now: @escaping @Sendable () -> Date = { Date() },
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        answered: (@Sendable (_ status: Int) -> Void)? = nil
    ) async throws {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let state = NIOLockedValueBox(State())
        let box = NIOLockedValueBox<Checker?>(nil)
        server = try await HTTP2TestServer(group: group) { request in
            guard let checker = box.withLockedValue({ $0 }) else { return .init(status: 503) }
            if request.path == "/token" { return checker.grant(request) }
            let response = checker.send(request)
            answered?(response.status)
            return response
        }
        let tokenURI = "\(server.url)/token"
        let checker = Checker(
            publicKey: key.publicKey, keyID: privateKeyID, clientEmail: clientEmail, tokenURI: tokenURI,
            projectID: projectID, now: now, state: state, records: records)
        box.withLockedValue { $0 = checker }
        let account: [String: String] = [
            "type": "service_account", "project_id": projectID, "private_key_id": privateKeyID,
            "private_key": key.pemRepresentation, "client_email": clientEmail, "client_id": "1234567890",
            "token_uri": tokenURI, "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        ]
        serviceAccountJSON = String(
            decoding: try JSONSerialization.data(withJSONObject: account, options: [.sortedKeys]), as: UTF8.self)
        self.state = state
        self.records = records
    }

    public var port: Int { server.port }
    public var authority: TestCertificateAuthority { server.authority }
    /// The URL for `BELFRY_FCM_URL`.
    public var url: String { server.url }

    /// Sends so far, in the order they arrived.
    public var received: [Received] { state.withLockedValue { $0.received } }
    /// Access tokens granted so far.
    public var grants: Int { state.withLockedValue { $0.grants } }
    /// Sends refused for their access token.
    public var refusedAccessTokens: Int { state.withLockedValue { $0.refusedTokens } }

    /// The next answers for sends to `token`, in order; after them, success.
    public func script(_ replies: [Reply], for token: String) {
        state.withLockedValue { $0.scripted[token, default: []].append(contentsOf: replies) }
    }

    /// The next answers of the token endpoint, in order; after them, a grant for an hour.
    public func scriptGrants(_ replies: [GrantReply]) {
        state.withLockedValue { $0.grantReplies.append(contentsOf: replies) }
    }

    /// Stops honouring every access token granted so far, as Google does when one expires early
    /// or is revoked: the next send with one gets 401.
    public func revokeAccessTokens() {
        state.withLockedValue { $0.accessTokens.removeAll() }
    }

    public func shutdown() async {
        await server.shutdown()
    }
}

/// What the server checks and answers, shared by all streams.
private struct Checker: Sendable {
    let publicKey: _RSA.Signing.PublicKey
    let keyID: String
    let clientEmail: String
    let tokenURI: String
    let projectID: String
    let now: @Sendable () -> Date
    let state: NIOLockedValueBox<FCMTestServer.State>
    let records: Bool

    func grant(_ request: HTTP2TestServer.Request) -> HTTP2TestServer.Response {
        let form = Dictionary(
            String(decoding: request.body, as: UTF8.self).split(separator: "&").map { pair in
                let parts = pair.split(separator: "=", maxSplits: 1).map {
                    String($0).removingPercentEncoding ?? String($0)
                }
                return (parts[0], parts.count > 1 ? parts[1] : "")
            }, uniquingKeysWith: { first, _ in first })
        guard request.method == "POST", request.headers["content-type"] == "application/x-www-form-urlencoded",
            form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
        else { return refusal(400, "unsupported_grant_type", "Invalid grant_type: \(form["grant_type"] ?? "")") }
        if let problem = check(assertion: form["assertion"] ?? "") {
            return refusal(400, "invalid_grant", problem)
        }
        let reply = state.withLockedValue { state -> GrantReplyOrNil in
            state.grantReplies.isEmpty ? nil : state.grantReplies.removeFirst()
        }
        switch reply ?? .grant(expiresIn: 3599) {
        case .refused(let status, let error, let description):
            return refusal(status, error, description)
        case .grant(let expiresIn):
            let token = state.withLockedValue { state in
                state.grants += 1
                let token = "ya29.test-\(state.grants)-\(UUID().uuidString)"
                state.accessTokens[token] = now().addingTimeInterval(TimeInterval(expiresIn))
                return token
            }
            return json(200, #"{"access_token":"\#(token)","expires_in":\#(expiresIn),"token_type":"Bearer"}"#)
        }
    }

    private typealias GrantReplyOrNil = FCMTestServer.GrantReply?

    /// Why Google would refuse the assertion, or `nil` when it is good.
    private func check(assertion: String) -> String? {
        let parts = assertion.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 3, let signature = Base64URL.decode(parts[2]),
            publicKey.isValidSignature(
                _RSA.Signing.RSASignature(rawRepresentation: signature), for: Data("\(parts[0]).\(parts[1])".utf8),
                padding: .insecurePKCS1v1_5)
        else { return "Invalid JWT Signature." }
        guard let header = Self.json(parts[0]), header["alg"] as? String == "RS256", header["kid"] as? String == keyID,
            let claims = Self.json(parts[1])
        else { return "Invalid JWT: the header is not RS256 with the key's id." }
        guard claims["iss"] as? String == clientEmail else { return "Invalid JWT: iss is not the service account." }
        guard claims["aud"] as? String == tokenURI else { return "Invalid JWT: aud is not the token URI." }
        let scopes = (claims["scope"] as? String ?? "").split(separator: " ")
        guard scopes.contains("https://www.googleapis.com/auth/firebase.messaging") else {
            return "Invalid JWT: the firebase.messaging scope is missing."
        }
        guard let iat = (claims["iat"] as? NSNumber)?.doubleValue, let exp = (claims["exp"] as? NSNumber)?.doubleValue,
            exp > iat, exp - iat <= 3600
        else { return "Invalid JWT: iat and exp must span an hour at most." }
        let now = now().timeIntervalSince1970
        guard iat <= now + 60, exp > now else {
            return "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe."
        }
        return nil
    }

    func send(_ request: HTTP2TestServer.Request) -> HTTP2TestServer.Response {
        guard request.method == "POST", request.path == "/v1/projects/\(projectID)/messages:send" else {
            return error(404, "NOT_FOUND", code: nil, "The requested URL \(request.path) was not found.")
        }
        let bearer = request.headers["authorization"].flatMap {
            $0.hasPrefix("Bearer ") ? String($0.dropFirst("Bearer ".count)) : nil
        }
        let honoured = state.withLockedValue { state -> Bool in
            guard let bearer, let expiry = state.accessTokens[bearer], expiry > now() else {
                state.refusedTokens += 1
                return false
            }
            return true
        }
        guard honoured else {
            return error(
                401, "UNAUTHENTICATED", code: nil,
                "Request had invalid authentication credentials. Expected OAuth 2 access token.")
        }
        guard let token = Self.messageToken(request.body), !token.isEmpty else {
            return error(400, "INVALID_ARGUMENT", code: "INVALID_ARGUMENT", "Recipient of the message is not set.")
        }
        let reply = state.withLockedValue { state -> FCMTestServer.Reply? in
            guard var replies = state.scripted[token], !replies.isEmpty else { return nil }
            let reply = replies.removeFirst()
            state.scripted[token] = replies
            return reply
        }
        var response = json(200, #"{"name":"projects/\#(projectID)/messages/0:\#(UInt64.random(in: 1...UInt64.max))"}"#)
        var errorCode: String?
        if case .failure(let status, let code, let text, let retryAfter) = reply {
            response = error(status, Self.googleStatus(status), code: code, text)
            if let retryAfter { response.headers.append(("retry-after", String(retryAfter))) }
            errorCode = code
        }
        if records {
            let received = FCMTestServer.Received(
                token: token, headers: request.headers, body: request.body, status: response.status,
                errorCode: errorCode)
            state.withLockedValue { $0.received.append(received) }
        }
        return response
    }

    /// The message's `token`: the last `"token":"…"` of the body, found without parsing the
    /// whole message (a JSON parser per send was most of this server's time in the benchmark).
    /// Belfry writes the token last; a body from elsewhere that puts it before nested objects
    /// is parsed properly.
    private static func messageToken(_ body: Data) -> String? {
        let key = Data(#""token":""#.utf8)
        if let found = body.range(of: key, options: .backwards) {
            let rest = body[found.upperBound...]
            if let end = rest.firstIndex(of: UInt8(ascii: "\"")), !rest[..<end].contains(UInt8(ascii: "\\")),
                body.suffix(2) == Data("}}".utf8), body[end...].count == 3
            {
                return String(decoding: rest[..<end], as: UTF8.self)
            }
        }
        let message = ((try? JSONSerialization.jsonObject(with: body)) as? [String: Any])?["message"] as? [String: Any]
        return message?["token"] as? String
    }

    private static func googleStatus(_ status: Int) -> String {
        switch status {
        case 400: "INVALID_ARGUMENT"
        case 401: "UNAUTHENTICATED"
        case 403: "PERMISSION_DENIED"
        case 404: "NOT_FOUND"
        case 429: "RESOURCE_EXHAUSTED"
        case 503: "UNAVAILABLE"
        default: "INTERNAL"
        }
    }

    private func error(
        _ status: Int, _ googleStatus: String, code: String?, _ message: String
    )
        -> HTTP2TestServer.Response
    {
        let details =
            code.map {
                #","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"\#($0)"}]"#
            } ?? ""
        return json(
            status,
            #"{"error":{"code":\#(status),"message":"\#(message)","status":"\#(googleStatus)"\#(details)}}"#)
    }

    private func refusal(_ status: Int, _ error: String, _ description: String) -> HTTP2TestServer.Response {
        json(status, #"{"error":"\#(error)","error_description":"\#(description)"}"#)
    }

    private func json(_ status: Int, _ body: String) -> HTTP2TestServer.Response {
        .init(status: status, headers: [("content-type", "application/json; charset=UTF-8")], body: Data(body.utf8))
    }

    private static func json(_ part: String) -> [String: Any]? {
        Base64URL.decode(part).flatMap { try? JSONSerialization.jsonObject(with: $0) as? [String: Any] }
    }
}
