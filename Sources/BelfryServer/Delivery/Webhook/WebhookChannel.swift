import BelfryCore
import BelfryHTTP1
import BelfryJSON
import Crypto
import Foundation
import NIOCore
import NIOHTTP1

/// Delivers notifications as signed JSON POSTs to the workspace's webhook URL.
///
/// The signature header is `Belfry-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`
/// with the webhook secret as key; docs/delivery.md shows how a receiver checks it. The same
/// request is signed per Standard Webhooks too (`webhook-id`, `webhook-timestamp`,
/// `webhook-signature`), so that a receiver may use one of its libraries.
struct WebhookChannel: DeliveryProvider {
    let url: HTTP1Client.Target
    let client: HTTP1Client
    let now: @Sendable () -> Date
    /// The Standard Webhooks signature's HMAC, keyed once from the secret.
    let standardKey: HMAC<SHA256>
    /// `Belfry-Signature`'s HMAC, keyed once with the secret's bytes.
    let signingKey: HMAC<SHA256>

    init(url: String, secret: String, client: HTTP1Client, now: @escaping @Sendable () -> Date) throws {
        self.url = try HTTP1Client.Target(url)
        self.client = client
        self.now = now
        standardKey = Self.standardKey(secret)
        signingKey = HMAC(key: SymmetricKey(data: Data(secret.utf8)))
    }

    var maxAttempts: Int { 8 }
    /// One request per connection of the client's pool for the receiver's host: a claimed
    /// delivery is sent at once, never left waiting for a connection while its lease runs out
    /// (and another instance claims it again).
    var concurrency: Int { Self.inFlight }
    static let inFlight = 128
    /// Sends run on the client's loop: the request is written and its answer read without a
    /// hop to another thread.
    var sendLoop: (any EventLoop)? { client.eventLoop }
    var timeout: TimeAmount = .seconds(10)

    /// Standard Webhooks' `webhook-signature`: `v1,` and the base64 HMAC-SHA256 of
    /// `<id>.<timestamp>.<body>`, keyed by ``standardKey(_:)``. The HMAC comes keyed: keying
    /// one anew for each request (its pads, two hash blocks) was a third of the signatures' cost.
    static func standardSignature(key: HMAC<SHA256>, id: String, timestamp: Int, body: Data) -> String {
        var hmac = key
        hmac.update(data: Data("\(id).\(timestamp).".utf8))
        hmac.update(data: body)
        return "v1," + Data(hmac.finalize()).base64EncodedString()
    }

    /// The Standard Webhooks key of a secret: a `whsec_` secret's base64 bytes, else the
    /// secret's own bytes (a receiver's library then takes `whsec_` and their base64).
    static func standardKey(_ secret: String) -> HMAC<SHA256> {
        if secret.hasPrefix("whsec_"), let bytes = Data(base64Encoded: String(secret.dropFirst(6))), !bytes.isEmpty {
            return HMAC(key: SymmetricKey(data: bytes))
        }
        return HMAC(key: SymmetricKey(data: Data(secret.utf8)))
    }

    static func signature(secret: String, timestamp: Int, body: Data) -> String {
        signature(key: HMAC(key: SymmetricKey(data: Data(secret.utf8))), timestamp: timestamp, body: body)
    }

    /// `Belfry-Signature` with the secret's key made once.
    static func signature(key: HMAC<SHA256>, timestamp: Int, body: Data) -> String {
        var hmac = key
        hmac.update(data: Data("\(timestamp).".utf8))
        hmac.update(data: body)
        return "t=\(timestamp),v1=" + hmac.finalize().hexEncoded
    }

