// The workspace: which channels, sections, categories and tenants exist. Loaded
// from a file at start (see `WorkspaceConfig+Reading.swift`) and served as is by
// `GET /v1/config`, so clients can decode it with plain `Codable`.

import Foundation

/// Everything a workspace defines: channels, sections, categories and tenants.
public struct WorkspaceConfig: Codable, Hashable, Sendable {
    public var channels: [ChannelDefinition]
    public var sections: [SectionDefinition]
    public var categories: [CategoryDefinition]
    public var tenants: [TenantDefinition]
    /// The tenant used by requests that name none.
    public var defaultTenant: String
    /// The topics users may follow themselves: names, or prefixes ending in `*` (`page:*`). Every
    /// other topic is the backend's to manage; `nil` or empty means users follow none themselves.
    public var followableTopics: [String]?

    public init(
        channels: [ChannelDefinition],
        sections: [SectionDefinition],
        categories: [CategoryDefinition],
        tenants: [TenantDefinition],
        defaultTenant: String,
        followableTopics: [String]? = nil
    ) {
        self.channels = channels
        self.sections = sections
        self.categories = categories
        self.tenants = tenants
        self.defaultTenant = defaultTenant
        self.followableTopics = followableTopics
    }

    enum CodingKeys: String, CodingKey {
        case channels, sections, categories, tenants
        case defaultTenant = "default_tenant"
        case followableTopics = "followable_topics"
    }

    /// Whether a user may follow `topic` with their own token.
    public func userMayFollow(_ topic: String) -> Bool {
        (followableTopics ?? []).contains { pattern in
            pattern.hasSuffix("*") ? topic.hasPrefix(pattern.dropLast()) : topic == pattern
        }
    }

    public func channel(_ id: String) -> ChannelDefinition? {
        channels.first { $0.id == id }
    }

    public func category(_ id: String) -> CategoryDefinition? {
        categories.first { $0.id == id }
    }

    public func tenant(_ id: String) -> TenantDefinition? {
        tenants.first { $0.id == id }
    }
}

/// How a channel delivers.
public enum ChannelKind: String, Codable, Hashable, Sendable, CaseIterable {
    case inbox
    case apns
    /// Android devices, through Firebase Cloud Messaging.
    case fcm
    case webPush = "web_push"
    case webhook
    case email

    /// Push channels need an active device whose OS authorization allows delivery.
    public var isPush: Bool {
        self == .apns || self == .fcm || self == .webPush
    }
}

public struct ChannelDefinition: Codable, Hashable, Sendable {
    public var id: String
    public var kind: ChannelKind
    public var name: String
    /// The overall preference a user has before choosing one.
    public var defaultPreference: ChannelLevelPreferenceOptions
    /// The backend's own channel, never shown to users on the hosted pages (the webhook, by default).
    public var isInternal: Bool

    public init(
        id: String, kind: ChannelKind, name: String, defaultPreference: ChannelLevelPreferenceOptions = .all,
        isInternal: Bool? = nil
    ) {
        self.id = id
        self.kind = kind
        self.name = name
        self.defaultPreference = defaultPreference
        self.isInternal = isInternal ?? (kind == .webhook)
    }

    enum CodingKeys: String, CodingKey {
        case id, kind, name
        case defaultPreference = "default"
        case isInternal = "internal"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(String.self, forKey: .id)
        kind = try container.decode(ChannelKind.self, forKey: .kind)
        name = try container.decode(String.self, forKey: .name)
        defaultPreference = try container.decode(ChannelLevelPreferenceOptions.self, forKey: .defaultPreference)
        // A server that predates the flag sends none.
        isInternal = try container.decodeIfPresent(Bool.self, forKey: .isInternal) ?? (kind == .webhook)
    }
}

public struct SectionDefinition: Codable, Hashable, Sendable {
    public var id: String
    public var name: String?
    public var description: String?

    public init(id: String, name: String? = nil, description: String? = nil) {
        self.id = id
        self.name = name
        self.description = description
    }
}

