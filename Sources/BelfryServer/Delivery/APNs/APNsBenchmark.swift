import BelfryAPNs
import BelfryCore
import BelfryHTTP2
import Foundation
import NIOConcurrencyHelpers
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
        let topic = apns.topic ?? "org.example"
        // Each push goes to a device of its own under an id of its own, as an event's pushes do:
        // one request sent again and again had HPACK shrink its path and `apns-id` to an index
        // byte each, which no real send gets. The devices and contents are made before timing,
        // as the queue reads them from the database; each push shapes its own payload.
        let pushes = (0...count).map { index in
            (
                APNsDevice(
                    token: String(format: "%064x", index + 1), environment: .production, authorization: .authorized),
                PushBenchmark.sampleContent()
            )
        }
        let next = NIOLockedValueBox(0)
        @Sendable func request() -> APNsRequest {
            let index = next.withLockedValue { next in
                defer { next = min(next + 1, count) }
                return next
            }
            let (device, content) = pushes[index]
            // An authorized device with every setting enabled always gets a request.
            return APNsPayload.request(APNsNotification(content), device: device, unread: 7, topic: topic)!
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
