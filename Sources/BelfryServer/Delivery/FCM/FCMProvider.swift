import AsyncHTTPClient
import BelfryFCM
import BelfryHTTP2
import Foundation
import NIOCore

/// Sends to FCM's HTTP v1 API: HTTP/2 over TLS on one long-lived connection (``HTTP2Client``:
/// every send a stream on it), with an OAuth access token from the service account, granted
/// through the outbound HTTP client at the account's `token_uri`.
final class FCMProvider: Sendable {
    enum Answer: Sendable, Equatable {
        case sent
        case refused(FCMFailure, retryAfter: TimeInterval?)
    }

    let account: FCMServiceAccount
    private let client: HTTP2Client
    private let tokens: FCMAccessTokens
    private let origin: HTTP2Client.Origin
    private let path: String
    private let now: @Sendable () -> Date

    init(
        configuration: ServerConfiguration.FCM, client: HTTP2Client, grants: HTTPClient,
        now: @escaping @Sendable () -> Date
    ) throws {
        account = try FCMServiceAccount(json: Data(configuration.serviceAccountJSON.utf8))
        self.client = client
        self.now = now
        origin = try HTTP2Client.Origin(configuration.url)
        path = "/v1/projects/\(account.projectID)/messages:send"
        tokens = FCMAccessTokens(account: account, now: now) { grant in
            var request = HTTPClientRequest(url: grant.url)
            request.method = .POST
            request.headers.add(name: "content-type", value: "application/x-www-form-urlencoded")
            request.body = .bytes(ByteBuffer(string: grant.form))
            let response = try await grants.execute(request, timeout: .seconds(15))
            let body = try await response.body.collect(upTo: 64 * 1024)
            return .init(status: Int(response.status.code), body: Data(buffer: body))
        }
    }

    /// The loop of the connection to FCM: a task running on it sends without leaving it.
    var eventLoop: any EventLoop { client.eventLoop }

    /// The access token sends carry now.
    func accessToken() async throws -> String {
        try await tokens.current()
    }

    /// Sends one message. A refused access token is replaced and the message sent once more.
    /// - Throws: `FCMAccessTokens.Failure` when no access token could be had, or the
    ///   connection's error.
    func send(_ request: FCMRequest) async throws -> Answer {
        let token = try await tokens.current()
        let answer = try await post(request, token: token)
        guard case .refused(let failure, _) = answer, failure.refusesAccessToken else { return answer }
        return try await post(request, token: try await tokens.replace(token))
    }

    private func post(_ request: FCMRequest, token: String) async throws -> Answer {
        let response = try await client.post(
            path, at: origin,
            headers: [("authorization", "Bearer \(token)"), ("content-type", "application/json; charset=utf-8")],
            body: ByteBuffer(bytes: request.body), timeout: .seconds(30))
        guard response.status != 200 else { return .sent }
        return .refused(
            FCMFailure(status: response.status, body: Data(buffer: response.body)),
            retryAfter: RetryAfter.seconds(response.headers.first(name: "retry-after"), now: now()))
    }
}
