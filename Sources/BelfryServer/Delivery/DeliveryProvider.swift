import BelfryCore
import Foundation
import NIOCore

/// One delivery as a provider sees it: the queue's claim reads it whole, content, device and
/// badge included, so that a provider only shapes and sends.
struct Delivery: Sendable {
    enum Kind: String, Sendable {
        /// A notification to deliver.
        case notification
        /// A user's answer to one of a notification's custom actions, forwarded to the backend.
        case action
    }

    var id: UUID
    var kind: Kind = .notification
    /// For `.action`: the action the user chose.
    var action: NotificationAction?
    var eventID: UUID
    var channel: ChannelDefinition
    /// This attempt's number, from 1.
    var attempt: Int
    var userID: UUID
    var externalUserID: String
    var content: DeliveryContent
    /// For push channels: the device to deliver to, as it is now.
    var device: DeviceStore.Device?
    /// The user's unread inbox count now: the badge a push carries.
    var unread: Int = 0
    /// The user's email address and locale as they are now, for email.
    var email: String? = nil
    var locale: String? = nil
    /// For a delayed channel: what makes it unnecessary, and the inbox notification as it is now.
    var condition: CategoryChannelDefinition.Condition? = nil
    var readAt: Date? = nil
    var seenAt: Date? = nil
    /// When its event was accepted (the 202), for the delivery latency metric.
    var acceptedAt: Date? = nil

    /// Why this delivery is no longer needed, if it is a fallback whose condition came true.
    var fallbackMet: SkipReason? {
        switch condition {
        case .read where readAt != nil: .readBeforeFallback
        case .seen where seenAt != nil || readAt != nil: .seenBeforeFallback
        default: nil
        }
    }
}

/// What a notification says, as every provider needs it.
struct DeliveryContent: Sendable {
    var deliveryID: UUID
    var notificationID: UUID
    var category: CategoryDefinition
    var tenant: String
    var title: String
    var body: String
    var url: String? = nil
    var imageURL: String? = nil
    /// The event's `data`, as JSON text.
    var data: String? = nil
    var createdAt: Date
    /// The event's own time to live, else the category's.
    var ttlSeconds: Int? = nil
    /// For a digest: the events it gathered.
    var batch: NotificationBatch? = nil

    /// What groups pushes on a device (APNs' thread, FCM's tag): the category's thread, and a
    /// digest's summary with its kind, thread or not.
    var pushThread: String? {
        category.push.threadID ?? (batch != nil ? category.id : nil)
    }
}

/// What a provider's answer means for a delivery. `status` is the provider's own status code,
/// kept on the delivery for the operator.
enum DeliveryResult: Sendable, Equatable {
    case delivered(status: Int? = nil)
    /// Try again later: after `after` seconds when the provider said so, else after backoff.
    case retry(after: TimeInterval? = nil, reason: String, status: Int? = nil)
    /// The device will never take a delivery again: it is retired, and this delivery fails.
    case retire(device: UUID, reason: String, status: Int? = nil)
    /// Trying again cannot help.
    case failed(reason: String, status: Int? = nil)
    /// Not needed any more (a fallback whose notification was read in time); counted with the
    /// event's skips.
    case skipped(SkipReason)
}

/// One channel kind's way to deliver (the inbox, webhook, APNs, Web Push, email). The
/// delivery queue claims, leases and records; a provider only sends one delivery and says
/// what its answer means.
protocol DeliveryProvider: Sendable {
    /// Attempts per delivery before it is dead-lettered.
    var maxAttempts: Int { get }
    /// How many of this kind's deliveries the queue runs at once: what the provider's transport
    /// carries without queueing (HTTP/1.1 connections, HTTP/2 streams, SMTP connections).
    var concurrency: Int { get }
    /// Where a delivery goes, for a provider that sends to many hosts: the queue runs at most
    /// `concurrencyPerOrigin` deliveries to one origin at once, so that a slow host holds only
    /// that share of the kind's slots. Nil: the kind's one destination.
    func origin(of delivery: Delivery) -> String?
    var concurrencyPerOrigin: Int { get }
    /// The event loop on which the queue runs this provider's sends, if not the shared pool:
    /// the loop of the provider's connection, so that a send and its answer stay on one thread
    /// (on Linux, and on Apple platforms that have task executors).
    var sendLoop: (any EventLoop)? { get }
    func deliver(_ delivery: Delivery) async -> DeliveryResult
}

extension DeliveryProvider {
    var sendLoop: (any EventLoop)? { nil }
    var concurrency: Int { 16 }
    func origin(of delivery: Delivery) -> String? { nil }
    var concurrencyPerOrigin: Int { concurrency }
}

/// Backoff between attempts: exponential with full jitter, so retries from many deliveries
/// spread out instead of arriving together.
struct Backoff: Sendable {
    /// The first retry's ceiling; each later one doubles it (`BELFRY_RETRY_BASE`).
    var base: TimeInterval = 5
    var cap: TimeInterval = 3600
    /// The longest wait a provider's Retry-After is allowed to ask for.
    var maxRetryAfter: TimeInterval = 24 * 3600

    /// The wait before the attempt after `attempt`, with `jitter` uniform in 0..<1. A provider's
    /// Retry-After is honoured when it asks for longer than the backoff's own wait, never for
    /// less: `Retry-After: 1` from a failing host would spend every attempt in seconds.
    func delay(afterAttempt attempt: Int, retryAfter: TimeInterval?, jitter: Double) -> TimeInterval {
        let own = min(cap, base * pow(2, Double(max(attempt - 1, 0)))) * jitter
        guard let retryAfter else { return own }
        return min(max(retryAfter, own), maxRetryAfter)
    }
}

/// The in-app inbox. Fan-out writes the notification itself; a notification due later (a
/// calendar schedule) becomes visible at its time, when its delivery comes due: then this
/// tells the user's open streams.
struct InboxProvider: DeliveryProvider {
    /// Tells the streams that the event's notification is now in the user's inbox.
    let becameAvailable: @Sendable (_ event: UUID, _ user: UUID) async -> Void

    var maxAttempts: Int { 1 }
    /// No send to wait for: only this process's streams to tell.
    var concurrency: Int { 256 }

    func deliver(_ delivery: Delivery) async -> DeliveryResult {
        if delivery.kind == .notification { await becameAvailable(delivery.eventID, delivery.userID) }
        return .delivered()
    }
}

extension ChannelKind {
    /// What users call the thing a push channel delivers to, in delivery errors.
    var deviceNoun: String { self == .webPush ? "subscription" : "device" }
}
