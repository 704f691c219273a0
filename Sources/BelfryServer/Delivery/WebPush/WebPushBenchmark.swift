import AsyncHTTPClient
import BelfryCore
import BelfryWebPush
import Foundation
import NIOCore
import NIOSSL

/// Measures Web Push sending with Belfry's own steps (message, RFC 8291 encryption with a new
/// key per message, cached VAPID token, the shared HTTP/2 client), for `belfry-bench webpush`.
public enum WebPushBenchmark {
    /// A typical message, as the service worker would receive it.
    public static func samplePayload() -> Data {
        let category = WorkspaceConfig.demo.mentionCategory
        let content = PushContent(
            deliveryID: UUID(), notificationID: UUID(), category: category, tenant: "enwiki",
            title: "Ada mentioned you", body: "in Talk:Bell tower: what do you think, @Grace?",
            url: "https://en.example.org/wiki/Talk:Bell_tower", createdAt: Date())
        return WebPushMessage(content, badge: 7).encoded()
    }

    /// Encrypts `payload` `count` times on the calling thread; returns the seconds taken.
    public static func encrypt(_ payload: Data, count: Int, p256dh: String, auth: String) throws -> Double {
        let keys = try WebPushSubscriberKeys(p256dh: p256dh, auth: auth)
        let started = ContinuousClock.now
        for _ in 0..<count { _ = try WebPushEncryption.encrypt(payload, for: keys) }
        return seconds(since: started)
    }

    /// Sends `count` messages to `endpoint` with at most `concurrency` in flight; returns how
    /// many were accepted and the seconds taken.
    public static func send(
        _ payload: Data, count: Int, concurrency: Int, endpoint: String, p256dh: String, auth: String,
        extraCertificatesPEM: String, eventLoopGroup: any EventLoopGroup
    ) async throws -> (accepted: Int, seconds: Double) {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMBytes(Array(extraCertificatesPEM.utf8)))]
        var configuration = HTTPClient.Configuration(tlsConfiguration: tls, redirectConfiguration: .disallow)
        configuration.httpVersion = .automatic
        let client = HTTPClient(eventLoopGroup: eventLoopGroup, configuration: configuration)
        defer { _ = client.shutdown() }
        let keys = try WebPushSubscriberKeys(p256dh: p256dh, auth: auth)
        let tokens = VAPIDTokens(key: VAPIDKey(), subject: "mailto:ops@belfry.example", now: { Date() })
        guard let url = URL(string: endpoint), let origin = VAPIDKey.origin(of: url) else {
            throw URLError(.badURL)
        }
        let category = WorkspaceConfig.demo.mentionCategory
        let headers = WebPushMessage.headers(
            for: PushContent(
                deliveryID: UUID(), notificationID: UUID(), category: category, tenant: "enwiki", title: "",
                body: "", createdAt: Date()))
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
        let started = ContinuousClock.now
        let accepted = try await withThrowingTaskGroup(of: Bool.self) { group in
            var next = 0
            var accepted = 0
            while next < min(concurrency, count) {
                group.addTask { try await post() }
                next += 1
            }
            while let ok = try await group.next() {
                if ok { accepted += 1 }
                if next < count {
                    group.addTask { try await post() }
                    next += 1
                }
            }
            return accepted
        }
        return (accepted, seconds(since: started))
    }

    private static func seconds(since start: ContinuousClock.Instant) -> Double {
        let elapsed = start.duration(to: .now)
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }
}

extension WorkspaceConfig {
    /// The demo's `mention` category, which the benchmarks send.
    var mentionCategory: CategoryDefinition {
        guard let category = category("mention") else {
            preconditionFailure("the built-in demo workspace has a \"mention\" category; its tests check it")
        }
        return category
    }
}
