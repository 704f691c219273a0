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
        if device.showsBadge { json.field("badge", unread) }
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
        json.field("notification_id", notification.notificationID.uuidString.lowercased())
        json.field("tenant", notification.tenant)
        if let url = notification.url { json.field("url", url) }
        json.close()
        let payload = json.finish()

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

/// A JSON object written as bytes, in the order its fields are given (callers give them
/// sorted); strings escaped as JSONSerialization escapes them, slashes left as they are.
struct JSONBytes {
    private var bytes: [UInt8] = [UInt8(ascii: "{")]
    /// Whether the object being written has a field yet, one level per open object.
    private var started: [Bool] = [false]

    init() {
        bytes.reserveCapacity(512)
    }

    private mutating func key(_ name: String) {
        if started[started.count - 1] { bytes.append(UInt8(ascii: ",")) }
        started[started.count - 1] = true
        string(name)
        bytes.append(UInt8(ascii: ":"))
    }

    mutating func open(_ name: String) {
        key(name)
        bytes.append(UInt8(ascii: "{"))
        started.append(false)
    }

    mutating func close() {
        bytes.append(UInt8(ascii: "}"))
        started.removeLast()
    }

    mutating func field(_ name: String, _ value: String) {
        key(name)
        string(value)
    }

    mutating func field(_ name: String, _ value: Int) {
        key(name)
        bytes.append(contentsOf: String(value).utf8)
    }

    /// A value that is JSON text already.
    mutating func field(_ name: String, raw: String) {
        key(name)
        bytes.append(contentsOf: raw.utf8)
    }

    mutating func finish() -> Data {
        bytes.append(UInt8(ascii: "}"))
        return Data(bytes)
    }

    private mutating func string(_ text: String) {
        bytes.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case 0x0A: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0x08: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "b")])
            case 0x0C: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "f")])
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                bytes.append(contentsOf: Array("\\u00".utf8))
                bytes.append(hex[Int(byte >> 4)])
                bytes.append(hex[Int(byte & 0xF)])
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }
}
