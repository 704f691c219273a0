import Foundation

/// The body of `POST /v1/events`: one notification event for a list of recipients.
public struct EventRequest: Codable, Hashable, Sendable {
    /// What the notification says. A category with content templates fills in the parts left
    /// out, in each recipient's language; for any other, `title` and `body` are required.
    public struct Content: Codable, Hashable, Sendable {
        public var title: String?
        public var body: String?
        public var url: String?
        /// An image push notifications show (an app's service extension fetches it).
        public var imageURL: String?

        public init(title: String? = nil, body: String? = nil, url: String? = nil, imageURL: String? = nil) {
            self.title = title
            self.body = body
            self.url = url
            self.imageURL = imageURL
        }

        enum CodingKeys: String, CodingKey, CaseIterable {
            case title, body, url
            case imageURL = "image_url"
        }
    }

    /// When to send: at a time, after a delay from acceptance, or at the next local time
    /// matching a calendar rule in each recipient's time zone. Absent means now.
    public struct Schedule: Codable, Hashable, Sendable {
        public var sendAt: Date?
        public var delaySeconds: Int?
        public var calendar: CalendarRule?

        public init(sendAt: Date? = nil, delaySeconds: Int? = nil, calendar: CalendarRule? = nil) {
            self.sendAt = sendAt
            self.delaySeconds = delaySeconds
            self.calendar = calendar
        }

        enum CodingKeys: String, CodingKey, CaseIterable {
            case calendar
            case sendAt = "send_at"
            case delaySeconds = "delay_seconds"
        }
    }

    public var category: String
    /// External user ids. Users Belfry does not know yet are created. Empty when `topic` is given.
    public var recipients: [String]
    /// A topic whose subscribers, at fan-out, are the recipients; instead of `recipients`.
    public var topic: String?
    /// External user ids left out (the actor is not told of their own edit).
    public var exclude: [String]?
    /// The tenant; the workspace default tenant when absent.
    public var tenant: String?
    public var content: Content
    /// Free-form data passed to every channel.
    public var data: [String: JSONValue]?
    /// A key that makes retries of the same trigger safe: within 24 hours, the same key answers
    /// with the first event and creates nothing new.
    public var idempotencyKey: String?
    public var schedule: Schedule?
    /// How long push services keep the notification while the device is offline, in seconds
    /// (0: deliver now or never); the category's setting when absent.
    public var ttlSeconds: Int?
    /// How this event's pushes go out, over the category's `push`.
    public var push: Push?

    /// An event's own push options.
    public struct Push: Codable, Hashable, Sendable {
        /// A background push instead of an alert (the category's `push.content_available` when absent).
        public var contentAvailable: Bool?

        public init(contentAvailable: Bool? = nil) {
            self.contentAvailable = contentAvailable
        }

        enum CodingKeys: String, CodingKey, CaseIterable {
            case contentAvailable = "content_available"
        }
    }

    public init(
        category: String, recipients: [String] = [], topic: String? = nil, exclude: [String]? = nil,
        tenant: String? = nil, content: Content = Content(), data: [String: JSONValue]? = nil,
        idempotencyKey: String? = nil,
        schedule: Schedule? = nil, ttlSeconds: Int? = nil, push: Push? = nil
    ) {
        self.category = category
        self.recipients = recipients
        self.topic = topic
        self.exclude = exclude
        self.tenant = tenant
        self.content = content
        self.data = data
        self.idempotencyKey = idempotencyKey
        self.schedule = schedule
        self.ttlSeconds = ttlSeconds
        self.push = push
    }

