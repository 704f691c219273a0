import BelfryAPNs
import BelfryCore
import Foundation
import NIOHTTP1
import Testing

@testable import BelfryServer

@Suite("Provider answers: Retry-After, and what each answer means")
struct ProviderResultTests {
    static let now = Date(timeIntervalSince1970: 784_111_777)  // Sun, 06 Nov 1994 08:49:37 GMT

    @Test("Retry-After takes delta-seconds and the three HTTP-date forms (RFC 9110 §10.2.3, §5.6.7)")
    func retryAfter() {
        #expect(RetryAfter.seconds("120", now: Self.now) == 120)
        #expect(RetryAfter.seconds(" 0 ", now: Self.now) == 0)
        #expect(RetryAfter.seconds("99999999999999999999999", now: Self.now) == TimeInterval(Int.max))
        #expect(RetryAfter.seconds("Sun, 06 Nov 1994 08:51:37 GMT", now: Self.now) == 120)
        #expect(RetryAfter.seconds("Sunday, 06-Nov-94 08:51:37 GMT", now: Self.now) == 120)
        #expect(RetryAfter.seconds("Sun Nov  6 08:51:37 1994", now: Self.now) == 120)
        #expect(RetryAfter.seconds("Sun, 06 Nov 1994 08:00:00 GMT", now: Self.now) == 0, "a date passed is no wait")
        for unreadable in [nil, "", "soon", "-5", "1.5", "Sun, 06 Nov 1994 08:51:37"] {
            #expect(RetryAfter.seconds(unreadable, now: Self.now) == nil, "\(unreadable ?? "nil")")
        }
    }

    @Test("the APNs channel hands the core the category's push hints and the device's settings")
    func apnsAdapters() throws {
        let category = try #require(WorkspaceConfig.demo.category("edit-user-talk"))
        let content = DeliveryContent(
            deliveryID: UUID(), notificationID: UUID(), category: category, tenant: "enwiki", title: "T", body: "B",
            data: #"{"page":"Ada"}"#, createdAt: Date(), ttlSeconds: 60)
        let notification = APNsNotification(content)
        #expect(notification.id == content.deliveryID)
        #expect(notification.category == "edit-user-talk")
        #expect(notification.threadID == "talk")
        #expect(notification.interruptionLevel == .active)
        #expect(notification.urgent == (category.push.priority == .high))
        #expect(notification.data == content.data)
        #expect(notification.ttlSeconds == 60)

        let device = APNsDevice(
            PushDevice(
                id: UUID(), address: "ab12", environment: .sandbox, authorization: .provisional,
                settings: PushSettings(sound: .disabled, badge: .notSupported)))
        #expect(
            device
                == APNsDevice(
                    token: "ab12", environment: .sandbox, authorization: .provisional, showsAlerts: true,
                    showsBadge: false, playsSound: false))
        let unknownEnvironment = PushDevice(
            id: UUID(), address: "ab12", environment: nil, authorization: .denied, settings: PushSettings())
        #expect(APNsDevice(unknownEnvironment).environment == .production)
        #expect(APNsDevice(unknownEnvironment).authorization == .denied)
    }

    @Test("APNs answers: 200 delivered, retiring reasons and 410 retire, 429 and 5xx retry, others fail")
    func apnsResults() {
        let device = UUID()
        func result(_ status: Int, _ reason: String?, retryAfter: TimeInterval? = nil) -> DeliveryResult {
            APNsChannel.result(
                of: .init(status: status, reason: reason.map(APNsReason.init), retryAfter: retryAfter), device: device)
        }
        #expect(result(200, nil) == .delivered(status: 200))
        #expect(result(410, "Unregistered") == .retire(device: device, reason: "Unregistered", status: 410))
        #expect(result(400, "BadDeviceToken") == .retire(device: device, reason: "BadDeviceToken", status: 400))
        #expect(result(400, "BadTopic") == .failed(reason: "BadTopic", status: 400))
        #expect(
            result(429, "TooManyRequests", retryAfter: 30)
                == .retry(after: 30, reason: "TooManyRequests", status: 429))
        #expect(result(503, nil) == .retry(reason: "HTTP 503", status: 503))
        #expect(result(403, "ExpiredProviderToken") == .retry(reason: "ExpiredProviderToken", status: 403))
        #expect(result(403, "Forbidden") == .failed(reason: "Forbidden", status: 403))
    }

    @Test("Web Push answers: 2xx delivered, 404 and 410 retire, 413 fails, 429 and 5xx retry")
    func webPushResults() {
        let device = UUID()
        #expect(
            WebPushChannel.result(status: 201, body: "", retryAfter: nil, device: device) == .delivered(status: 201))
        #expect(
            WebPushChannel.result(status: 410, body: "gone", retryAfter: nil, device: device)
                == .retire(device: device, reason: "HTTP 410: gone", status: 410))
        #expect(
            WebPushChannel.result(status: 429, body: "", retryAfter: 7, device: device)
                == .retry(after: 7, reason: "HTTP 429", status: 429))
        guard
            case .failed(let reason, 413) = WebPushChannel.result(
                status: 413, body: "", retryAfter: nil, device: device)
        else {
            Issue.record("413 is final")
            return
        }
        #expect(reason.contains("too large"))
    }

    @Test("webhook answers: Retry-After as an HTTP-date is honoured")
    func webhookRetryAfterDate() {
        let headers: HTTPHeaders = ["Retry-After": "Sun, 06 Nov 1994 08:50:37 GMT"]
        #expect(
            WebhookChannel.result(status: 503, headers: headers, now: Self.now)
                == .retry(after: 60, reason: "the webhook answered 503", status: 503))
        #expect(
            WebhookChannel.result(status: 404, headers: [:], now: Self.now)
                == .failed(reason: "the webhook answered 404", status: 404))
    }
}

