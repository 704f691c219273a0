import BelfryAPNs
import Foundation
import Testing

/// The payload follows the device (SPEC §4).
@Suite("APNs payload shaping")
struct APNsPayloadTests {
    static let token = String(repeating: "ab12", count: 16)

    static func device(
        _ authorization: APNsDevice.Authorization, alert: Bool = true, badge: Bool = true, sound: Bool = true
    ) -> APNsDevice {
        APNsDevice(
            token: token, environment: .sandbox, authorization: authorization, showsAlerts: alert, showsBadge: badge,
            playsSound: sound)
    }

    static let notification = APNsNotification(
        id: UUID(), notificationID: UUID(), category: "edit-user-talk", tenant: "enwiki", title: "T", body: "B",
        threadID: "talk", interruptionLevel: .active, createdAt: Date())

    static func payload(
        _ device: APNsDevice, _ notification: APNsNotification = notification
    ) throws -> [String: Any]? {
        guard let request = APNsPayload.request(notification, device: device, unread: 3, topic: "org.example") else {
            return nil
        }
        return try JSONSerialization.jsonObject(with: request.payload) as? [String: Any]
    }

    static func aps(_ device: APNsDevice) throws -> [String: Any]? {
        try payload(device)?["aps"] as? [String: Any]
    }

    @Test("authorized: alert, sound, badge, the category's interruption level and thread")
    func authorized() throws {
        let aps = try #require(try Self.aps(Self.device(.authorized)))
        #expect(aps["alert"] as? [String: String] == ["title": "T", "body": "B"])
        #expect(aps["sound"] as? String == "default")
        #expect(aps["badge"] as? Int == 3)
        #expect(aps["interruption-level"] as? String == "active")
        #expect(aps["thread-id"] as? String == "talk")
        #expect(aps["category"] as? String == "edit-user-talk")
        #expect(aps["mutable-content"] == nil, "no media")
    }

    @Test("provisional: no sound and no badge, delivered passively")
    func provisional() throws {
        let aps = try #require(try Self.aps(Self.device(.provisional)))
        #expect(aps["sound"] == nil)
        #expect(aps["badge"] == nil, "quiet delivery puts no count on the icon")
        #expect(aps["interruption-level"] as? String == "passive")
        #expect(aps["alert"] != nil)
        #expect(try Self.aps(Self.device(.provisional, alert: false)) == nil, "a badge alone it would not show")
    }

    @Test("alerts off: badge only; sound off: silent; nothing to show: nothing sent")
    func settings() throws {
        let badgeOnly = try #require(try Self.aps(Self.device(.authorized, alert: false)))
        #expect(badgeOnly["alert"] == nil)
        #expect(badgeOnly["sound"] == nil)
        #expect(badgeOnly["badge"] as? Int == 3)
        let silent = try #require(try Self.aps(Self.device(.authorized, sound: false)))
        #expect(silent["sound"] == nil)
        #expect(silent["alert"] != nil)
        let noBadge = try #require(try Self.aps(Self.device(.ephemeral, badge: false)))
        #expect(noBadge["badge"] == nil)
        #expect(try Self.aps(Self.device(.authorized, alert: false, badge: false)) == nil)
    }

    @Test("denied or not determined: not sent", arguments: [APNsDevice.Authorization.denied, .notDetermined])
    func notAllowed(authorization: APNsDevice.Authorization) throws {
        #expect(try Self.aps(Self.device(authorization)) == nil)
    }

    @Test("the app's part: ids, url, image (mutable content), and the event's data as JSON")
    func custom() throws {
        var notification = Self.notification
        notification.url = "https://en.wikipedia.org/wiki/User_talk:Ada"
        notification.imageURL = "https://upload.example/a.png"
        notification.data = #"{"page":"User talk:Ada","revision":42,"tags":["a"]}"#
        let payload = try #require(try Self.payload(Self.device(.authorized), notification))
        let belfry = try #require(payload["belfry"] as? [String: Any])
        #expect(belfry["notification_id"] as? String == notification.notificationID.uuidString.lowercased())
        #expect(belfry["tenant"] as? String == "enwiki")
        #expect(belfry["url"] as? String == notification.url)
        #expect(belfry["image_url"] as? String == notification.imageURL)
        let data = try #require(belfry["data"] as? [String: Any])
        #expect(data["page"] as? String == "User talk:Ada")
        #expect(data["revision"] as? Int == 42)
        #expect(data["tags"] as? [String] == ["a"])
        #expect((payload["aps"] as? [String: Any])?["mutable-content"] as? Int == 1)

        notification.data = "not json"
        let unreadable = try #require(try Self.payload(Self.device(.authorized), notification))
        #expect((unreadable["belfry"] as? [String: Any])?["data"] == nil, "text that is not JSON is left out")
        #expect((unreadable["belfry"] as? [String: Any])?["tenant"] as? String == "enwiki")
    }

