import AsyncHTTPClient
import BelfryCore
import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import Vapor

/// Delivers notifications as signed JSON POSTs to the workspace's webhook URL.
///
/// The signature header is `Belfry-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`
/// with the webhook secret as key; README.md shows how a receiver checks it.
struct WebhookChannel: DeliveryChannel {
    let url: String
    let secret: String
    let client: HTTPClient
    let now: @Sendable () -> Date
    var maxAttempts: Int { 8 }
    var timeout: TimeAmount = .seconds(10)

    struct Envelope: Encodable {
        struct Notification: Encodable {
            var id: UUID
            var category: String
            var tenant: String
            var title: String
            var body: String
            var url: String?
            var data: JSONValue?
            var createdAt: Date

            enum CodingKeys: String, CodingKey {
                case id, category, tenant, title, body, url, data
                case createdAt = "created_at"
            }
        }

        var type: String
        var deliveryID: UUID
        var eventID: UUID
        var attempt: Int
        var user: [String: String]
        var notification: Notification
        /// The action the user chose, for `notification.action`.
        var action: NotificationAction?

        enum CodingKeys: String, CodingKey {
            case type, attempt, user, notification, action
            case deliveryID = "delivery_id"
            case eventID = "event_id"
        }
    }

    static func signature(secret: String, timestamp: Int, body: Data) -> String {
        let message = Data("\(timestamp).".utf8) + body
        let mac = HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: Data(secret.utf8)))
        return "t=\(timestamp),v1=" + mac.map { String(format: "%02x", $0) }.joined()
    }

    func deliver(_ job: DeliveryJob) async -> DeliveryOutcome {
        let body: Data
        do {
            let data = try job.data.map { try JSONDecoder().decode(JSONValue.self, from: Data($0.utf8)) }
            body = try Response.jsonEncoder.encode(
                Envelope(
                    type: job.kind == .action ? "notification.action" : "notification.delivered",
                    deliveryID: job.id, eventID: job.eventID, attempt: job.attempt, user: ["id": job.externalUserID],
                    notification: .init(
                        id: job.notificationID, category: job.category, tenant: job.tenant, title: job.title,
                        body: job.body, url: job.url, data: data, createdAt: job.createdAt),
                    action: job.action))
        } catch {
            return .permanentFailure(status: nil, error: "could not encode the webhook body: \(error)")
        }
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "User-Agent", value: "Belfry")
        request.headers.add(name: "Belfry-Delivery", value: job.id.uuidString)
        request.headers.add(
            name: "Belfry-Signature",
            value: Self.signature(secret: secret, timestamp: Int(now().timeIntervalSince1970), body: body))
        request.body = .bytes(ByteBuffer(data: body))
        do {
            let response = try await client.execute(request, timeout: timeout)
            // The body is not needed; reading a little of it frees the connection.
            _ = try? await response.body.collect(upTo: 64 * 1024)
            return Self.classify(status: Int(response.status.code), headers: response.headers, now: now())
        } catch {
            return .retry(status: nil, retryAfter: nil, error: "webhook request failed: \(error)")
        }
    }

    /// 2xx is delivered; 408, 425, 429 and 5xx are worth retrying (honouring Retry-After);
    /// any other answer is final.
    static func classify(status: Int, headers: HTTPHeaders, now: Date) -> DeliveryOutcome {
        switch status {
        case 200..<300:
            return .sent(status: status)
        case 408, 425, 429, 500..<600:
            return .retry(
                status: status, retryAfter: retryAfter(headers.first(name: "Retry-After"), now: now),
                error: "the webhook answered \(status)")
        default:
            return .permanentFailure(status: status, error: "the webhook answered \(status)")
        }
    }

    /// Retry-After is either seconds or an HTTP date (RFC 9110 §10.2.3).
    static func retryAfter(_ value: String?, now: Date) -> TimeInterval? {
        guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        if let seconds = Int(value) { return TimeInterval(max(seconds, 0)) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        return formatter.date(from: value).map { max($0.timeIntervalSince(now), 0) }
    }
}
