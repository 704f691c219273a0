import AsyncHTTPClient
import BelfryCore
import Foundation
import NIOCore
import NIOSSL

/// Sends many notifications through the real APNs provider (payload shaping, provider token,
/// the shared HTTP/2 client), for `belfry-bench apns`.
public enum APNsBenchmark {
    public struct Result: Sendable {
        public var sent: Int
        public var failed: Int
        public var seconds: Double
        /// What was sent, so another client can send the same: path, headers and body.
        public var path: String
        public var headers: [(String, String)]
        public var payload: Data
    }

    /// Sends `count` pushes to one device token with at most `concurrency` in flight.
    public static func run(
        count: Int, concurrency: Int, apns: ServerConfiguration.APNs, extraCertificatesPEM: String,
        eventLoopGroup: any EventLoopGroup
    ) async throws -> Result {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMBytes(Array(extraCertificatesPEM.utf8)))]
        var configuration = HTTPClient.Configuration(tlsConfiguration: tls, redirectConfiguration: .disallow)
        configuration.httpVersion = .automatic
        let client = HTTPClient(eventLoopGroup: eventLoopGroup, configuration: configuration)
        defer { _ = client.shutdown() }
        let provider = try APNsProvider(configuration: apns, client: client, now: { Date() })

        let category = WorkspaceConfig.demo.mentionCategory
        let device = DeviceStore.Device(
            id: UUID(), userID: UUID(), platform: .apns, address: String(repeating: "ab12", count: 16),
            environment: .production, authorization: .authorized, settings: PushSettings(), createdAt: Date(),
            updatedAt: Date())
        func request() -> APNsRequest {
            let content = PushContent(
                deliveryID: UUID(), notificationID: UUID(), category: category, tenant: "enwiki",
                title: "Ada mentioned you", body: "in Talk:Bell tower: what do you think, @Grace?",
                url: "https://en.example.org/wiki/Talk:Bell_tower", createdAt: Date())
            // An authorized device with every setting enabled always gets a request.
            return APNsPayload.request(content, device: device, unread: 7, topic: apns.topic ?? "org.example")!
        }
        // One request first, so the connection is open before timing starts.
        _ = try await provider.send(request())

        let started = ContinuousClock.now
        let (sent, failed) = try await withThrowingTaskGroup(of: Bool.self) { group in
            var next = 0
            var sent = 0
            var failed = 0
            func add() {
                let request = request()
                group.addTask { try await provider.send(request).status == 200 }
                next += 1
            }
            while next < min(concurrency, count) { add() }
            while let ok = try await group.next() {
                if ok { sent += 1 } else { failed += 1 }
                if next < count { add() }
            }
            return (sent, failed)
        }
        let elapsed = started.duration(to: .now)
        let sample = request()
        var headers = sample.headers
        headers.append(
            (
                "authorization",
                "bearer \(ProviderTokens(key: try .init(pemRepresentation: apns.keyPEM), keyID: apns.keyID, teamID: apns.teamID, now: { Date() }).current())"
            ))
        return Result(
            sent: sent, failed: failed,
            seconds: Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18,
            path: "/3/device/\(sample.deviceToken)", headers: headers, payload: sample.payload)
    }
}
