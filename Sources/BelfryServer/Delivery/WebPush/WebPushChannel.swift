import AsyncHTTPClient
import BelfryCore
import BelfryWebPush
import Fluent
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import SQLKit

/// Delivers to one browser subscription per delivery (RFC 8030), the message encrypted for
/// it (RFC 8291) and the request signed with the server's VAPID key (RFC 8292).
struct WebPushChannel: DeliveryChannel {
    /// Four weeks, what push services keep at most, when neither the event nor the category says.
    static let defaultTTL = 28 * 86_400

    let context: BelfryContext
    let database: @Sendable () -> any Database
    let client: HTTPClient
    let subject: String
    let tokens: VAPIDTokens

    var maxAttempts: Int { 8 }

    init(
        context: BelfryContext, database: @escaping @Sendable () -> any Database, client: HTTPClient,
        subject: String
    ) {
        self.context = context
        self.database = database
        self.client = client
        self.subject = subject
        tokens = VAPIDTokens(key: context.vapidKey, subject: subject, now: context.now)
    }

    func deliver(_ job: DeliveryJob) async -> DeliveryOutcome {
        let db = database()
        do {
            let target: PushTarget
            switch try await PushTarget.load(job, device: "subscription", context: context, on: db) {
            case .finished(let outcome): return outcome
            case .ready(let loaded): target = loaded
            }
            let (device, content) = (target.device, target.content)
            guard let endpoint = URL(string: device.address), let origin = VAPIDKey.origin(of: endpoint),
                let p256dh = device.p256dh, let auth = device.authSecret
            else {
                return .permanentFailure(status: nil, error: "the stored subscription is incomplete")
            }
            let keys = try WebPushSubscriberKeys(p256dh: p256dh, auth: auth)
            let body = try WebPushEncryption.encrypt(
                WebPushMessage(content, badge: target.unread).encoded(), for: keys)

            var request = HTTPClientRequest(url: device.address)
            request.method = .POST
            for (name, value) in WebPushMessage.headers(for: content) { request.headers.add(name: name, value: value) }
            request.headers.add(name: "Authorization", value: try tokens.authorization(for: origin))
            request.body = .bytes(ByteBuffer(bytes: body))
            let response = try await client.execute(request, timeout: .seconds(30))
            let text = String(buffer: try await response.body.collect(upTo: 16 * 1024))
            return try await outcome(
                status: Int(response.status.code), body: text,
                retryAfter: response.headers.first(name: "Retry-After").flatMap(TimeInterval.init), device: device,
                on: db)
        } catch {
            return .retry(status: nil, retryAfter: nil, error: "the push service could not be reached: \(error)")
        }
    }

    private func outcome(
        status: Int, body: String, retryAfter: TimeInterval?, device: DeviceStore.Device, on db: any Database
    ) async throws -> DeliveryOutcome {
        let detail = body.isEmpty ? "HTTP \(status)" : "HTTP \(status): \(body.prefix(300))"
        switch status {
        case 200...299:
            return .sent(status: status)
        case 404, 410:
            // The subscription expired or the user unsubscribed: it will never work again.
            try await DeviceStore(context: context).retire(device.id, reason: detail, on: db)
            return .permanentFailure(status: status, error: "\(detail); the subscription is retired")
        case 413:
            return .permanentFailure(
                status: status, error: "the push service refused the payload as too large (\(detail))")
        case 429, 500...599:
            return .retry(status: status, retryAfter: retryAfter, error: detail)
        default:
            return .permanentFailure(status: status, error: detail)
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
