import AsyncHTTPClient
import BelfryCore
import Crypto
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1

/// Sends to Apple's provider API: HTTP/2 over TLS on one long-lived client (its connections
/// are kept and carry many concurrent streams), with token authentication.
final class APNsProvider: Sendable {
    struct Answer: Sendable, Equatable {
        var status: Int
        /// Apple's `reason`, when it refused the request.
        var reason: APNsReason?
        var retryAfter: TimeInterval?
    }

    let configuration: ServerConfiguration.APNs
    private let client: HTTPClient
    private let tokens: ProviderTokens
    private let now: @Sendable () -> Date

    init(configuration: ServerConfiguration.APNs, client: HTTPClient, now: @escaping @Sendable () -> Date) throws {
        self.configuration = configuration
        self.client = client
        self.now = now
        tokens = ProviderTokens(
            key: try P256.Signing.PrivateKey(pemRepresentation: configuration.keyPEM), keyID: configuration.keyID,
            teamID: configuration.teamID, now: now)
    }

    func baseURL(for environment: APNsEnvironment) -> String {
        configuration.url
            ?? (environment == .sandbox ? "https://api.sandbox.push.apple.com" : "https://api.push.apple.com")
    }

    /// The provider token requests carry now.
    func providerToken() throws -> String {
        try tokens.current()
    }

    /// Sends one notification. A refused provider token is replaced and the request sent once more.
    func send(_ request: APNsRequest) async throws -> Answer {
        let token = try tokens.current()
        let answer = try await post(request, token: token)
        guard answer.status == 403, answer.reason?.refusesProviderToken == true else { return answer }
        return try await post(request, token: try tokens.replace(token))
    }

    private func post(_ request: APNsRequest, token: String) async throws -> Answer {
        var http = HTTPClientRequest(url: "\(baseURL(for: request.environment))/3/device/\(request.deviceToken)")
        http.method = .POST
        http.headers.add(name: "authorization", value: "bearer \(token)")
        http.headers.add(name: "content-type", value: "application/json")
        for (name, value) in request.headers { http.headers.add(name: name, value: value) }
        http.body = .bytes(ByteBuffer(bytes: request.payload))
        let response = try await client.execute(http, timeout: .seconds(30))
        let body = try await response.body.collect(upTo: 64 * 1024)
        struct Failure: Decodable { var reason: String? }
        let reason =
            response.status == .ok ? nil : (try? JSONDecoder().decode(Failure.self, from: body))?.reason
        return Answer(
            status: Int(response.status.code), reason: reason.map(APNsReason.init),
            retryAfter: RetryAfter.seconds(response.headers.first(name: "retry-after"), now: now()))
    }
}

/// The provider token: an ES256 JWT with the key id and team id, kept and reused between 20
/// and 60 minutes as Apple asks (signed anew after 50), and replaced at once when refused.
final class ProviderTokens: Sendable {
    /// The key could not sign a provider token.
    struct SigningFailed: Error {
        var underlying: any Error
    }

    static let lifetime: TimeInterval = 50 * 60

    private let key: P256.Signing.PrivateKey
    private let keyID: String
    private let teamID: String
    private let now: @Sendable () -> Date
    private let cached = NIOLockedValueBox<(token: String, issuedAt: Date)?>(nil)

    init(key: P256.Signing.PrivateKey, keyID: String, teamID: String, now: @escaping @Sendable () -> Date) {
        self.key = key
        self.keyID = keyID
        self.teamID = teamID
        self.now = now
    }

    /// - Throws: when the key cannot sign; a request never goes out with an empty signature.
    func current() throws -> String {
        let now = self.now()
        return try cached.withLockedValue { cached in
            if let cached, now.timeIntervalSince(cached.issuedAt) < Self.lifetime, now >= cached.issuedAt {
                return cached.token
            }
            let token = try sign(issuedAt: now)
            cached = (token, now)
            return token
        }
    }

    /// A new token in place of `refused`, unless another request already replaced it.
    func replace(_ refused: String) throws -> String {
        let now = self.now()
        return try cached.withLockedValue { cached in
            if let cached, cached.token != refused { return cached.token }
            let token = try sign(issuedAt: now)
            cached = (token, now)
            return token
        }
    }

    private func sign(issuedAt: Date) throws -> String {
        let header = #"{"alg":"ES256","kid":"\#(keyID)"}"#
        let claims = #"{"iss":"\#(teamID)","iat":\#(Int(issuedAt.timeIntervalSince1970))}"#
        let input = "\(Data(header.utf8).base64URLEncodedString()).\(Data(claims.utf8).base64URLEncodedString())"
        // Apple checks a JOSE signature: r and s, 32 bytes each.
        let signature: Data
        do {
            signature = try key.signature(for: Data(input.utf8)).rawRepresentation
        } catch {
            throw SigningFailed(underlying: error)
        }
        return "\(input).\(signature.base64URLEncodedString())"
    }
}
