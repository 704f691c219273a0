import Foundation

/// What the OS lets an app do with notifications (Apple's `UNAuthorizationStatus`).
public enum PushAuthorization: String, Codable, Hashable, Sendable, CaseIterable {
    case notDetermined
    case denied
    case authorized
    /// Delivered quietly to the notification center, without sound or banner.
    case provisional
    /// App clips: authorized for a limited time.
    case ephemeral

    /// Whether notifications may be sent at all.
    public var allowsDelivery: Bool {
        self == .authorized || self == .provisional || self == .ephemeral
    }

    public init(from decoder: any Decoder) throws {
        self = try decodeChoice(decoder)
    }
}

/// One notification setting of the device (Apple's `UNNotificationSetting`).
public enum PushSetting: String, Codable, Hashable, Sendable, CaseIterable {
    case enabled
    case disabled
    case notSupported

    public init(from decoder: any Decoder) throws {
        self = try decodeChoice(decoder)
    }
}

/// The device's alert, sound and badge settings; the server shapes payloads to them.
public struct PushSettings: Codable, Hashable, Sendable {
    public var alert: PushSetting
    public var sound: PushSetting
    public var badge: PushSetting
    /// Whether notifications are listed in the Notification Center. With alerts off and this on,
    /// the system still shows the alert's text there (seed 003), so the server keeps it.
    public var notificationCenter: PushSetting

    public init(
        alert: PushSetting = .enabled, sound: PushSetting = .enabled, badge: PushSetting = .enabled,
        notificationCenter: PushSetting = .enabled
    ) {
        self.alert = alert
        self.sound = sound
        self.badge = badge
        self.notificationCenter = notificationCenter
    }

    enum CodingKeys: String, CodingKey, CaseIterable {
        case alert, sound, badge
        case notificationCenter = "notification_center"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        alert = try container.decode(PushSetting.self, forKey: .alert)
        sound = try container.decode(PushSetting.self, forKey: .sound)
        badge = try container.decode(PushSetting.self, forKey: .badge)
        // Devices registered before the setting existed report it as on, as the OS defaults it.
        notificationCenter = try container.decodeIfPresent(PushSetting.self, forKey: .notificationCenter) ?? .enabled
    }

    /// Whether the system shows a notification's text somewhere: as an alert, or in the
    /// Notification Center.
    public var showsText: Bool { alert == .enabled || notificationCenter == .enabled }
}

/// The APNs environment a device token belongs to.
public enum APNsEnvironment: String, Codable, Hashable, Sendable, CaseIterable {
    case sandbox
    case production

    public init(from decoder: any Decoder) throws {
        self = try decodeChoice(decoder)
    }
}

public enum DevicePlatform: String, Codable, Hashable, Sendable, CaseIterable {
    case apns
    /// An Android app, reached through Firebase Cloud Messaging.
    case fcm
    case webPush = "web_push"

    public init(from decoder: any Decoder) throws {
        self = try decodeChoice(decoder)
    }
}

/// A browser's push subscription, as `PushSubscription.toJSON()` gives it.
public struct WebPushSubscription: Codable, Hashable, Sendable {
    public struct Keys: Codable, Hashable, Sendable {
        /// The browser's P-256 public key, base64url.
        public var p256dh: String
        /// The 16-byte authentication secret, base64url.
        public var auth: String

        public init(p256dh: String, auth: String) {
            self.p256dh = p256dh
            self.auth = auth
        }

        enum CodingKeys: String, CodingKey, CaseIterable {
            case p256dh, auth
        }
    }

    public var endpoint: String
    public var keys: Keys

    enum CodingKeys: String, CodingKey, CaseIterable {
        case endpoint, keys
    }

    public init(endpoint: String, keys: Keys) {
        self.endpoint = endpoint
        self.keys = keys
    }
}

