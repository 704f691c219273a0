import BelfryCore
import Fluent
import Foundation
import SQLKit

/// What a push channel (APNs, Web Push) needs for one delivery, read when it is sent: the
/// device as it is now, the notification's content, and the user's unread count.
struct PushTarget: Sendable {
    var device: DeviceStore.Device
    var content: PushContent
    var unread: Int

    enum Loaded: Sendable {
        case ready(PushTarget)
        /// The delivery cannot go out: the device is gone or retired, or its category left the config.
        case finished(DeliveryOutcome)
    }

    /// Loads the target of `job`.
    /// - Parameter device: what to call the device in errors ("device", "subscription").
    static func load(
        _ job: DeliveryJob, device noun: String, context: BelfryContext, on db: any Database
    ) async throws -> Loaded {
        guard let deviceID = job.deviceID, let device = try await DeviceStore(context: context).device(deviceID, on: db)
        else {
            return .finished(.permanentFailure(status: nil, error: "the \(noun) was removed"))
        }
        if device.retiredAt != nil {
            return .finished(
                .permanentFailure(
                    status: nil, error: "the \(noun) was retired: \(device.retiredReason ?? "no reason given")"))
        }
        guard let category = context.workspace.category(job.category) else {
            return .finished(
                .permanentFailure(
                    status: nil, error: "category \"\(job.category)\" is no longer in the workspace config"))
        }
        let event = try await db.sql.select().columns("image_url", "ttl_seconds").from("events")
            .where("id", .equal, job.eventID).first()
        let unread = try await InboxStore(context: context).counts(userID: job.userID, tenant: nil, on: db).unread
        let content = PushContent(
            deliveryID: job.id, notificationID: job.notificationID, category: category, tenant: job.tenant,
            title: job.title, body: job.body, url: job.url,
            imageURL: try event?.decode(column: "image_url", as: String?.self), data: job.data,
            createdAt: job.createdAt,
            ttlSeconds: try event?.decode(column: "ttl_seconds", as: Int?.self) ?? category.push.ttlSeconds)
        return .ready(PushTarget(device: device, content: content, unread: unread))
    }
}
