import Foundation

/// One message: one notification on one channel (and device), as `GET /v1/messages` lists it,
/// with every attempt.
public struct MessageRecord: Codable, Hashable, Sendable {
    /// One try to hand the message to its provider.
    public struct Attempt: Codable, Hashable, Sendable {
        public var number: Int
        public var startedAt: Date
        public var finishedAt: Date
        /// `sent`, `retry`, `failed`, `skipped` or `dead`.
        public var outcome: String
        /// The provider's answer: an HTTP status, or an SMTP reply code.
        public var statusCode: Int?
        public var error: String?

        public init(
            number: Int, startedAt: Date, finishedAt: Date, outcome: String, statusCode: Int? = nil,
            error: String? = nil
        ) {
            self.number = number
            self.startedAt = startedAt
            self.finishedAt = finishedAt
            self.outcome = outcome
            self.statusCode = statusCode
            self.error = error
        }

        enum CodingKeys: String, CodingKey {
            case number, outcome, error
            case startedAt = "started_at"
            case finishedAt = "finished_at"
            case statusCode = "status_code"
        }
    }

    public var id: UUID
    public var eventID: UUID
    public var notificationID: UUID
    /// The user's external id.
    public var user: String
    public var channel: String
    /// `notification`, or `action` for a user's answer forwarded to the webhook.
    public var kind: String
    public var deviceID: UUID?
    /// `queued`, `running`, `sent`, `failed`, `dead` or `skipped`.
    public var status: String
    public var category: String
    public var title: String
    public var lastError: String?
    public var lastStatus: Int?
    public var nextAttemptAt: Date?
    public var createdAt: Date
    public var updatedAt: Date
    public var attempts: [Attempt]

    public init(
        id: UUID, eventID: UUID, notificationID: UUID, user: String, channel: String, kind: String, deviceID: UUID?,
        status: String, category: String, title: String, lastError: String?, lastStatus: Int?, nextAttemptAt: Date?,
        createdAt: Date, updatedAt: Date, attempts: [Attempt]
    ) {
        self.id = id
        self.eventID = eventID
        self.notificationID = notificationID
        self.user = user
        self.channel = channel
        self.kind = kind
        self.deviceID = deviceID
        self.status = status
        self.category = category
        self.title = title
        self.lastError = lastError
        self.lastStatus = lastStatus
        self.nextAttemptAt = nextAttemptAt
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.attempts = attempts
    }

    enum CodingKeys: String, CodingKey {
        case id, user, channel, kind, status, category, title, attempts
        case eventID = "event_id"
        case notificationID = "notification_id"
        case deviceID = "device_id"
        case lastError = "last_error"
        case lastStatus = "last_status"
        case nextAttemptAt = "next_attempt_at"
        case createdAt = "created_at"
        case updatedAt = "updated_at"
    }
}

/// The body of `GET /v1/messages`: newest first; `next_cursor` asks for the older page.
public struct MessagePage: Codable, Hashable, Sendable {
    public var messages: [MessageRecord]
    public var nextCursor: String?

    public init(messages: [MessageRecord], nextCursor: String?) {
        self.messages = messages
        self.nextCursor = nextCursor
    }

    enum CodingKeys: String, CodingKey {
        case messages
        case nextCursor = "next_cursor"
    }
}