/// A notification type.
public struct CategoryDefinition: Codable, Hashable, Sendable {
    public var id: String
    public var name: String
    public var description: String?
    /// The section this category is listed under; `nil` lists it without a heading.
    public var section: String?
    public var defaultPreference: PreferenceOptions
    /// `false` for categories users cannot turn off, such as security alerts.
    public var isEditable: Bool
    public var channels: [CategoryChannelDefinition]
    /// Channels still used when the user set that channel to `required`.
    public var mandatoryChannels: [String]
    public var actions: [NotificationAction]
    public var push: PushHints
    /// The category's own email templates; `nil` uses Belfry's default email.
    public var email: EmailTemplates?
    /// A limit on how often the category reaches a user outside the inbox.
    public var throttle: ThrottleRule?
    /// Gathers the category's events for a user into one notification (a digest).
    public var batch: BatchRule?
    /// The content as templates, per locale; `nil`: each event carries its own.
    public var content: ContentTemplates?
    /// The fields its events carry in `data`; `nil`: any.
    public var dataSchema: DataSchema?

    public init(
        id: String,
        name: String,
        description: String? = nil,
        section: String? = nil,
        defaultPreference: PreferenceOptions = .optIn,
        isEditable: Bool = true,
        channels: [CategoryChannelDefinition],
        mandatoryChannels: [String] = [],
        actions: [NotificationAction] = [],
        push: PushHints = PushHints(),
        email: EmailTemplates? = nil,
        throttle: ThrottleRule? = nil,
        batch: BatchRule? = nil,
        content: ContentTemplates? = nil,
        dataSchema: DataSchema? = nil
    ) {
        self.id = id
        self.name = name
        self.description = description
        self.section = section
        self.defaultPreference = defaultPreference
        self.isEditable = isEditable
        self.channels = channels
        self.mandatoryChannels = mandatoryChannels
        self.actions = actions
        self.push = push
        self.email = email
        self.throttle = throttle
        self.batch = batch
        self.content = content
        self.dataSchema = dataSchema
    }

    enum CodingKeys: String, CodingKey {
        case id, name, description, section, channels, actions, push, email, throttle, batch, content
        case defaultPreference = "default"
        case dataSchema = "data_schema"
        case isEditable = "is_editable"
        case mandatoryChannels = "mandatory_channels"
    }

    public func channel(_ id: String) -> CategoryChannelDefinition? {
        channels.first { $0.channel == id }
    }

    public func isMandatory(_ channel: String) -> Bool {
        mandatoryChannels.contains(channel)
    }
}

/// A channel a category may use, with its own default and editability, and optionally a
/// delay: a fallback that is sent only if the user has not read (or seen) the notification in
/// the inbox by then.
public struct CategoryChannelDefinition: Codable, Hashable, Sendable {
    /// What makes a delayed channel unnecessary.
    public enum Condition: String, Codable, Hashable, Sendable, CaseIterable {
        /// The user read the inbox notification.
        case read
        /// The user saw it (or read it).
        case seen
    }

    public var channel: String
    public var defaultPreference: PreferenceOptions
    public var isEditable: Bool
    /// Seconds after the notification is due before this channel delivers.
    public var delaySeconds: Int?
    /// Skip this channel if this happened to the inbox notification before the delay ran out.
    public var unless: Condition?

    public init(
        channel: String, defaultPreference: PreferenceOptions = .optIn, isEditable: Bool = true,
        delaySeconds: Int? = nil, unless: Condition? = nil
    ) {
        self.channel = channel
        self.defaultPreference = defaultPreference
        self.isEditable = isEditable
        self.delaySeconds = delaySeconds
        self.unless = unless
    }

    enum CodingKeys: String, CodingKey {
        case channel, unless
        case defaultPreference = "default"
        case isEditable = "is_editable"
        case delaySeconds = "delay_seconds"
    }
}

/// At most `limit` notifications of a category per user in any `windowSeconds`, on every
/// channel but the inbox, which keeps them all.
public struct ThrottleRule: Codable, Hashable, Sendable {
    public var limit: Int
    public var windowSeconds: Int

    public init(limit: Int, windowSeconds: Int) {
        self.limit = limit
        self.windowSeconds = windowSeconds
    }

    enum CodingKeys: String, CodingKey {
        case limit
        case windowSeconds = "window_seconds"
    }
}