/// The body of `POST /v1/me/devices`. Registering the same token (or endpoint) again updates
/// that device, and moves it to this user if another had it.
public struct DeviceRegistration: Codable, Hashable, Sendable {
    public var platform: DevicePlatform
    /// APNs: the device token, hex. FCM: the registration token.
    public var token: String?
    /// APNs: which of Apple's hosts the token belongs to.
    public var environment: APNsEnvironment?
    /// APNs: the app's bundle id, when it differs from the server's configured topic.
    public var topic: String?
    public var authorization: PushAuthorization?
    public var settings: PushSettings?
    public var locale: String?
    public var appVersion: String?
    /// Web Push: the browser's subscription.
    public var subscription: WebPushSubscription?
    public var userAgent: String?
    /// Which of the server's apps of this platform the device belongs to (the workspace's
    /// `apps`); leave it out for the server's one app of the platform.
    public var app: String?

    public init(
        platform: DevicePlatform, token: String? = nil, environment: APNsEnvironment? = nil, topic: String? = nil,
        authorization: PushAuthorization? = nil, settings: PushSettings? = nil, locale: String? = nil,
        appVersion: String? = nil, subscription: WebPushSubscription? = nil, userAgent: String? = nil,
        app: String? = nil
    ) {
        self.platform = platform
        self.app = app
        self.token = token
        self.environment = environment
        self.topic = topic
        self.authorization = authorization
        self.settings = settings
        self.locale = locale
        self.appVersion = appVersion
        self.subscription = subscription
        self.userAgent = userAgent
    }

    enum CodingKeys: String, CodingKey, CaseIterable {
        case platform, token, environment, topic, authorization, settings, locale, subscription, app
        case appVersion = "app_version"
        case userAgent = "user_agent"
    }
}

/// A registered device as the API shows it.
public struct DeviceRecord: Codable, Hashable, Sendable {
    public var id: UUID
    public var platform: DevicePlatform
    /// The app it belongs to, when the server has several of its platform.
    public var app: String?
    public var token: String?
    public var environment: APNsEnvironment?
    public var topic: String?
    public var endpoint: String?
    public var authorization: PushAuthorization
    public var settings: PushSettings
    public var locale: String?
    public var appVersion: String?
    public var userAgent: String?
    public var createdAt: Date
    public var updatedAt: Date
    /// Set when the push service said the device is gone; a retired device gets nothing more.
    public var retiredAt: Date?
    public var retiredReason: String?

    public init(
        id: UUID, platform: DevicePlatform, token: String?, environment: APNsEnvironment?, topic: String?,
        endpoint: String?, authorization: PushAuthorization, settings: PushSettings, locale: String?,
        appVersion: String?, userAgent: String?, createdAt: Date, updatedAt: Date, retiredAt: Date?,
        retiredReason: String?, app: String? = nil
    ) {
        self.id = id
        self.platform = platform
        self.app = app
        self.token = token
        self.environment = environment
        self.topic = topic
        self.endpoint = endpoint
        self.authorization = authorization
        self.settings = settings
        self.locale = locale
        self.appVersion = appVersion
        self.userAgent = userAgent
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.retiredAt = retiredAt
        self.retiredReason = retiredReason
    }

    enum CodingKeys: String, CodingKey {
        case id, platform, app, token, environment, topic, endpoint, authorization, settings, locale
        case appVersion = "app_version"
        case userAgent = "user_agent"
        case createdAt = "created_at"
        case updatedAt = "updated_at"
        case retiredAt = "retired_at"
        case retiredReason = "retired_reason"
    }
}

/// The body of `GET /v1/me/devices`.
public struct DeviceList: Codable, Hashable, Sendable {
    public var devices: [DeviceRecord]

    public init(devices: [DeviceRecord]) {
        self.devices = devices
    }
}

extension DeviceRegistration: RequestFields {
    public static var fields: Set<String> { CodingKeys.names }
    public static var nestedFields: [String: Set<String>] {
        PushSettings.fields(at: "settings").merging(WebPushSubscription.fields(at: "subscription")) { $1 }
    }
}

extension PushSettings: RequestFields {
    public static var fields: Set<String> { CodingKeys.names }
}

extension WebPushSubscription: RequestFields {
    /// Its keys, and `expirationTime`, which `PushSubscription.toJSON()` writes and Belfry does
    /// not keep.
    public static var fields: Set<String> { CodingKeys.names.union(["expirationTime"]) }
    public static var nestedFields: [String: Set<String>] { ["keys": Keys.fields] }
}

extension WebPushSubscription.Keys: RequestFields {
    public static var fields: Set<String> { CodingKeys.names }
}
