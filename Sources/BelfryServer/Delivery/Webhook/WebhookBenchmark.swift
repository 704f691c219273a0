import BelfryCore
import BelfryHTTP1
import Foundation
import NIOCore

/// The webhook channel alone, without the queue: signed POSTs of a typical notification to
/// `url` through the outbound client, the ceiling `scripts/benchmark_delivery.py` compares the
/// queue with.
package enum WebhookBenchmark {
    /// Sends `count` deliveries with at most `concurrency` in flight.
    /// - Returns: how many the receiver took (2xx), the seconds and this process's CPU seconds.
    package static func run(
        url: String, count: Int, concurrency: Int, eventLoopGroup: any EventLoopGroup
    ) async throws -> (sent: Int, seconds: Double, cpuSeconds: Double) {
        let client = try HTTP1Client(
            group: eventLoopGroup, tls: try .outbound(extraCertificatesPEM: nil),
            connectionsPerOrigin: WebhookChannel.inFlight)
        let channel = try WebhookChannel(
            url: url, secret: "benchmark-secret-0123456789", client: client, now: { Date() })
        let webhook = ChannelDefinition(id: "webhook", kind: .webhook, name: "Webhook")
        let content = PushBenchmark.sampleContent()
        // The queue's deliveries come with their ids; `UUID()` here would open the system's
        // random device three times a request, a tenth of the CPU measured.
        @Sendable func delivery() -> Delivery {
            let now = Date()
            return Delivery(
                id: .timeOrdered(at: now), eventID: content.notificationID, channel: webhook, attempt: 1,
                userID: content.deliveryID, externalUserID: "reader-1", content: content, payload: .webhook(action: nil)
            )
        }
        // One request first, so that timing starts with a connection open, as the queue's does.
        _ = await channel.deliver(delivery())
        let cpu = ProcessFigures.cpuSeconds
        let (sent, seconds) = try await PushBenchmark.run(count: count, concurrency: concurrency, on: channel.sendLoop)
        {
            await channel.deliver(delivery()) == .delivered(status: 200)
        }
        let cpuSeconds = ProcessFigures.cpuSeconds - cpu
        await client.shutdown()
        return (sent, seconds, cpuSeconds)
    }
}
