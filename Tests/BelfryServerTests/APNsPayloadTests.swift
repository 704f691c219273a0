import BelfryCore
import BelfryTestSupport
import Foundation
import Testing

@testable import BelfryServer

/// The payload follows the device (SPEC §4).
@Suite("APNs payload shaping")
struct APNsPayloadTests {
    static func device(
        _ authorization: PushAuthorization, _ settings: PushSettings = PushSettings()
    )
        -> DeviceStore.Device
    {
        DeviceStore.Device(
            id: UUID(), userID: UUID(), platform: .apns, address: DevicesAPITests.token, environment: .sandbox,
            authorization: authorization, settings: settings, createdAt: Date(), updatedAt: Date())
    }

    static func aps(_ device: DeviceStore.Device, category: String = "edit-user-talk") throws -> [String: Any]? {
        let definition = try #require(WorkspaceConfig.demo.category(category))
        let content = DeliveryContent(
            deliveryID: UUID(), notificationID: UUID(), category: definition, tenant: "enwiki", title: "T", body: "B",
            createdAt: Date())
        guard let request = APNsPayload.request(content, device: device, unread: 3, topic: "org.example") else {
            return nil
        }
        let payload = try JSONSerialization.jsonObject(with: request.payload) as? [String: Any]
        return payload?["aps"] as? [String: Any]
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

    @Test("provisional: no sound, delivered passively")
    func provisional() throws {
        let aps = try #require(try Self.aps(Self.device(.provisional)))
        #expect(aps["sound"] == nil)
        #expect(aps["interruption-level"] as? String == "passive")
        #expect(aps["alert"] != nil)
    }

    @Test("alerts off: badge only; sound off: silent; nothing to show: nothing sent")
    func settings() throws {
        let badgeOnly = try #require(try Self.aps(Self.device(.authorized, PushSettings(alert: .disabled))))
        #expect(badgeOnly["alert"] == nil)
        #expect(badgeOnly["sound"] == nil)
        #expect(badgeOnly["badge"] as? Int == 3)
        let silent = try #require(try Self.aps(Self.device(.authorized, PushSettings(sound: .disabled))))
        #expect(silent["sound"] == nil)
        #expect(silent["alert"] != nil)
        let noBadge = try #require(try Self.aps(Self.device(.ephemeral, PushSettings(badge: .notSupported))))
        #expect(noBadge["badge"] == nil)
        #expect(try Self.aps(Self.device(.authorized, PushSettings(alert: .disabled, badge: .disabled))) == nil)
    }

    @Test("denied or not determined: not sent", arguments: [PushAuthorization.denied, .notDetermined])
    func notAllowed(authorization: PushAuthorization) throws {
        #expect(try Self.aps(Self.device(authorization)) == nil)
    }
}