/// Events of a category for the same user, tenant and key, from the first one until the batch
/// closes, become one notification: after `windowSeconds`, or at the next time `schedule`
/// matches in the user's time zone (a daily or weekly digest).
public struct BatchRule: Codable, Hashable, Sendable {
    public var windowSeconds: Int?
    public var schedule: CalendarRule?
    /// A field of the event's `data` whose value separates batches (`page`: one per page);
    /// `nil`: one batch per user and tenant.
    public var key: String?
    /// How many events the notification lists; it counts them all.
    public var maxItems: Int
    /// Mustache templates over `count`, `more` (count − 1), `has_more`, `items` and `first`; `nil`: the first
    /// item's title, and its body or "and N more".
    public var title: String?
    public var body: String?
    /// The templates by BCP 47 language tag, for users with that locale; a part a variant leaves
    /// out is the default's.
    public var locales: [String: TextTemplates]?

    public init(
        windowSeconds: Int? = nil, schedule: CalendarRule? = nil, key: String? = nil, maxItems: Int = 10,
        title: String? = nil, body: String? = nil, locales: [String: TextTemplates]? = nil
    ) {
        self.windowSeconds = windowSeconds
        self.schedule = schedule
        self.key = key
        self.maxItems = maxItems
        self.title = title
        self.body = body
        self.locales = locales
    }

    /// The title and body templates for a user's `locale`, with the tag chosen (`nil`: the default).
    public func text(for locale: String?) -> (tag: String?, title: String?, body: String?) {
        guard let tag = LanguageTag.match(locale, among: locales.map { Array($0.keys) } ?? []),
            let variant = locales?[tag]
        else { return (nil, title, body) }
        return (tag, variant.title ?? title, variant.body ?? body)
    }

    /// When a batch opened at `opened` closes, reading a schedule in the user's time zone.
    public func closing(openedAt opened: Date, timeZone: TimeZone) -> Date {
        if let schedule, let next = schedule.nextDate(after: opened, in: timeZone) { return next }
        return opened.addingTimeInterval(TimeInterval(windowSeconds ?? 0))
    }

    enum CodingKeys: String, CodingKey {
        case schedule, key, title, body, locales
        case windowSeconds = "window_seconds"
        case maxItems = "max_items"
    }

    /// The schedule as the config file writes it: `{"calendar": {...}}`. A batch's schedule
    /// always recurs, so `repeats`, which the file does not take, is neither written nor read.
    struct Schedule: Codable {
        var calendar: CalendarRule

        init(calendar: CalendarRule) {
            self.calendar = calendar
        }

        private enum CodingKeys: String, CodingKey { case calendar }
        private enum Field: String, CodingKey { case month, day, weekday, hour, minute }

        init(from decoder: any Decoder) throws {
            let fields = try decoder.container(keyedBy: CodingKeys.self).nestedContainer(
                keyedBy: Field.self, forKey: .calendar)
            calendar = CalendarRule(
                month: try fields.decodeIfPresent(Int.self, forKey: .month),
                day: try fields.decodeIfPresent(Int.self, forKey: .day),
                weekday: try fields.decodeIfPresent(Int.self, forKey: .weekday),
                hour: try fields.decodeIfPresent(Int.self, forKey: .hour),
                minute: try fields.decodeIfPresent(Int.self, forKey: .minute), repeats: true)
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            var fields = container.nestedContainer(keyedBy: Field.self, forKey: .calendar)
            try fields.encodeIfPresent(calendar.month, forKey: .month)
            try fields.encodeIfPresent(calendar.day, forKey: .day)
            try fields.encodeIfPresent(calendar.weekday, forKey: .weekday)
            try fields.encodeIfPresent(calendar.hour, forKey: .hour)
            try fields.encodeIfPresent(calendar.minute, forKey: .minute)
        }
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        windowSeconds = try container.decodeIfPresent(Int.self, forKey: .windowSeconds)
        schedule = try container.decodeIfPresent(Schedule.self, forKey: .schedule)?.calendar
        key = try container.decodeIfPresent(String.self, forKey: .key)
        maxItems = try container.decodeIfPresent(Int.self, forKey: .maxItems) ?? 10
        title = try container.decodeIfPresent(String.self, forKey: .title)
        body = try container.decodeIfPresent(String.self, forKey: .body)
        locales = try container.decodeIfPresent([String: TextTemplates].self, forKey: .locales)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(windowSeconds, forKey: .windowSeconds)
        try container.encodeIfPresent(schedule.map(Schedule.init(calendar:)), forKey: .schedule)
        try container.encodeIfPresent(key, forKey: .key)
        try container.encode(maxItems, forKey: .maxItems)
        try container.encodeIfPresent(title, forKey: .title)
        try container.encodeIfPresent(body, forKey: .body)
        try container.encodeIfPresent(locales, forKey: .locales)
    }
}

