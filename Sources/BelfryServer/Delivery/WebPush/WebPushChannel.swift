import AsyncHTTPClient
import BelfryCore
import BelfryWebPush
import Foundation
import NIOConcurrencyHelpers
import NIOCore

/// Delivers to one browser subscription per delivery (RFC 8030), the message encrypted for
/// it (RFC 8291) and the request signed with the server's VAPID key (RFC 8292).
struct WebPushChannel: DeliveryProvider {
    /// Four weeks, what push services keep at most, when neither the event nor the category says.
    static let defaultTTL = 28 * 86_400

    let clients: PinnedClients
    /// The VAPID key and contact of each app.
    let tokens: ByApp<VAPIDTokens>
    let now: @Sendable () -> Date

    var maxAttempts: Int { 8 }
    /// Push services are many hosts: each gets a share (one connection's worth of requests each,
    /// so that none waits for a connection), and a slow one holds only its own.
    var concurrency: Int { 4 * HTTPClient.outboundConnectionsPerHost }
    var concurrencyPerOrigin: Int { HTTPClient.outboundConnectionsPerHost }

    func origin(of delivery: Delivery) -> String? {
        delivery.device.flatMap { URL(string: $0.address) }.flatMap(VAPIDKey.origin(of:))
    }

    /// How long a push service has to answer: they answer in well under a second, and a
    /// subscription pointing at a host that never answers holds a slot no longer than this.
    static let timeout: TimeAmount = .seconds(5)

    /// - Parameter keys: each app's VAPID key and contact.
    init(clients: PinnedClients, keys: ByApp<(VAPIDKey, subject: String)>, now: @escaping @Sendable () -> Date) {
        self.clients = clients
        self.now = now
        tokens = ByApp(
            implicit: keys.implicit.map { VAPIDTokens(key: $0.0, subject: $0.subject, now: now) },
            apps: keys.apps.mapValues { VAPIDTokens(key: $0.0, subject: $0.subject, now: now) })
    }

    func deliver(_ delivery: Delivery) async -> DeliveryResult {
        guard case .push(let device?, let unread) = delivery.payload else {
            return .failed(reason: "the subscription was removed")
        }
        guard let tokens = tokens[device.app] else { return ByApp<VAPIDTokens>.missing(device.app, .webPush) }
        let content = delivery.content
        guard let endpoint = URL(string: device.address), let origin = VAPIDKey.origin(of: endpoint),
            let p256dh = device.p256dh, let auth = device.authSecret
        else {
            return .failed(reason: "the stored subscription is incomplete")
        }
        let client: HTTPClient
        do {
            client = try await clients.client(for: endpoint)
        } catch .notPublic(let host, let address) {
            return .retire(
                device: device.id, reason: "the push service \(host) resolves to \(address), which is not public")
        } catch {
            return .retry(reason: "the push service could not be reached: \(error)")
        }
        do {
            let keys = try WebPushSubscriberKeys(p256dh: p256dh, auth: auth)
            let body = try WebPushEncryption.encrypt(
                WebPushMessage(content, badge: unread).encoded(), for: keys)

            var request = HTTPClientRequest(url: device.address)
            request.method = .POST
            for (name, value) in WebPushMessage.headers(for: content) { request.headers.add(name: name, value: value) }
            request.headers.add(name: "Authorization", value: try tokens.authorization(for: origin))
            request.body = .bytes(ByteBuffer(bytes: body))
            let response = try await client.execute(request, timeout: Self.timeout)
            let text = String(buffer: try await response.body.collect(upTo: 16 * 1024))
            return Self.result(
                status: Int(response.status.code), body: text,
                retryAfter: RetryAfter.seconds(response.headers.first(name: "Retry-After"), now: now()),
                device: device.id)
        } catch {
            return .retry(reason: "the push service could not be reached: \(error)")
        }
    }

    static func result(status: Int, body: String, retryAfter: TimeInterval?, device: UUID) -> DeliveryResult {
        let detail = body.isEmpty ? "HTTP \(status)" : "HTTP \(status): \(body.prefix(300))"
        switch status {
        case 200...299:
            return .delivered(status: status)
        case 404, 410:
            // The subscription expired or the user unsubscribed: it will never work again.
            return .retire(device: device, reason: detail, status: status)
        case 413:
            return .failed(reason: "the push service refused the payload as too large (\(detail))", status: status)
        case 429, 500...599:
            return .retry(after: retryAfter, reason: detail, status: status)
        default:
            return .failed(reason: detail, status: status)
        }
    }
}

/// VAPID `Authorization` values per push-service origin: each token is valid 12 hours (RFC
/// 8292 allows up to 24) and is replaced an hour before it expires.
final class VAPIDTokens: Sendable {
    static let lifetime: TimeInterval = 12 * 3600
    static let renewBefore: TimeInterval = 3600

    private let key: VAPIDKey
    private let subject: String
    private let now: @Sendable () -> Date
    private let cache = NIOLockedValueBox<[String: (value: String, expires: Date)]>([:])

    init(key: VAPIDKey, subject: String, now: @escaping @Sendable () -> Date) {
        self.key = key
        self.subject = subject
        self.now = now
    }

    func authorization(for origin: String) throws -> String {
        let now = self.now()
        if let cached = cache.withLockedValue({ $0[origin] }), cached.expires.timeIntervalSince(now) > Self.renewBefore
        {
            return cached.value
        }
        let expires = now.addingTimeInterval(Self.lifetime)
        let value = try key.authorization(audience: origin, subject: subject, expiration: expires)
        cache.withLockedValue { $0[origin] = (value, expires) }
        return value
    }
}
