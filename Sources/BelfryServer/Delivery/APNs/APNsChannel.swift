import BelfryAPNs
import BelfryCore
import Foundation
import NIOCore

/// Delivers to one APNs device per delivery. The payload is shaped when sent, from the
/// device's current authorization and settings and the user's unread count then.
struct APNsChannel: DeliveryProvider {
    /// One provider per app, all on one event loop.
    let providers: ByApp<APNsProvider>

    var maxAttempts: Int { 8 }
    /// Pushes under way on the one HTTP/2 connection. Beyond the streams the server allows at
    /// once (its SETTINGS_MAX_CONCURRENT_STREAMS; 100 for most servers), the HTTP/2 client
    /// holds a new request until a stream ends: the queue then claims 400 at a time rather than
    /// 100, and claims less often (`scripts/benchmark_push_queue.py`: 4 773-4 812 pushes/s with
    /// 100, 6 427-6 714 with 400).
    var concurrency: Int { 400 }

    var sendLoop: (any EventLoop)? { providers.any?.eventLoop }

    func deliver(_ delivery: Delivery) async -> DeliveryResult {
        guard case .push(let device?, let unread) = delivery.payload else {
            return .failed(reason: "the device was removed")
        }
        guard let provider = providers[device.app] else { return ByApp<APNsProvider>.missing(device.app, .apns) }
        guard let topic = device.topic ?? provider.configuration.topic else {
            return .failed(
                reason: "no APNs topic: set \(ServerSetting.apnsTopic.environment) or register the device with one")
        }
        guard
            let request = APNsPayload.request(
                APNsNotification(delivery.content), device: APNsDevice(device), unread: unread, topic: topic)
        else {
            return .failed(
                reason: "the device no longer lets the app notify (authorization \(device.authorization.rawValue))")
        }
        do {
            return Self.result(of: try await provider.send(request), device: device.id)
        } catch let error as APNsProviderTokens.SigningFailed {
            return .retry(reason: "could not sign the APNs provider token: \(error.underlying)")
        } catch {
            return .retry(reason: "APNs could not be reached: \(error)")
        }
    }

    static func result(of answer: APNsProvider.Answer, device: UUID) -> DeliveryResult {
        let reason = answer.reason?.description ?? "HTTP \(answer.status)"
        if answer.status == 410 || (answer.status == 400 && answer.reason?.retiresDevice == true) {
            return .retire(device: device, reason: reason, status: answer.status)
        }
        switch answer.status {
        case 200:
            return .delivered(status: 200)
        case 429, 500...599:
            return .retry(after: answer.retryAfter, reason: reason, status: answer.status)
        case 403 where answer.reason == .expiredProviderToken:
            return .retry(reason: reason, status: answer.status)
        default:
            return .failed(reason: reason, status: answer.status)
        }
    }
}

// The APNs core knows nothing of Belfry's rows: the channel hands it plain values.

extension APNsNotification {
    init(_ content: DeliveryContent) {
        let push = content.category.push
        self.init(
            id: content.deliveryID, notificationID: content.notificationID, category: content.category.id,
            tenant: content.tenant, title: content.title, body: content.body, url: content.url,
            imageURL: content.imageURL, data: content.data,
            threadID: content.pushThread, collapseID: push.collapseKey,
            interruptionLevel: push.interruptionLevel.map(InterruptionLevel.init),
            urgent: push.priority == .high, createdAt: content.createdAt, ttlSeconds: content.ttlSeconds,
            batchCount: content.batch?.count, background: content.background)
    }
}

extension APNsDevice {
    init(_ device: PushDevice) {
        self.init(
            token: device.address, environment: device.environment == .sandbox ? .sandbox : .production,
            authorization: Authorization(device.authorization),
            // With alerts off the Notification Center may still list the text (seed 003): keep it then.
            showsAlerts: device.settings.showsText, showsBadge: device.settings.badge == .enabled,
            playsSound: device.settings.sound == .enabled)
    }
}

extension APNsNotification.InterruptionLevel {
    init(_ level: PushHints.InterruptionLevel) {
        self =
            switch level {
            case .passive: .passive
            case .active: .active
            case .timeSensitive: .timeSensitive
            case .critical: .critical
            }
    }
}

extension APNsDevice.Authorization {
    init(_ authorization: PushAuthorization) {
        self =
            switch authorization {
            case .notDetermined: .notDetermined
            case .denied: .denied
            case .authorized: .authorized
            case .provisional: .provisional
            case .ephemeral: .ephemeral
            }
    }
}
