import Foundation

/// One notification as APNs will carry it, before it is shaped for a device.
public struct APNsNotification: Sendable, Hashable {
    /// How insistently the device presents the notification (Apple's `interruption-level`).
    public enum InterruptionLevel: String, Sendable, Hashable, CaseIterable {
        case passive
        case active
        case timeSensitive = "time-sensitive"
        case critical
    }

    /// The `apns-id` header: the request's own id, echoed in Apple's answer.
    public var id: UUID
    /// The notification the device shows; its id goes in the custom payload, for the app.
    public var notificationID: UUID
    /// The notification category the app registered (the `category` of `aps`).
    public var category: String
    public var tenant: String
    public var title: String
    public var body: String
    public var url: String?
    public var imageURL: String?
    /// The event's `data`: JSON text, passed to the app unchanged. Text that is not JSON is left out.
    public var data: String?
    public var threadID: String?
    public var collapseID: String?
    public var interruptionLevel: InterruptionLevel?
    /// Whether the notification should go out at once (`apns-priority: 10`) rather than when
    /// the device saves power (5).
    public var urgent: Bool
    public var createdAt: Date
    /// How long APNs keeps the notification for an offline device; 0 means one attempt only.
    public var ttlSeconds: Int?
    /// For a digest: how many events it gathered (the alert already summarizes them).
    public var batchCount: Int?
    /// A background notification (`apns-push-type: background`): wakes the app to fetch, shows
    /// nothing.
    public var background: Bool

    public init(
        id: UUID, notificationID: UUID, category: String, tenant: String, title: String, body: String,
        url: String? = nil, imageURL: String? = nil, data: String? = nil, threadID: String? = nil,
        collapseID: String? = nil, interruptionLevel: InterruptionLevel? = nil, urgent: Bool = true,
        createdAt: Date, ttlSeconds: Int? = nil, batchCount: Int? = nil, background: Bool = false
    ) {
        self.id = id
        self.notificationID = notificationID
        self.category = category
        self.tenant = tenant
        self.title = title
        self.body = body
        self.url = url
        self.imageURL = imageURL
        self.data = data
        self.threadID = threadID
        self.collapseID = collapseID
        self.interruptionLevel = interruptionLevel
        self.urgent = urgent
        self.createdAt = createdAt
        self.ttlSeconds = ttlSeconds
        self.batchCount = batchCount
        self.background = background
    }
}

/// The device a notification goes to, and what its owner lets the app do there.
public struct APNsDevice: Sendable, Hashable {
    /// Which of Apple's two provider endpoints knows the token.
    public enum Environment: String, Sendable, Hashable, CaseIterable {
        case sandbox
        case production
    }

    /// What the OS lets the app do (Apple's `UNAuthorizationStatus`).
    public enum Authorization: String, Sendable, Hashable, CaseIterable {
        case notDetermined, denied, authorized, provisional, ephemeral

        /// Whether notifications may be sent at all.
        public var allowsDelivery: Bool {
            self == .authorized || self == .provisional || self == .ephemeral
        }
    }

    /// The device token, as hex.
    public var token: String
    public var environment: Environment
    public var authorization: Authorization
    public var showsAlerts: Bool
    public var showsBadge: Bool
    public var playsSound: Bool

    public init(
        token: String, environment: Environment, authorization: Authorization, showsAlerts: Bool = true,
        showsBadge: Bool = true, playsSound: Bool = true
    ) {
        self.token = token
        self.environment = environment
        self.authorization = authorization
        self.showsAlerts = showsAlerts
        self.showsBadge = showsBadge
        self.playsSound = playsSound
    }
}

/// One request to the provider API: the path's device token, the environment's host, the
/// headers other than `authorization`, and the JSON payload.
public struct APNsRequest: Sendable {
    public var deviceToken: String
    public var environment: APNsDevice.Environment
    public var headers: [(String, String)]
    public var payload: Data

    /// The path on the provider API.
    public var path: String { "/3/device/\(deviceToken)" }
}
