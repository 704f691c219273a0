import BelfryCore
import Fluent
import Foundation
import SQLKit

/// Delivers to one APNs device per delivery. The payload is shaped when sent, from the
/// device's current authorization and settings and the user's unread count then.
struct APNsChannel: DeliveryChannel {
    let context: BelfryContext
    let database: @Sendable () -> any Database
    let provider: APNsProvider

    var maxAttempts: Int { 8 }

    /// Reasons after which the device token is of no further use (Apple's provider API documentation).
    static let retiringReasons: Set<String> = [
        "BadDeviceToken", "DeviceTokenNotForTopic", "Unregistered", "ExpiredToken",
    ]

    func deliver(_ job: DeliveryJob) async -> DeliveryOutcome {
        let db = database()
        do {
            let target: PushTarget
            switch try await PushTarget.load(job, device: "device", context: context, on: db) {
            case .finished(let outcome): return outcome
            case .ready(let loaded): target = loaded
            }
            guard let topic = target.device.topic ?? provider.configuration.topic else {
                return .permanentFailure(
                    status: nil, error: "no APNs topic: set BELFRY_APNS_TOPIC or register the device with one")
            }
            guard
                let request = APNsPayload.request(
                    target.content, device: target.device, unread: target.unread, topic: topic)
            else {
                return .permanentFailure(
                    status: nil,
                    error:
                        "the device no longer lets the app notify (authorization \(target.device.authorization.rawValue))"
                )
            }
            let answer = try await provider.send(request)
            return try await outcome(of: answer, device: target.device, on: db)
        } catch {
            return .retry(status: nil, retryAfter: nil, error: "APNs could not be reached: \(error)")
        }
    }

    private func outcome(
        of answer: APNsProvider.Answer, device: DeviceStore.Device, on db: any Database
    ) async throws
        -> DeliveryOutcome
    {
        let reason = answer.reason ?? "HTTP \(answer.status)"
        if answer.status == 410 || (answer.status == 400 && Self.retiringReasons.contains(reason)) {
            try await DeviceStore(context: context).retire(device.id, reason: reason, on: db)
            return .permanentFailure(status: answer.status, error: "\(reason); the device is retired")
        }
        switch answer.status {
        case 200:
            return .sent(status: 200)
        case 429, 500...599:
            return .retry(status: answer.status, retryAfter: answer.retryAfter, error: reason)
        case 403 where reason == "ExpiredProviderToken":
            return .retry(status: answer.status, retryAfter: nil, error: reason)
        default:
            return .permanentFailure(status: answer.status, error: reason)
        }
    }
}
