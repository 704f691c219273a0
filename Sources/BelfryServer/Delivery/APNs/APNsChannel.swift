import BelfryCore
import Foundation

/// Delivers to one APNs device per delivery. The payload is shaped when sent, from the
/// device's current authorization and settings and the user's unread count then.
struct APNsChannel: DeliveryProvider {
    let provider: APNsProvider

    var maxAttempts: Int { 8 }

    func deliver(_ delivery: Delivery) async -> DeliveryResult {
        guard let device = delivery.device else { return .failed(reason: "the device was removed") }
        guard let topic = device.topic ?? provider.configuration.topic else {
            return .failed(reason: "no APNs topic: set BELFRY_APNS_TOPIC or register the device with one")
        }
        guard
            let request = APNsPayload.request(delivery.content, device: device, unread: delivery.unread, topic: topic)
        else {
            return .failed(
                reason: "the device no longer lets the app notify (authorization \(device.authorization.rawValue))")
        }
        do {
            return Self.result(of: try await provider.send(request), device: device.id)
        } catch let error as ProviderTokens.SigningFailed {
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
