import BelfryCore
import BelfryFCM
import Foundation
import NIOCore

/// Delivers to one Android device per delivery, through FCM. The message is shaped when sent,
/// from the device's current settings and the user's unread count then.
struct FCMChannel: DeliveryProvider {
    /// One provider per app, all on one event loop.
    let providers: ByApp<FCMProvider>
    let now: @Sendable () -> Date

    var maxAttempts: Int { 8 }
    /// Messages under way on the one HTTP/2 connection, as for APNs (`APNsChannel.concurrency`):
    /// NIOHTTP2 holds streams beyond the server's limit until one ends.
    var concurrency: Int { 400 }

    var sendLoop: (any EventLoop)? { providers.any?.eventLoop }

    func deliver(_ delivery: Delivery) async -> DeliveryResult {
        guard case .push(let device?, let unread) = delivery.payload else {
            return .failed(reason: "the device was removed")
        }
        guard let provider = providers[device.app] else { return ByApp<FCMProvider>.missing(device.app, .fcm) }
        var notification = FCMNotification(delivery.content)
        // FCM counts a message's time to live from the send, not from when the event was accepted.
        notification.ttlSeconds = delivery.content.ttlSeconds.map {
            $0 == 0 ? 0 : max($0 - Int(now().timeIntervalSince(delivery.content.createdAt)), 0)
        }
        guard let request = FCMPayload.request(notification, device: FCMDevice(device), unread: unread)
        else {
            return .failed(
                reason: "the device no longer lets the app notify (authorization \(device.authorization.rawValue))")
        }
        do {
            return Self.result(of: try await provider.send(request), device: device.id)
        } catch let failure as FCMAccessTokens.Failure {
            return failure.isTransient ? .retry(reason: failure.description) : .failed(reason: failure.description)
        } catch {
            return .retry(reason: "FCM could not be reached: \(error)")
        }
    }

    static func result(of answer: FCMProvider.Answer, device: UUID) -> DeliveryResult {
        guard case .refused(let failure, let retryAfter) = answer else { return .delivered(status: 200) }
        let reason = failure.description
        if failure.code?.retiresDevice == true {
            return .retire(device: device, reason: reason, status: failure.status)
        }
        switch (failure.status, failure.code) {
        case (_, .thirdPartyAuthError?):
            return .failed(
                reason: "FCM could not authenticate to the device's platform with the project's credentials: \(reason)",
                status: failure.status)
        case (429, _), (500...599, _), (_, .quotaExceeded?), (_, .unavailable?), (_, .internal?):
            return .retry(after: retryAfter, reason: reason, status: failure.status)
        default:
            return .failed(reason: reason, status: failure.status)
        }
    }
}

// The FCM core knows nothing of Belfry's rows: the channel hands it plain values.

extension FCMNotification {
    init(_ content: DeliveryContent) {
        let push = content.category.push
        self.init(
            id: content.deliveryID, notificationID: content.notificationID, category: content.category.id,
            tenant: content.tenant, title: content.title, body: content.body, url: content.url,
            imageURL: content.imageURL, data: content.data,
            tag: content.pushThread, collapseKey: push.collapseKey,
            urgent: push.priority == .high, ttlSeconds: content.ttlSeconds, batchCount: content.batch?.count,
            background: content.background)
    }
}

extension FCMDevice {
    init(_ device: PushDevice) {
        self.init(
            token: device.address, allowsNotifications: device.authorization.allowsDelivery,
            showsAlerts: device.settings.showsText, showsBadge: device.settings.badge == .enabled)
    }
}