/// A custom button shown with a notification (the platform framework's notification action).
public struct NotificationAction: Codable, Hashable, Sendable {
    public var id: String
    public var title: String
    public var destructive: Bool
    /// Whether choosing the action brings the app to the foreground.
    public var opensApp: Bool

    public init(id: String, title: String, destructive: Bool = false, opensApp: Bool = false) {
        self.id = id
        self.title = title
        self.destructive = destructive
        self.opensApp = opensApp
    }

    enum CodingKeys: String, CodingKey {
        case id, title, destructive
        case opensApp = "opens_app"
    }
}

/// How a push notification of a category is presented.
public struct PushHints: Codable, Hashable, Sendable {
    public enum InterruptionLevel: String, Codable, Hashable, Sendable, CaseIterable {
        case passive
        case active
        case timeSensitive = "time-sensitive"
        case critical
    }

    public enum Priority: String, Codable, Hashable, Sendable, CaseIterable {
        case high
        case normal
        case low
    }

    /// Groups notifications together on the device.
    public var threadID: String?
    /// A newer notification with the same key replaces the older one.
    public var collapseKey: String?
    public var interruptionLevel: InterruptionLevel?
    public var priority: Priority
    /// How long a push service keeps an undelivered notification.
    public var ttlSeconds: Int?
    /// A background push (seed 003: a push that lets the app "download information and update
    /// its interface"): APNs `content-available` with no alert, sound or badge; FCM and Web Push
    /// send data only. The inbox, email and webhook are unchanged.
    public var contentAvailable: Bool

    public init(
        threadID: String? = nil,
        collapseKey: String? = nil,
        interruptionLevel: InterruptionLevel? = nil,
        priority: Priority = .high,
        ttlSeconds: Int? = nil,
        contentAvailable: Bool = false
    ) {
        self.threadID = threadID
        self.collapseKey = collapseKey
        self.interruptionLevel = interruptionLevel
        self.priority = priority
        self.ttlSeconds = ttlSeconds
        self.contentAvailable = contentAvailable
    }

    enum CodingKeys: String, CodingKey {
        case priority
        case threadID = "thread_id"
        case collapseKey = "collapse_key"
        case interruptionLevel = "interruption_level"
        case ttlSeconds = "ttl_seconds"
        case contentAvailable = "content_available"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        threadID = try container.decodeIfPresent(String.self, forKey: .threadID)
        collapseKey = try container.decodeIfPresent(String.self, forKey: .collapseKey)
        interruptionLevel = try container.decodeIfPresent(InterruptionLevel.self, forKey: .interruptionLevel)
        priority = try container.decodeIfPresent(Priority.self, forKey: .priority) ?? .high
        ttlSeconds = try container.decodeIfPresent(Int.self, forKey: .ttlSeconds)
        // Absent from the configs of servers before background pushes.
        contentAvailable = try container.decodeIfPresent(Bool.self, forKey: .contentAvailable) ?? false
    }
}

public struct TenantDefinition: Codable, Hashable, Sendable {
    public var id: String
    public var name: String
    /// The apps (the server's `apps`) its users' devices may use, and its notifications reach;
    /// `nil`: every app.
    public var apps: [String]?

    public init(id: String, name: String, apps: [String]? = nil) {
        self.id = id
        self.name = name
        self.apps = apps
    }

    /// Whether its notifications may reach a device of `app` (`nil`: the server's one app of
    /// a platform, which a tenant that names its apps does not reach).
    public func allows(app: String?) -> Bool {
        guard let apps else { return true }
        return app.map(apps.contains) ?? false
    }
}
