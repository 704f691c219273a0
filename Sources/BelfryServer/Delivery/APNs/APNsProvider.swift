import AsyncHTTPClient
import BelfryAPNs
import BelfryCore
import Crypto
import Foundation
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
    private let tokens: APNsProviderTokens
    private let now: @Sendable () -> Date

    init(configuration: ServerConfiguration.APNs, client: HTTPClient, now: @escaping @Sendable () -> Date) throws {
        self.configuration = configuration
        self.client = client
        self.now = now
        tokens = APNsProviderTokens(
            key: try P256.Signing.PrivateKey(pemRepresentation: configuration.keyPEM), keyID: configuration.keyID,
            teamID: configuration.teamID, now: now)
    }

    func baseURL(for environment: APNsDevice.Environment) -> String {
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
        var http = HTTPClientRequest(url: baseURL(for: request.environment) + request.path)
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
