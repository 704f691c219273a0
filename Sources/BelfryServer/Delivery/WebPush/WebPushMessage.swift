import BelfryCore
import BelfryWebPush
import Crypto
import Foundation

/// What a browser's service worker receives (decrypted): enough to show the notification,
/// its actions and the badge, and to open the right page on click.
struct WebPushMessage: Encodable, Sendable {
    struct Action: Encodable, Sendable {
        var action: String
        var title: String
        /// Whether choosing it opens the app: an SDK routes only these to a screen.
        var opensApp: Bool

        enum CodingKeys: String, CodingKey {
            case action, title
            case opensApp = "opens_app"
        }
    }

    /// Absent from a background message, which the service worker does not show.
    var title: String?
    var body: String?
    var url: String?
    var imageURL: String?
    var notificationID: UUID
    var category: String
    var tenant: String
    var actions: [Action]?
    /// The user's unread inbox count when sent.
    var badge: Int
    /// The event's `data`.
    var data: JSONValue?
    /// For a digest: the count, and as many of its items as fit in a push message.
    var batch: NotificationBatch?
    /// A background message: the service worker updates the badge and tells open pages, and
    /// shows nothing.
    var background: Bool?

    enum CodingKeys: String, CodingKey {
        case title, body, url, category, tenant, actions, badge, data, batch, background
        case imageURL = "image_url"
        case notificationID = "notification_id"
    }

    init(_ content: DeliveryContent, badge: Int) {
        title = content.title
        body = content.body
        url = content.url
        imageURL = content.imageURL
        notificationID = content.notificationID
        category = content.category.id
        tenant = content.tenant
        actions = content.category.actions.map { Action(action: $0.id, title: $0.title, opensApp: $0.opensApp) }
        self.badge = badge
        data = content.data.flatMap(JSONValue.storedData).map(JSONValue.object)
        batch = content.batch
        if content.background {
            (title, body, imageURL, actions, background) = (nil, nil, nil, nil, true)
        }
        // Push services take 4096 bytes: a digest lists fewer items rather than fail; the count
        // stays, and the inbox has them all.
        while var listed = batch, !listed.items.isEmpty,
            WebPushEncryption.encryptedSize(plaintextLength: encoded().count) > WebPushEncryption.maxPayloadSize
        {
            listed.items.removeLast()
            batch = listed
        }
    }

    func encoded() -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return (try? encoder.encode(self)) ?? Data()
    }

    /// The largest encrypted body an event can make (a large badge), checked against the 4096
    /// bytes push services must accept when the event is triggered.
    static func largestEncryptedSize(_ content: DeliveryContent) -> Int {
        WebPushEncryption.encryptedSize(plaintextLength: WebPushMessage(content, badge: 9_999_999).encoded().count)
    }

    /// RFC 8030 headers from the category's push hints.
    static func headers(for content: DeliveryContent) -> [(String, String)] {
        let hints = content.category.push
        var headers = [
            ("TTL", String(content.ttlSeconds ?? WebPushChannel.defaultTTL)),
            (
                "Urgency",
                hints.interruptionLevel == .passive || content.background ? "low" : hints.priority.rawValue
            ),
            ("Content-Encoding", "aes128gcm"),
            ("Content-Type", "application/octet-stream"),
        ]
        if let key = hints.collapseKey { headers.append(("Topic", topic(key))) }
        return headers
    }

    /// A `Topic` is at most 32 characters of the base64url alphabet (RFC 8030 §5.4): a collapse
    /// key that is not one is replaced by a digest of itself.
    static func topic(_ key: String) -> String {
        let alphabet = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        if key.count <= 32, key.allSatisfy(alphabet.contains) { return key }
        return String(Base64URL.encode(Data(SHA256.hash(data: Data(key.utf8)))).prefix(32))
    }
}