    @Test("headers: push type, id, topic, priority, expiration and collapse id")
    func headers() throws {
        var notification = Self.notification
        notification.createdAt = Date(timeIntervalSince1970: 1_800_000_000)
        notification.ttlSeconds = 3600
        notification.collapseID = "talk-page"
        let request = try #require(
            APNsPayload.request(notification, device: Self.device(.authorized), unread: 0, topic: "org.example"))
        let headers = Dictionary(uniqueKeysWithValues: request.headers)
        #expect(headers["apns-push-type"] == "alert")
        #expect(headers["apns-id"] == notification.id.uuidString.lowercased())
        #expect(headers["apns-topic"] == "org.example")
        #expect(headers["apns-priority"] == "10")
        #expect(headers["apns-expiration"] == "1800003600")
        #expect(headers["apns-collapse-id"] == "talk-page")
        #expect(request.path == "/3/device/\(Self.token)")
        #expect(request.environment == .sandbox)

        notification.ttlSeconds = 0
        notification.urgent = false
        let once = try #require(
            APNsPayload.request(notification, device: Self.device(.authorized), unread: 0, topic: "org.example"))
        #expect(Dictionary(uniqueKeysWithValues: once.headers)["apns-expiration"] == "0", "0: one attempt only")
        #expect(Dictionary(uniqueKeysWithValues: once.headers)["apns-priority"] == "5")
        let badgeOnly = try #require(
            APNsPayload.request(
                Self.notification, device: Self.device(.authorized, alert: false), unread: 1, topic: "org.example"))
        #expect(Dictionary(uniqueKeysWithValues: badgeOnly.headers)["apns-priority"] == "5", "a badge is never urgent")
    }

    @Test("the largest size counts every field and a seven-digit badge")
    func largestSize() throws {
        var notification = Self.notification
        notification.title = String(repeating: "é", count: 2000)
        let size = APNsPayload.largestSize(notification)
        #expect(size > APNsPayload.maxSize)
        let request = try #require(
            APNsPayload.request(notification, device: Self.device(.authorized), unread: 1, topic: "org.example"))
        #expect(size == request.payload.count + 6, "9 999 999 is six digits longer than 1")
    }

    @Test("the payload is the JSON JSONSerialization writes for the same values: escapes, unicode, data, every field")
    func sameAsJSONSerialization() throws {
        let awkward = "Quote \" backslash \\ slash / tab \t newline \n bell \u{7} Grüße ✓ 🔔"
        let notifications = [
            Self.notification,
            APNsNotification(
                id: UUID(), notificationID: UUID(), category: "mention", tenant: "de\"wiki", title: awkward,
                body: awkward, url: "https://example.org/a/b?c=d&e=f", imageURL: "https://example.org/i.png",
                data: #"{"revision":42,"minor":true,"nested":{"list":[1,"two",null]},"text":"a/b \"q\""}"#,
                threadID: awkward, interruptionLevel: .timeSensitive, createdAt: Date(), batchCount: 12),
            APNsNotification(
                id: UUID(), notificationID: UUID(), category: "c", tenant: "t", title: "", body: "",
                data: "not json", createdAt: Date()),
        ]
        let devices = [
            Self.device(.authorized), Self.device(.provisional), Self.device(.authorized, alert: false),
            Self.device(.authorized, badge: false, sound: false),
        ]
        for notification in notifications {
            for device in devices {
                let request = try #require(
                    APNsPayload.request(notification, device: device, unread: 7, topic: "org.example"))
                let written = try #require(try JSONSerialization.jsonObject(with: request.payload) as? NSDictionary)
                let expected = try #require(
                    try JSONSerialization.jsonObject(with: Self.reference(notification, device, unread: 7))
                        as? NSDictionary)
                #expect(written == expected, "\(String(decoding: request.payload, as: UTF8.self))")
            }
        }
    }

    /// The payload as the values it holds, written by JSONSerialization: the oracle for the
    /// hand-written bytes.
    static func reference(_ notification: APNsNotification, _ device: APNsDevice, unread: Int) throws -> Data {
        let provisional = device.authorization == .provisional
        var aps: [String: Any] = ["category": notification.category]
        if device.showsAlerts {
            aps["alert"] = ["title": notification.title, "body": notification.body]
            if device.playsSound && !provisional { aps["sound"] = "default" }
            if let thread = notification.threadID { aps["thread-id"] = thread }
            if notification.imageURL != nil { aps["mutable-content"] = 1 }
            if let level = provisional ? .passive : notification.interruptionLevel {
                aps["interruption-level"] = level.rawValue
            }
        }
        if device.showsBadge && !provisional { aps["badge"] = unread }
        var belfry: [String: Any] = [
            "notification_id": notification.notificationID.uuidString.lowercased(), "tenant": notification.tenant,
        ]
        if let url = notification.url { belfry["url"] = url }
        if let image = notification.imageURL { belfry["image_url"] = image }
        if let count = notification.batchCount { belfry["batch"] = ["count": count] }
        if let data = notification.data, let value = try? JSONSerialization.jsonObject(with: Data(data.utf8)) {
            belfry["data"] = value
        }
        return try JSONSerialization.data(withJSONObject: ["aps": aps, "belfry": belfry])
    }
}
