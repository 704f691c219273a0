import Foundation

/// One notification in a user's inbox.
public struct InboxNotification: Codable, Hashable, Sendable {
    public var id: UUID
    public var category: String
    public var tenant: String
    public var title: String
    public var body: String
    public var url: String?
    public var data: [String: JSONValue]?
    /// The category's custom actions, for buttons.
    public var actions: [NotificationAction]
    /// When it appeared in the inbox.
    public var createdAt: Date
    public var seenAt: Date?
    public var readAt: Date?
    public var archivedAt: Date?
    /// For a digest: the events it gathered.
    public var batch: NotificationBatch?
    /// The language of its text (the category template's variant, such as `de` or `ar`);
    /// `nil` when it is the default, or the event's own.
    public var locale: String?

    public init(
        id: UUID, category: String, tenant: String, title: String, body: String, url: String?,
        data: [String: JSONValue]?, actions: [NotificationAction], createdAt: Date, seenAt: Date?, readAt: Date?,
        archivedAt: Date?, batch: NotificationBatch? = nil, locale: String? = nil
    ) {
        self.id = id
        self.category = category
        self.tenant = tenant
        self.title = title
        self.body = body
        self.url = url
        self.data = data
        self.actions = actions
        self.createdAt = createdAt
        self.seenAt = seenAt
        self.readAt = readAt
        self.archivedAt = archivedAt
        self.batch = batch
        self.locale = locale
    }

    enum CodingKeys: String, CodingKey {
        case id, category, tenant, title, body, url, data, actions, batch, locale
        case createdAt = "created_at"
        case seenAt = "seen_at"
        case readAt = "read_at"
        case archivedAt = "archived_at"
    }
}

/// A page of the inbox, newest first.
public struct InboxPage: Codable, Hashable, Sendable {
    public var notifications: [InboxNotification]
    /// Pass as `cursor` for the next (older) page; `nil` on the last page.
    public var nextCursor: String?

    public init(notifications: [InboxNotification], nextCursor: String?) {
        self.notifications = notifications
        self.nextCursor = nextCursor
    }

    enum CodingKeys: String, CodingKey {
        case notifications
        case nextCursor = "next_cursor"
    }
}

/// The bell badge: unread and unseen notifications, archived ones left out.
public struct InboxCounts: Codable, Hashable, Sendable {
    public var unread: Int
    public var unseen: Int

    public init(unread: Int, unseen: Int) {
        self.unread = unread
        self.unseen = unseen
    }
}

/// The names of the events `GET /v1/me/stream` sends, for the server that writes them and the
/// SDK that reads them.
public enum InboxStreamEvent: String, Sendable, CaseIterable {
    /// The bell's counts (`InboxCounts`): on connecting, and after every change.
    case counts
    /// A new notification in the inbox (`InboxNotification`).
    case notificationCreated = "notification.created"
    /// A notification read, seen, archived, answered or made visible (`InboxNotification`).
    case notificationUpdated = "notification.updated"
    /// The user's preferences changed: `{"tenant", "etag"}`.
    case preferencesUpdated = "preferences.updated"
}
