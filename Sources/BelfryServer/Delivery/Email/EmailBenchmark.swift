import BelfryCore
import BelfryMail
import Foundation
import NIOCore

/// Composes and sends many emails through the real email channel's parts (templates, MIME,
/// the pooled SMTP client), for `belfry-bench email`.
package enum EmailBenchmark {
    package struct Result: Sendable {
        package var sent: Int
        package var failed: Int
        package var seconds: Double
        /// One message as sent, so another client can send the same.
        package var sample: String
    }

    /// Sends `count` emails to a relay on loopback without TLS, over at most `connections`
    /// connections with as many sends in flight. Each is composed anew (templates, links, MIME)
    /// unless `prepared`, which sends one rendered message again and again: the SMTP client alone.
    package static func run(
        count: Int, connections: Int, port: Int, prepared: Bool = false, eventLoopGroup: any EventLoopGroup
    ) async throws -> Result {
        let client = try SMTPClient(
            configuration: .init(host: "127.0.0.1", port: port, security: .none, maxConnections: connections),
            group: eventLoopGroup)
        let composer = try EmailComposer(
            from: try MailAddress(parsing: "Belfry <notify@example.org>"), publicURL: "https://notify.example.org",
            signer: WebSigner(secret: "benchmark-secret-0123456789"), workspace: .demo, now: { Date() })
        let channel = ChannelDefinition(id: "email", kind: .email, name: "Email")
        @Sendable func message() throws -> MailMessage {
            let content = PushBenchmark.sampleContent()
            let delivery = Delivery(
                id: content.deliveryID, eventID: UUID(), channel: channel, attempt: 1, userID: UUID(),
                externalUserID: "grace", content: content, payload: .email(address: "grace@example.org", locale: "en"))
            return try composer.message(for: delivery, to: "grace@example.org", locale: "en")
        }
        // One message first, so a connection is open before timing starts.
        let first = try message()
        try await client.send(first)
        let rendered = first.rendered()
        let (sent, seconds) = try await PushBenchmark.run(count: count, concurrency: connections) {
            do {
                if prepared {
                    try await client.send(from: first.from.address, to: [first.to.address], message: rendered)
                } else {
                    try await client.send(try message())
                }
                return true
            } catch {
                return false
            }
        }
        await client.shutdown()
        return Result(sent: sent, failed: count - sent, seconds: seconds, sample: try message().rendered())
    }
}
