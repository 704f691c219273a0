import AsyncHTTPClient
import BelfryCore
import BelfryFCM
import BelfryHTTP2
import Foundation
import NIOCore

/// Sends many messages through the real FCM provider (message shaping, the access token, the
/// shared HTTP/2 client), for `belfry-bench fcm`.
package enum FCMBenchmark {
    /// Sends `count` messages to one registration token with at most `concurrency` in flight.
    package static func run(
        count: Int, concurrency: Int, fcm: ServerConfiguration.FCM, extraCertificatesPEM: String,
        eventLoopGroup: any EventLoopGroup
    ) async throws -> PushBenchmark.Result {
        let client = try HTTP2Client(
            group: eventLoopGroup, tls: try .outbound(extraCertificatesPEM: extraCertificatesPEM))
        let grants = try HTTPClient.outbound(eventLoopGroup: eventLoopGroup, extraCertificatesPEM: extraCertificatesPEM)
        defer {
            Task {
                await client.shutdown()
                try? await grants.shutdown()
            }
        }
        let provider = try FCMProvider(configuration: fcm, client: client, grants: grants, now: { Date() })
        let device = FCMDevice(token: "bench-token:APA91b" + String(repeating: "x", count: 140))
        // The content is read once, as a delivery's is read from the database before its attempt;
        // each send shapes its own message from it.
        let content = PushBenchmark.sampleContent()
        @Sendable func request() -> FCMRequest {
            // A device that allows notifications always gets a request.
            FCMPayload.request(FCMNotification(content), device: device, unread: 7)!
        }
        // One send first, so the connection is open and the access token granted before timing starts.
        guard try await provider.send(request()) == .sent else { throw FCMBenchmarkFailed() }
        let (sent, seconds) = try await PushBenchmark.run(
            count: count, concurrency: concurrency, on: provider.eventLoop
        ) {
            try await provider.send(request()) == .sent
        }
        return PushBenchmark.Result(
            sent: sent, failed: count - sent, seconds: seconds,
            path: "/v1/projects/\(provider.account.projectID)/messages:send",
            headers: [
                ("authorization", "Bearer \(try await provider.accessToken())"),
                ("content-type", "application/json; charset=utf-8"),
            ],
            payload: request().body)
    }

    struct FCMBenchmarkFailed: Error, CustomStringConvertible {
        var description: String { "the first send was refused" }
    }
}