@Suite("The webhook's body, written directly")
struct WebhookBodyTests {
    /// The body as `JSONEncoder` wrote it before it was written directly: the reference.
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
            /// For a digest: the events it gathered.
            var batch: NotificationBatch?
            /// The language of the text, when the category's templates gave it.
            var locale: String?

            enum CodingKeys: String, CodingKey {
                case id, category, tenant, title, body, url, data, batch, locale
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

    /// What `JSONEncoder` makes of the same delivery: the envelope the body replaced.
    static func encoded(_ delivery: Delivery, action: NotificationAction?) throws -> Data {
        let content = delivery.content
        return try JSONCoding.encoder.encode(
            Envelope(
                type: action == nil ? "notification.delivered" : "notification.action",
                deliveryID: delivery.id, eventID: delivery.eventID, attempt: delivery.attempt,
                user: ["id": delivery.externalUserID],
                notification: .init(
                    id: content.notificationID, category: content.category.id, tenant: content.tenant,
                    title: content.title, body: content.body, url: content.url,
                    data: content.data.flatMap(JSONValue.storedData).map(JSONValue.object),
                    createdAt: content.createdAt, batch: content.batch, locale: content.locale),
                action: action))
    }

    static func parsed(_ data: Data) throws -> NSDictionary {
        try #require(try JSONSerialization.jsonObject(with: data) as? NSDictionary)
    }

    @Test("the body is the JSON the encoder wrote: escapes, dates, data, digests, actions, locales")
    func sameAsTheEncoder() throws {
        let category = try #require(WorkspaceConfig.demo.categories.first)
        let channel = try #require(WorkspaceConfig.demo.channels.first { $0.kind == .webhook })
        let texts = ["plain", "quote \" backslash \\ slash / tab \t newline \n bell \u{07}", "Grüße 🔔 ١٢٣", ""]
        let dates = [
            Date(timeIntervalSince1970: 0), Date(timeIntervalSince1970: 1_795_000_000.999),
            Date(timeIntervalSince1970: 951_782_400.5),  // 2000-02-29
            Date(timeIntervalSince1970: 4_107_542_399),  // 2100-02-28T23:59:59
        ]
        let batch = NotificationBatch(
            count: 3,
            items: [
                .init(
                    eventID: UUID(), title: "one", body: "b", url: nil, data: ["n": .number(1)],
                    createdAt: dates[1])
            ])
        var compared = 0
        for (index, text) in texts.enumerated() {
            for (dateIndex, date) in dates.enumerated() {
                let variant = (index + dateIndex) % 4
                let content = DeliveryContent(
                    deliveryID: UUID(), notificationID: UUID(), category: category, tenant: "t/\(text)",
                    title: text, body: text + "!", url: variant == 0 ? nil : "https://example.org/\(index)?a=b&c",
                    data: variant == 1 ? nil : #"{"page":"\#(index)","nested":{"list":[1,2.5,true,null,"\/x"]}}"#,
                    createdAt: date, batch: variant == 2 ? batch : nil, locale: variant == 3 ? "de-AT" : nil)
                let delivery = Delivery(
                    id: UUID(), eventID: UUID(), channel: channel, attempt: index + 1, userID: UUID(),
                    externalUserID: "user \(text)", content: content, payload: .webhook(action: nil))
                for action in [nil, NotificationAction(id: "yes", title: "Yes \(text)", opensApp: true)] {
                    let written = try WebhookChannel.body(of: delivery, action: action)
                    #expect(
                        try Self.parsed(written) == Self.parsed(try Self.encoded(delivery, action: action)),
                        "\(String(decoding: written, as: UTF8.self))")
                    compared += 1
                }
            }
        }
        #expect(compared == 32)
    }

    @Test("data that is not a JSON object is left out, as the encoder left it out")
    func damagedData() throws {
        let category = try #require(WorkspaceConfig.demo.categories.first)
        let channel = try #require(WorkspaceConfig.demo.channels.first { $0.kind == .webhook })
        for data in ["[1,2]", "{\"a\":", "not json", "{\"a\":1} trailing"] {
            let delivery = Delivery(
                id: UUID(), eventID: UUID(), channel: channel, attempt: 1, userID: UUID(), externalUserID: "u",
                content: DeliveryContent(
                    deliveryID: UUID(), notificationID: UUID(), category: category, tenant: "t", title: "T",
                    body: "B", data: data, createdAt: Date()),
                payload: .webhook(action: nil))
            let notification = try #require(
                try Self.parsed(WebhookChannel.body(of: delivery, action: nil))["notification"] as? NSDictionary)
            #expect(notification["data"] == nil, "\(data)")
        }
    }
}
