import BelfryAPNs
import BelfryCore
import BelfryFCM
import BelfryWebPush
import Foundation
import Testing

@testable import BelfryServer

@Suite("The push size bound: measured only when it may matter")
struct PushSizeBoundTests {
    /// Text of `length` bytes drawn from what grows most in JSON: control characters, quotes,
    /// backslashes, slashes, and some multi-byte letters.
    static func text(_ length: Int, _ random: inout some RandomNumberGenerator) -> String {
        let pieces = ["\u{1}", "\"", "\\", "/", "a", "é", "€", "\n", "<", "\u{7f}"]
        var text = ""
        while text.utf8.count < length { text += pieces.randomElement(using: &random)! }
        return text
    }

    @Test("whenever the bound says a push cannot be over its limit, the push built is within it")
    func boundHolds() throws {
        var random = SystemRandomNumberGenerator()
        let workspace = WorkspaceConfig.demo
        let kinds: Set<ChannelKind> = [.apns, .fcm, .webPush]
        let limits: [ChannelKind: Int] = [
            .apns: APNsPayload.maxSize, .fcm: FCMPayload.maxSize, .webPush: WebPushEncryption.maxPayloadSize,
        ]
        var skipped = 0
        var measured = 0
        for round in 0..<400 {
            let category = workspace.categories[round % workspace.categories.count]
            let size = round % 40 * 10
            let data = round % 3 == 0 ? nil : "{\"k\":\(String(reflecting: Self.text(size / 2, &random)))}"
            let content = DeliveryContent(
                deliveryID: UUID(), notificationID: UUID(), category: category, tenant: workspace.defaultTenant,
                title: Self.text(1 + size / 4, &random), body: Self.text(size, &random),
                url: round % 2 == 0 ? "https://example.org/" + Self.text(size / 8, &random) : nil,
                imageURL: round % 5 == 0 ? "https://example.org/i.png" : nil, data: data, createdAt: Date(),
                ttlSeconds: round % 7 == 0 ? 2_419_200 : nil)
            let sizes: [ChannelKind: Int] = [
                .apns: APNsPayload.largestSize(APNsNotification(content)),
                .fcm: FCMPayload.largestSize(FCMNotification(content)),
                .webPush: WebPushMessage.largestEncryptedSize(content),
            ]
            if PushSizeBound.mayExceed(content, kinds: kinds) {
                measured += 1
            } else {
                skipped += 1
                for (kind, size) in sizes {
                    #expect(size <= limits[kind]!, "\(kind): \(size) bytes let through for round \(round)")
                }
            }
        }
        #expect(skipped > 50, "small events skip the measurement")
        #expect(measured > 50, "large events are measured")
    }

    @Test("a category redefined under the same id (another workspace, a reload) is measured anew")
    func redefinedCategory() throws {
        let workspace = WorkspaceConfig.demo
        var category = workspace.categories[0]
        category.actions = []
        func content(_ category: CategoryDefinition) -> DeliveryContent {
            DeliveryContent(
                deliveryID: UUID(), notificationID: UUID(), category: category, tenant: workspace.defaultTenant,
                title: "t", body: String(repeating: "b", count: 200), url: nil, imageURL: nil, data: nil,
                createdAt: Date(), ttlSeconds: nil)
        }
        #expect(!PushSizeBound.mayExceed(content(category), kinds: [.webPush]))
        // The same id, with actions whose titles fill most of a Web Push message.
        var crowded = category
        crowded.actions = (0..<3).map {
            NotificationAction(id: "action\($0)", title: String(repeating: "x", count: 1_000))
        }
        #expect(PushSizeBound.mayExceed(content(crowded), kinds: [.webPush]))
        #expect(!PushSizeBound.mayExceed(content(category), kinds: [.webPush]))
    }
}