    enum CodingKeys: String, CodingKey, CaseIterable {
        case category, recipients, topic, exclude, tenant, content, data, schedule, push
        case idempotencyKey = "idempotency_key"
        case ttlSeconds = "ttl_seconds"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        category = try container.decode(String.self, forKey: .category)
        // Absent when a topic names the audience; the server says which one is missing.
        recipients = try container.decodeIfPresent([String].self, forKey: .recipients) ?? []
        topic = try container.decodeIfPresent(String.self, forKey: .topic)
        exclude = try container.decodeIfPresent([String].self, forKey: .exclude)
        tenant = try container.decodeIfPresent(String.self, forKey: .tenant)
        content = try container.decodeIfPresent(Content.self, forKey: .content) ?? Content()
        data = try container.decodeIfPresent([String: JSONValue].self, forKey: .data)
        idempotencyKey = try container.decodeIfPresent(String.self, forKey: .idempotencyKey)
        schedule = try container.decodeIfPresent(Schedule.self, forKey: .schedule)
        ttlSeconds = try container.decodeIfPresent(Int.self, forKey: .ttlSeconds)
        push = try container.decodeIfPresent(Push.self, forKey: .push)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(category, forKey: .category)
        if topic == nil || !recipients.isEmpty { try container.encode(recipients, forKey: .recipients) }
        try container.encodeIfPresent(topic, forKey: .topic)
        try container.encodeIfPresent(exclude, forKey: .exclude)
        try container.encodeIfPresent(tenant, forKey: .tenant)
        if content != Content() { try container.encode(content, forKey: .content) }
        try container.encodeIfPresent(data, forKey: .data)
        try container.encodeIfPresent(idempotencyKey, forKey: .idempotencyKey)
        try container.encodeIfPresent(schedule, forKey: .schedule)
        try container.encodeIfPresent(ttlSeconds, forKey: .ttlSeconds)
        try container.encodeIfPresent(push, forKey: .push)
    }
}

/// The answer to an accepted event.
public struct EventAccepted: Codable, Hashable, Sendable {
    public var eventID: UUID

    public init(eventID: UUID) {
        self.eventID = eventID
    }

    enum CodingKeys: String, CodingKey {
        case eventID = "event_id"
    }
}

/// Where an event stands: its fan-out, and its deliveries by channel.
public struct EventStatus: Codable, Hashable, Sendable {
    public enum FanoutState: String, Codable, Hashable, Sendable {
        /// Accepted, waiting for its scheduled time or a worker.
        case pending
        /// A worker is writing notifications and deliveries.
        case running
        /// Every recipient has been processed.
        case done
        /// Fan-out stopped for good; `error` says why.
        case failed
    }

    public var id: UUID
    public var category: String
    public var tenant: String
    public var state: FanoutState
    public var createdAt: Date
    /// When fan-out may start (the schedule), or the acceptance time.
    public var notBefore: Date
    public var recipients: Int
    /// Recipients processed so far.
    public var processed: Int
    public var notifications: Int
    /// Delivery counts: channel, then status (`queued`, `running`, `sent`, `failed`, `dead`).
    public var deliveries: [String: [String: Int]]
    /// Channels the rule left out: channel, then reason, then count.
    public var skipped: [String: [String: Int]]
    /// The last error of each channel with failing deliveries.
    public var lastErrors: [String: String]
    /// Why fan-out failed or is being retried, if it did.
    public var error: String?
    /// Recipients whose notification went into a batch (a digest) instead of out on its own;
    /// the batch's notification counts with the event that opened it.
    public var batched: Int

    public init(
        id: UUID, category: String, tenant: String, state: FanoutState, createdAt: Date, notBefore: Date,
        recipients: Int, processed: Int, notifications: Int, deliveries: [String: [String: Int]],
        skipped: [String: [String: Int]], lastErrors: [String: String], error: String? = nil, batched: Int = 0
    ) {
        self.id = id
        self.category = category
        self.tenant = tenant
        self.state = state
        self.createdAt = createdAt
        self.notBefore = notBefore
        self.recipients = recipients
        self.processed = processed
        self.notifications = notifications
        self.deliveries = deliveries
        self.skipped = skipped
        self.lastErrors = lastErrors
        self.error = error
        self.batched = batched
    }

    enum CodingKeys: String, CodingKey {
        case id, category, tenant, state, recipients, processed, notifications, deliveries, skipped, error, batched
        case createdAt = "created_at"
        case notBefore = "not_before"
        case lastErrors = "last_errors"
    }
}

extension EventRequest: RequestFields {
    // Built once: intake checks every event's keys against them.
    private static let topFields = CodingKeys.names
    private static let innerFields = Content.fields(at: "content").merging(Schedule.fields(at: "schedule")) { $1 }
        .merging(Push.fields(at: "push")) { $1 }

    public static var fields: Set<String> { topFields }
    public static var nestedFields: [String: Set<String>] { innerFields }
}

extension EventRequest.Content: RequestFields {
    public static var fields: Set<String> { CodingKeys.names }
}

extension EventRequest.Schedule: RequestFields {
    public static var fields: Set<String> { CodingKeys.names }
    public static var nestedFields: [String: Set<String>] { ["calendar": CalendarRule.fields] }
}

extension EventRequest.Push: RequestFields {
    public static var fields: Set<String> { CodingKeys.names }
}
