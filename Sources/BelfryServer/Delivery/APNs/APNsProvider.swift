import BelfryAPNs
import BelfryCore
import BelfryHTTP2
import Crypto
import Foundation
import NIOCore
import NIOHTTP1

/// Sends to Apple's provider API: HTTP/2 over TLS on one long-lived connection per origin
/// (``HTTP2Client``: every request a stream on it), with token authentication.
final class APNsProvider: Sendable {
    struct Answer: Sendable, Equatable {
        var status: Int
        /// Apple's `reason`, when it refused the request.
        var reason: APNsReason?
        var retryAfter: TimeInterval?
    }

    let configuration: ServerConfiguration.APNs
    private let client: HTTP2Client
    private let tokens: APNsProviderTokens
    private let now: @Sendable () -> Date
    private let production: HTTP2Client.Origin
    private let sandbox: HTTP2Client.Origin

    init(configuration: ServerConfiguration.APNs, client: HTTP2Client, now: @escaping @Sendable () -> Date) throws {
        self.configuration = configuration
        self.client = client
        self.now = now
        // A configured URL (a test server) takes both environments' requests.
        production = try HTTP2Client.Origin(configuration.url ?? "https://api.push.apple.com")
        sandbox = try HTTP2Client.Origin(configuration.url ?? "https://api.sandbox.push.apple.com")
        tokens = APNsProviderTokens(
            key: try P256.Signing.PrivateKey(pemRepresentation: configuration.keyPEM), keyID: configuration.keyID,
            teamID: configuration.teamID, now: now)
    }

    /// The loop of the connections to APNs: a task running on it sends without leaving it.
    var eventLoop: any EventLoop { client.eventLoop }

    /// The provider token requests carry now.
    func providerToken() throws -> String {
        try tokens.current()
    }

    /// The headers new in every push: the path names the device, and `apns-id` the push.
    static let unindexed = [":path", "apns-id"]

    /// Sends one notification. A refused provider token is replaced and the request sent once more.
    func send(_ request: APNsRequest) async throws -> Answer {
        let token = try tokens.current()
        let answer = try await post(request, token: token)
        guard answer.status == 403, answer.reason?.refusesProviderToken == true else { return answer }
        return try await post(request, token: try tokens.replace(token))
    }

    private func post(_ request: APNsRequest, token: String) async throws -> Answer {
        var headers = [("authorization", "bearer \(token)"), ("content-type", "application/json")]
        headers += request.headers
        let response = try await client.post(
            request.path, at: request.environment == .sandbox ? sandbox : production, headers: headers,
            body: ByteBuffer(bytes: request.payload), timeout: .seconds(30))
        let body = Data(buffer: response.body)
        struct Failure: Decodable { var reason: String? }
        let reason =
            response.status == 200 ? nil : (try? JSONDecoder().decode(Failure.self, from: body))?.reason
        return Answer(
            status: response.status, reason: reason.map(APNsReason.init),
            retryAfter: RetryAfter.seconds(response.headers.first(name: "retry-after"), now: now()))
    }
}
