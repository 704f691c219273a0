import AsyncHTTPClient
import BelfryCore
import BelfryWebPush
import Foundation
import NIOCore

/// Measures Web Push sending with Belfry's own steps (message, RFC 8291 encryption with a new
/// key per message, cached VAPID token, the shared HTTP/2 client), for `belfry-bench webpush`.
package enum WebPushBenchmark {
    /// A typical message, as the service worker would receive it.
    package static func samplePayload() -> Data {
        WebPushMessage(PushBenchmark.sampleContent(), badge: 7).encoded()
    }

    /// Encrypts `payload` `count` times on the calling thread; returns the seconds taken.
    package static func encrypt(_ payload: Data, count: Int, p256dh: String, auth: String) throws -> Double {
        let keys = try WebPushSubscriberKeys(p256dh: p256dh, auth: auth)
        let started = ContinuousClock.now
        for _ in 0..<count { _ = try WebPushEncryption.encrypt(payload, for: keys) }
        return PushBenchmark.seconds(since: started)
    }

    /// The floor of an encryption: only the two P-256 operations RFC 8291 requires per message
    /// (a new key pair, and the agreement with the subscriber's key), `count` times.
    package static func floor(count: Int, p256dh: String, auth: String) throws -> Double {
        let keys = try WebPushSubscriberKeys(p256dh: p256dh, auth: auth)
        let started = ContinuousClock.now
        for _ in 0..<count {
            _ = try WebPushEncryption.ephemeralKey().sharedSecretFromKeyAgreement(with: keys.p256dh)
        }
        return PushBenchmark.seconds(since: started)
    }

    /// Sends `count` messages to `endpoint` with at most `concurrency` in flight; returns how
    /// many were accepted and the seconds taken.
    package static func send(
        _ payload: Data, count: Int, concurrency: Int, endpoint: String, p256dh: String, auth: String,
        extraCertificatesPEM: String, eventLoopGroup: any EventLoopGroup
    ) async throws -> (accepted: Int, seconds: Double) {
        let client = try HTTPClient.outbound(eventLoopGroup: eventLoopGroup, extraCertificatesPEM: extraCertificatesPEM)
        defer { _ = client.shutdown() }
        let keys = try WebPushSubscriberKeys(p256dh: p256dh, auth: auth)
        let tokens = VAPIDTokens(key: VAPIDKey(), subject: "mailto:ops@belfry.example", now: { Date() })
        guard let url = URL(string: endpoint), let origin = VAPIDKey.origin(of: url) else {
            throw URLError(.badURL)
        }
        let headers = WebPushMessage.headers(for: PushBenchmark.sampleContent())
        @Sendable func post() async throws -> Bool {
            var request = HTTPClientRequest(url: endpoint)
            request.method = .POST
            for (name, value) in headers { request.headers.add(name: name, value: value) }
            request.headers.add(name: "Authorization", value: try tokens.authorization(for: origin))
            request.body = .bytes(ByteBuffer(bytes: try WebPushEncryption.encrypt(payload, for: keys)))
            let response = try await client.execute(request, timeout: .seconds(30))
            _ = try await response.body.collect(upTo: 16 * 1024)
            return (200...299).contains(response.status.code)
        }
        _ = try await post()  // opens the connection before timing starts
        let (accepted, seconds) = try await PushBenchmark.run(count: count, concurrency: concurrency, post)
        return (accepted, seconds)
    }
}
