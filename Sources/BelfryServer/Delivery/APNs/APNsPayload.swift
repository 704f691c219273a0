import BelfryCore
import Foundation

/// One notification for one APNs device: its headers and JSON payload, shaped to what the
/// device allows (SPEC §4).
struct APNsRequest: Sendable {
    var deviceToken: String
    var environment: APNsEnvironment
    var headers: [(String, String)]
    var payload: Data
}

enum APNsPayload {
    /// The largest payload APNs takes for a notification.
    static let maxSize = 4096

    /// The request for `device`, or `nil` when it must not get one: the OS does not allow
    /// notifications, or its settings leave nothing to show.
    /// - Parameter unread: the user's unread inbox count now, the app icon's badge.
    static func request(
        _ content: DeliveryContent, device: DeviceStore.Device, unread: Int, topic: String
    ) -> APNsRequest? {
        guard device.authorization.allowsDelivery else { return nil }
        let provisional = device.authorization == .provisional
        let showsAlert = device.settings.alert == .enabled
        let showsBadge = device.settings.badge == .enabled
        guard showsAlert || showsBadge else { return nil }

        var aps: [String: JSONValue] = ["category": .string(content.category.id)]
        if showsAlert {
            aps["alert"] = .object(["title": .string(content.title), "body": .string(content.body)])
            if device.settings.sound == .enabled && !provisional { aps["sound"] = .string("default") }
            if let thread = content.category.push.threadID { aps["thread-id"] = .string(thread) }
            if content.imageURL != nil { aps["mutable-content"] = .number(1) }
            // A provisional authorization delivers quietly, whatever the category asks.
            let level = provisional ? .passive : content.category.push.interruptionLevel
            if let level { aps["interruption-level"] = .string(level.rawValue) }
        }
        if showsBadge { aps["badge"] = .number(Double(unread)) }

        var belfry: [String: JSONValue] = [
            "notification_id": .string(content.notificationID.uuidString.lowercased()),
            "tenant": .string(content.tenant),
        ]
        if let url = content.url { belfry["url"] = .string(url) }
        if let image = content.imageURL { belfry["image_url"] = .string(image) }
        if let data = content.data, let value = try? JSONDecoder().decode(JSONValue.self, from: Data(data.utf8)) {
            belfry["data"] = value
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let payload =
            (try? encoder.encode(JSONValue.object(["aps": .object(aps), "belfry": .object(belfry)]))) ?? Data()

        var headers: [(String, String)] = [
            ("apns-push-type", "alert"),
            ("apns-id", content.deliveryID.uuidString.lowercased()),
            ("apns-topic", topic),
            // 10 sends at once; 5 lets the device save power. A badge-only update is never urgent.
            ("apns-priority", content.category.push.priority == .high && showsAlert ? "10" : "5"),
        ]
        if let ttl = content.ttlSeconds {
            let expiration = ttl == 0 ? 0 : Int(content.createdAt.timeIntervalSince1970) + ttl
            headers.append(("apns-expiration", String(expiration)))
        }
        if let collapse = content.category.push.collapseKey { headers.append(("apns-collapse-id", collapse)) }
        return APNsRequest(
            deviceToken: device.address, environment: device.environment ?? .production, headers: headers,
            payload: payload)
    }

    /// The largest payload an event can make: every field a device may get, and a large badge.
    /// Events over `maxSize` are refused when triggered.
    static func largestSize(_ content: DeliveryContent) -> Int {
        let device = DeviceStore.Device(
            id: UUID(), userID: UUID(), platform: .apns, address: "", environment: .production,
            authorization: .authorized, settings: PushSettings(), createdAt: Date(), updatedAt: Date())
        return request(content, device: device, unread: 9_999_999, topic: "")?.payload.count ?? 0
    }
}
