import BelfryJSON
import Foundation

/// Shapes a notification for one device: its headers and JSON payload, following what the
/// device allows (SPEC §4).
public enum APNsPayload {
    /// The largest payload APNs takes for a notification.
    public static let maxSize = 4096

    /// The request for `device`, or `nil` when it must not get one: the OS does not allow
    /// notifications, or its settings leave nothing to show.
    /// - Parameters:
    ///   - unread: the user's unread count now, the app icon's badge.
    ///   - topic: the app's bundle id, the `apns-topic` header.
    public static func request(
        _ notification: APNsNotification, device: APNsDevice, unread: Int, topic: String
    ) -> APNsRequest? {
        if notification.background { return backgroundRequest(notification, device: device, topic: topic) }
        guard device.authorization.allowsDelivery else { return nil }
        let provisional = device.authorization == .provisional
        // A provisional authorization delivers quietly to the Notification Center: no badge
        // on the icon, as the system would not show one.
        let showsBadge = device.showsBadge && !provisional
        guard device.showsAlerts || showsBadge else { return nil }

        // Written by hand, keys in sorted order: Foundation's JSONSerialization (a dynamic cast
        // per value, keys sorted through ICU) took a quarter of the CPU of a push in a profile.
        var json = JSONBytes()
        json.open("aps")
        if device.showsAlerts {
            json.open("alert")
            json.field("body", notification.body)
            json.field("title", notification.title)
            json.close()
        }
        if showsBadge { json.field("badge", unread) }
        json.field("category", notification.category)
        if device.showsAlerts {
            // A provisional authorization delivers quietly, whatever the notification asks.
            let level = provisional ? .passive : notification.interruptionLevel
            if let level { json.field("interruption-level", level.rawValue) }
            if notification.imageURL != nil { json.field("mutable-content", 1) }
            if device.playsSound && !provisional { json.field("sound", "default") }
            if let thread = notification.threadID { json.field("thread-id", thread) }
        }
        json.close()
        custom(notification, into: &json)
        let payload = json.finish()

        var headers: [(String, String)] = [
            ("apns-push-type", "alert"),
            ("apns-id", notification.id.lowerCaseText),
            ("apns-topic", topic),
            // 10 sends at once; 5 lets the device save power. A badge-only update is never urgent.
            ("apns-priority", notification.urgent && device.showsAlerts ? "10" : "5"),
        ]
        headers += expiryAndCollapse(notification)
        return APNsRequest(
            deviceToken: device.token, environment: device.environment, headers: headers, payload: payload)
    }

    /// A background notification: `content-available` and Belfry's dictionary, no alert, sound or
    /// badge, at priority 5 as Apple requires. It needs no permission to show anything, so it
    /// goes to every device the app registered, whatever its authorization.
    private static func backgroundRequest(
        _ notification: APNsNotification, device: APNsDevice, topic: String
    ) -> APNsRequest {
        var json = JSONBytes()
        json.open("aps")
        json.field("content-available", 1)
        json.close()
        custom(notification, into: &json)
        var headers: [(String, String)] = [
            ("apns-push-type", "background"),
            ("apns-id", notification.id.lowerCaseText),
            ("apns-topic", topic),
            ("apns-priority", "5"),
        ]
        headers += expiryAndCollapse(notification)
        return APNsRequest(
            deviceToken: device.token, environment: device.environment, headers: headers, payload: json.finish())
    }

    /// Belfry's own dictionary: the notification's id, tenant, target, data and batch.
    private static func custom(_ notification: APNsNotification, into json: inout JSONBytes) {
        json.open("belfry")
        if let count = notification.batchCount {
            json.open("batch")
            json.field("count", count)
            json.close()
        }
        // The event's data is JSON already (checked when it was accepted); only valid JSON is sent.
        if let data = notification.data,
            (try? JSONSerialization.jsonObject(with: Data(data.utf8), options: .fragmentsAllowed)) != nil
        {
            json.field("data", raw: data)
        }
        if let image = notification.imageURL { json.field("image_url", image) }
        json.field("notification_id", uuid: notification.notificationID)
        json.field("tenant", notification.tenant)
        if let url = notification.url { json.field("url", url) }
        json.close()
    }

    /// `apns-expiration` from the time to live, and `apns-collapse-id`.
    private static func expiryAndCollapse(_ notification: APNsNotification) -> [(String, String)] {
        var headers: [(String, String)] = []
        if let ttl = notification.ttlSeconds {
            let expiration = ttl == 0 ? 0 : Int(notification.createdAt.timeIntervalSince1970) + ttl
            headers.append(("apns-expiration", String(expiration)))
        }
        if let collapse = notification.collapseID { headers.append(("apns-collapse-id", collapse)) }
        return headers
    }

    /// The largest payload a notification can make: every field a device may get, and a large
    /// badge. Notifications over ``maxSize`` are refused before they are accepted.
    public static func largestSize(_ notification: APNsNotification) -> Int {
        let device = APNsDevice(token: "", environment: .production, authorization: .authorized)
        return request(notification, device: device, unread: 9_999_999, topic: "")?.payload.count ?? 0
    }
}