    /// The request's body, written directly with its keys sorted (a tenth of the time
    /// `JSONEncoder` took, which was most of a delivery's own work; `WebhookBodyTests` compares
    /// the two). The event's data is
    /// JSON already, stored at intake; it goes in as it is when it is an object.
    static func body(of delivery: Delivery, action: NotificationAction?) throws -> Data {
        let content = delivery.content
        var json = JSONBytes()
        if let action {
            json.field("action", raw: String(decoding: try JSONCoding.encoder.encode(action), as: UTF8.self))
        }
        json.field("attempt", delivery.attempt)
        json.field("delivery_id", delivery.id.upperCaseText)
        json.field("event_id", delivery.eventID.upperCaseText)
        json.open("notification")
        if let batch = content.batch {
            json.field("batch", raw: String(decoding: try JSONCoding.encoder.encode(batch), as: UTF8.self))
        }
        json.field("body", content.body)
        json.field("category", content.category.id)
        json.field("created_at", date: content.createdAt)
        if let data = content.data, data.utf8.first == UInt8(ascii: "{"), JSONSyntax.problem(in: data.utf8) == nil {
            json.field("data", raw: data)
        }
        json.field("id", content.notificationID.upperCaseText)
        if let locale = content.locale { json.field("locale", locale) }
        json.field("tenant", content.tenant)
        json.field("title", content.title)
        if let url = content.url { json.field("url", url) }
        json.close()
        json.field("type", action == nil ? "notification.delivered" : "notification.action")
        json.open("user")
        json.field("id", delivery.externalUserID)
        json.close()
        return json.finish()
    }

    func deliver(_ delivery: Delivery) async -> DeliveryResult {
        guard case .webhook(let action) = delivery.payload else {
            return .failed(reason: "a webhook channel got a delivery of another kind")
        }
        let body: Data
        do {
            body = try Self.body(of: delivery, action: action)
        } catch {
            return .failed(reason: "could not encode the webhook body: \(error)")
        }
        let timestamp = Int(now().timeIntervalSince1970)
        // Standard Webhooks: the message id stays the same across a delivery's attempts.
        return await Self.post(
            body, to: url, id: delivery.id.lowerCaseText, key: standardKey, timestamp: timestamp,
            headers: [
                ("Belfry-Delivery", delivery.id.upperCaseText),
                ("Belfry-Signature", Self.signature(key: signingKey, timestamp: timestamp, body: body)),
            ], client: client, timeout: timeout, failure: "webhook request failed", now: now)
    }

    /// POSTs `body` as JSON to `url`, signed per Standard Webhooks with `key` under the message
    /// `id` (the same on every attempt), with `headers` besides; says what the answer means
    /// (``result(status:headers:now:)``), or retries after `failure` when there is none.
    static func post(
        _ body: Data, to url: HTTP1Client.Target, id: String, key: HMAC<SHA256>, timestamp: Int,
        headers: [(String, String)] = [], client: HTTP1Client, timeout: TimeAmount, failure: String,
        now: @Sendable () -> Date
    ) async -> DeliveryResult {
        let fields =
            [("Content-Type", "application/json"), ("User-Agent", "Belfry")] + headers + [
                ("webhook-id", id), ("webhook-timestamp", String(timestamp)),
                ("webhook-signature", standardSignature(key: key, id: id, timestamp: timestamp, body: body)),
            ]
        do {
            let response = try await client.post(ByteBuffer(data: body), to: url, headers: fields, timeout: timeout)
            return result(status: response.status, headers: response.headers, now: now())
        } catch {
            // A header that cannot be sent will not be sendable on a later attempt either.
            if case .invalidHeader? = error as? HTTP1Client.Failure { return .failed(reason: "\(failure): \(error)") }
            return .retry(reason: "\(failure): \(error)")
        }
    }

    /// 2xx is delivered; 408, 425, 429 and 5xx are worth retrying (honouring Retry-After);
    /// any other answer is final.
    static func result(status: Int, headers: HTTPHeaders, now: Date) -> DeliveryResult {
        switch status {
        case 200..<300:
            return .delivered(status: status)
        case 408, 425, 429, 500..<600:
            return .retry(
                after: RetryAfter.seconds(headers.first(name: "Retry-After"), now: now),
                reason: "the webhook answered \(status)", status: status)
        default:
            return .failed(reason: "the webhook answered \(status)", status: status)
        }
    }
}
