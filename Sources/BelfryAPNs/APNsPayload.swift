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
        guard device.authorization.allowsDelivery else { return nil }
        let provisional = device.authorization == .provisional
        guard device.showsAlerts || device.showsBadge else { return nil }

        var aps: [String: Any] = ["category": notification.category]
        if device.showsAlerts {
            aps["alert"] = ["title": notification.title, "body": notification.body]
            if device.playsSound && !provisional { aps["sound"] = "default" }
            if let thread = notification.threadID { aps["thread-id"] = thread }
            if notification.imageURL != nil { aps["mutable-content"] = 1 }
            // A provisional authorization delivers quietly, whatever the notification asks.
            let level = provisional ? .passive : notification.interruptionLevel
            if let level { aps["interruption-level"] = level.rawValue }
        }
        if device.showsBadge { aps["badge"] = unread }

        var belfry: [String: Any] = [
            "notification_id": notification.notificationID.uuidString.lowercased(),
            "tenant": notification.tenant,
        ]
        if let url = notification.url { belfry["url"] = url }
        if let image = notification.imageURL { belfry["image_url"] = image }
        if let count = notification.batchCount { belfry["batch"] = ["count": count] }
        if let data = notification.data,
            let value = try? JSONSerialization.jsonObject(with: Data(data.utf8), options: .fragmentsAllowed)
        {
            belfry["data"] = value
        }
        // Every value above is a string, a number, a dictionary of them or parsed JSON, which
        // JSONSerialization always writes.
        let payload =
            (try? JSONSerialization.data(
                withJSONObject: ["aps": aps, "belfry": belfry], options: [.sortedKeys, .withoutEscapingSlashes]))
            ?? Data()

        var headers: [(String, String)] = [
            ("apns-push-type", "alert"),
            ("apns-id", notification.id.uuidString.lowercased()),
            ("apns-topic", topic),
            // 10 sends at once; 5 lets the device save power. A badge-only update is never urgent.
            ("apns-priority", notification.urgent && device.showsAlerts ? "10" : "5"),
        ]
        if let ttl = notification.ttlSeconds {
            let expiration = ttl == 0 ? 0 : Int(notification.createdAt.timeIntervalSince1970) + ttl
            headers.append(("apns-expiration", String(expiration)))
        }
        if let collapse = notification.collapseID { headers.append(("apns-collapse-id", collapse)) }
        return APNsRequest(
            deviceToken: device.token, environment: device.environment, headers: headers, payload: payload)
    }

    /// The largest payload a notification can make: every field a device may get, and a large
    /// badge. Notifications over ``maxSize`` are refused before they are accepted.
    public static func largestSize(_ notification: APNsNotification) -> Int {
        let device = APNsDevice(token: "", environment: .production, authorization: .authorized)
        return request(notification, device: device, unread: 9_999_999, topic: "")?.payload.count ?? 0
    }
}
