import Foundation

/// What a batched notification (a digest) gathered: how many events, and the first few of them.
/// It travels as `"batch"` in the inbox JSON, the stream, the webhook payload, the Web Push
/// message and, as `count` alone, in the APNs payload.
public struct NotificationBatch: Codable, Hashable, Sendable {
    /// How many events the batch holds; more than `items` when it went past `max_items`.
    public var count: Int
    /// The first events, oldest first.
    public var items: [Item]

    public init(count: Int, items: [Item]) {
        self.count = count
        self.items = items
    }

    /// APNs carries the count alone (its payload is small), so `items` may be missing.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        count = try container.decode(Int.self, forKey: .count)
        items = try container.decodeIfPresent([Item].self, forKey: .items) ?? []
    }

    enum CodingKeys: String, CodingKey {
        case count, items
    }

    /// One event in a batch.
    public struct Item: Codable, Hashable, Sendable {
        public var eventID: UUID
        public var title: String
        public var body: String
        public var url: String?
        public var data: [String: JSONValue]?
        public var createdAt: Date

        public init(
            eventID: UUID, title: String, body: String, url: String?, data: [String: JSONValue]?, createdAt: Date
        ) {
            self.eventID = eventID
            self.title = title
            self.body = body
            self.url = url
            self.data = data
            self.createdAt = createdAt
        }

        enum CodingKeys: String, CodingKey {
            case eventID = "event_id"
            case title, body, url, data
            case createdAt = "created_at"
        }
    }
}
