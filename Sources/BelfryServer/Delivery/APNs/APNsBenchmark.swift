import BelfryAPNs
import BelfryCore
import BelfryHTTP2
import Foundation
import NIOCore

/// Sends many notifications through the real APNs provider (payload shaping, provider token,
/// the shared HTTP/2 client), for `belfry-bench apns`.
package enum APNsBenchmark {
    /// Sends `count` pushes to one device token with at most `concurrency` in flight.
    package static func run(
        count: Int, concurrency: Int, apns: ServerConfiguration.APNs, extraCertificatesPEM: String,
        eventLoopGroup: any EventLoopGroup
    ) async throws -> PushBenchmark.Result {
        let client = try HTTP2Client(
            group: eventLoopGroup, tls: try .outbound(extraCertificatesPEM: extraCertificatesPEM),
            unindexed: APNsProvider.unindexed)
        defer { Task { await client.shutdown() } }
        let provider = try APNsProvider(configuration: apns, client: client, now: { Date() })
        let device = APNsDevice(
            token: String(repeating: "ab12", count: 16), environment: .production, authorization: .authorized)
        let topic = apns.topic ?? "org.example"
        // The content is read once, as a delivery's is read from the database before its attempt;
        // each push shapes its own payload from it.
        let content = PushBenchmark.sampleContent()
        @Sendable func request() -> APNsRequest {
            // An authorized device with every setting enabled always gets a request.
            APNsPayload.request(APNsNotification(content), device: device, unread: 7, topic: topic)!
        }
        // One request first, so the connection is open before timing starts.
        _ = try await provider.send(request())
        let (sent, seconds) = try await PushBenchmark.run(
            count: count, concurrency: concurrency, on: provider.eventLoop
        ) {
            try await provider.send(request()).status == 200
        }
        let sample = request()
        return PushBenchmark.Result(
            sent: sent, failed: count - sent, seconds: seconds, path: sample.path,
            headers: sample.headers + [("authorization", "bearer \(try provider.providerToken())")],
            payload: sample.payload)
    }
}
