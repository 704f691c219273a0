import BelfryJSON
import Foundation

/// One notification as FCM will carry it to an Android app, before it is shaped for a device.
public struct FCMNotification: Sendable, Hashable {
    /// The delivery's id, in `data` for the app's logs and the operator's.
    public var id: UUID
    /// The notification the app shows; the app marks it read by this id.
    public var notificationID: UUID
    /// The category: also the Android notification channel the app created for it.
    public var category: String
    public var tenant: String
    public var title: String
    public var body: String
    public var url: String?
    public var imageURL: String?
    /// The event's `data`: JSON text, passed to the app as one string. Text that is not JSON is left out.
    public var data: String?
    /// Notifications with the same tag replace each other in the tray (a thread, or a digest's kind).
    public var tag: String?
    /// Messages with the same key replace each other while the device is offline.
    public var collapseKey: String?
    /// Whether the message should wake the device (`HIGH`) rather than wait (`NORMAL`).
    public var urgent: Bool
    /// How long FCM keeps the message for an offline device, counted from the send; 0 means now or never.
    public var ttlSeconds: Int?
    /// For a digest: how many events it gathered.
    public var batchCount: Int?
    /// A background message: data only, for the app to fetch with; nothing shown.
    public var background: Bool

    public init(
        id: UUID, notificationID: UUID, category: String, tenant: String, title: String, body: String,
        url: String? = nil, imageURL: String? = nil, data: String? = nil, tag: String? = nil,
        collapseKey: String? = nil, urgent: Bool = true, ttlSeconds: Int? = nil, batchCount: Int? = nil,
        background: Bool = false
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
        self.tag = tag
        self.collapseKey = collapseKey
        self.urgent = urgent
        self.ttlSeconds = ttlSeconds
        self.batchCount = batchCount
        self.background = background
    }
}

/// The Android device a message goes to, and what its owner lets the app do there.
public struct FCMDevice: Sendable, Hashable {
    /// The FCM registration token.
    public var token: String
    /// Whether the app may post notifications (Android 13's `POST_NOTIFICATIONS`, or the app's
    /// notifications turned off in the system settings).
    public var allowsNotifications: Bool
    /// Whether the device shows a notification's text (the app's alert setting).
    public var showsAlerts: Bool
    /// Whether the launcher shows a count on the app's icon.
    public var showsBadge: Bool

    public init(token: String, allowsNotifications: Bool = true, showsAlerts: Bool = true, showsBadge: Bool = true) {
        self.token = token
        self.allowsNotifications = allowsNotifications
        self.showsAlerts = showsAlerts
        self.showsBadge = showsBadge
    }
}

/// One send: the JSON body for `POST /v1/projects/{project}/messages:send`.
public struct FCMRequest: Sendable {
    public var token: String
    public var body: Data
}

/// Shapes a notification for one Android device (FCM HTTP v1's `Message`).
public enum FCMPayload {
    /// The largest message FCM takes: keys and values of the payload.
    public static let maxSize = 4096
    /// The longest time FCM keeps a message: four weeks.
    public static let maxTTL = 2_419_200

    /// The request for `device`, or `nil` when it must not get one: the app may not post
    /// notifications, or the device's settings leave nothing to show.
    /// - Parameter unread: the user's unread count now: the notification's count and the
    ///   launcher badge, and `unread` in `data` for an app that draws its own.
    public static func request(_ notification: FCMNotification, device: FCMDevice, unread: Int) -> FCMRequest? {
        // A background message shows nothing, so it needs no permission to show anything.
        let background = notification.background
        guard background || (device.allowsNotifications && (device.showsAlerts || device.showsBadge)) else {
            return nil
        }
        let showsAlerts = device.showsAlerts && !background
        // Keys in sorted order, written by hand as the APNs payload is: no Foundation encoder per send.
        var json = JSONBytes()
        json.open("message")
        json.open("android")
        if let key = notification.collapseKey { json.field("collapse_key", key) }
        if showsAlerts {
            json.open("notification")
            json.field("channel_id", notification.category)
            if device.showsBadge { json.field("notification_count", unread) }
            if let tag = notification.tag { json.field("tag", tag) }
            json.close()
        }
        json.field("priority", notification.urgent && showsAlerts ? "HIGH" : "NORMAL")
        if let ttl = notification.ttlSeconds { json.field("ttl", "\(min(max(ttl, 0), maxTTL))s") }
        json.close()
        // FCM's data values are strings only; the app reads Belfry's ids from here.
        json.open("data")
        if background { json.field("background", "1") }
        if let count = notification.batchCount { json.field("batch_count", String(count)) }
        json.field("category", notification.category)
        if let data = notification.data,
            (try? JSONSerialization.jsonObject(with: Data(data.utf8), options: .fragmentsAllowed)) != nil
        {
            json.field("data", data)
        }
        json.field("delivery_id", uuid: notification.id)
        if let image = notification.imageURL { json.field("image_url", image) }
        json.field("notification_id", uuid: notification.notificationID)
        json.field("tenant", notification.tenant)
        json.field("unread", String(unread))
        if let url = notification.url { json.field("url", url) }
        json.close()
        if showsAlerts {
            json.open("notification")
            json.field("body", notification.body)
            if let image = notification.imageURL { json.field("image", image) }
            json.field("title", notification.title)
            json.close()
        }
        json.field("token", device.token)
        json.close()
        return FCMRequest(token: device.token, body: json.finish())
    }

    /// The largest message a notification can make: every field a device may get, a long
    /// token and a large count. Notifications over ``maxSize`` are refused before they are accepted.
    public static func largestSize(_ notification: FCMNotification) -> Int {
        let device = FCMDevice(token: String(repeating: "x", count: 200))
        return request(notification, device: device, unread: 9_999_999)?.body.count ?? 0
    }
}
