import BelfryCore
import Foundation
import NIOCore

/// One delivery as a provider sees it: the queue's claim reads it whole, content and what its
/// channel kind needs included, so that a provider only shapes and sends.
struct Delivery: Sendable {
    /// What a delivery row is: a notification, or an answer forwarded to the backend.
    enum Kind: String, Sendable {
        /// A notification to deliver.
        case notification
        /// A user's answer to one of a notification's custom actions, forwarded to the backend.
        case action
    }

    /// What each channel kind needs besides the content, read as it is at the claim.
    enum Payload: Sendable {
        /// The notification is in the inbox already: its streams are told.
        case inbox
        /// The app's webhook: the notification, or the user's answer to one of its actions.
        case webhook(action: NotificationAction?)
        /// One device (`nil`: removed since the delivery was queued), and the user's unread
        /// count now, the badge a push carries.
        case push(PushDevice?, unread: Int)
        /// The user's address (`nil`: removed since) and language now.
        case email(address: String?, locale: String?)
        /// A row its channel cannot carry (an answer to an action on a channel other than a webhook).
        case unsupported(reason: String)
    }

    var id: UUID
    var eventID: UUID
    var channel: ChannelDefinition
    /// This attempt's number, from 1.
    var attempt: Int
    var userID: UUID
    var externalUserID: String
    var content: DeliveryContent
    var payload: Payload
    /// For a delayed channel: what makes it unnecessary, and the inbox notification as it is now.
    var condition: CategoryChannelDefinition.Condition? = nil
    var readAt: Date? = nil
    var seenAt: Date? = nil
    /// When its event was accepted (the 202), for the delivery latency metric.
    var acceptedAt: Date? = nil

    /// For push: the device, when it still exists.
    var device: PushDevice? {
        if case .push(let device, _) = payload { device } else { nil }
    }

    /// Why this delivery is no longer needed, if it is a fallback whose condition came true.
    var fallbackMet: SkipReason? {
        switch condition {
        case .read where readAt != nil: .readBeforeFallback
        case .seen where seenAt != nil || readAt != nil: .seenBeforeFallback
        default: nil
        }
    }
}

/// What a notification says, as every provider needs it. A class: a delivery goes from the
/// claim through its attempt to the recorder, copied at each step, and its content (with the
/// whole category) was most of every copy's retains and releases.
final class DeliveryContent: Sendable {
    let deliveryID: UUID
    let notificationID: UUID
    let category: CategoryDefinition
    let tenant: String
    let title: String
    let body: String
    let url: String?
    let imageURL: String?
    /// The event's `data`, as JSON text.
    let data: String?
    let createdAt: Date
    /// The event's own time to live, else the category's.
    let ttlSeconds: Int?
    /// A background push (the event's `push.content_available`, else the category's): data for
    /// the app, nothing shown.
    let background: Bool
    /// For a digest: the events it gathered.
    let batch: NotificationBatch?
    /// The language of the text, when a template variant gave it (`de`, `ar`).
    let locale: String?

    init(
        deliveryID: UUID, notificationID: UUID, category: CategoryDefinition, tenant: String, title: String,
        body: String, url: String? = nil, imageURL: String? = nil, data: String? = nil, createdAt: Date,
        ttlSeconds: Int? = nil, background: Bool = false, batch: NotificationBatch? = nil, locale: String? = nil
    ) {
        self.deliveryID = deliveryID
        self.notificationID = notificationID
        self.category = category
        self.tenant = tenant
        self.title = title
        self.body = body
        self.url = url
        self.imageURL = imageURL
        self.data = data
        self.createdAt = createdAt
        self.ttlSeconds = ttlSeconds
        self.background = background
        self.batch = batch
        self.locale = locale
    }

    /// What groups pushes on a device (APNs' thread, FCM's tag): the category's thread, and a
    /// digest's summary with its kind, thread or not.
    var pushThread: String? {
        category.push.threadID ?? (batch != nil ? category.id : nil)
    }
}

extension DeliveryContent {
    /// A stored notification's content as a channel of `kind` shows it: a push channel the
    /// shorter text of the category's `content.push` templates, when they gave one; the event's
    /// own time to live and background flag, else the category's.
    convenience init(
        deliveryID: UUID, notificationID: UUID, category: CategoryDefinition, tenant: String, on kind: ChannelKind,
        title: String, body: String, pushTitle: String?, pushBody: String?, url: String?, imageURL: String?,
        data: String?, createdAt: Date, eventTTL: Int?, contentAvailable: Bool?, batch: NotificationBatch?,
        locale: String?
    ) {
        self.init(
            deliveryID: deliveryID, notificationID: notificationID, category: category, tenant: tenant,
            title: kind.isPush ? pushTitle ?? title : title, body: kind.isPush ? pushBody ?? body : body, url: url,
            imageURL: imageURL, data: data, createdAt: createdAt, ttlSeconds: eventTTL ?? category.push.ttlSeconds,
            background: contentAvailable ?? category.push.contentAvailable, batch: batch, locale: locale)
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
        await becameAvailable(delivery.eventID, delivery.userID)
        return .delivered()
    }
}

extension ChannelKind {
    /// What users call the thing a push channel delivers to, in delivery errors.
    var deviceNoun: String { self == .webPush ? "subscription" : "device" }
}

/// A device as a push provider needs it, read at the claim: no storage type.
struct PushDevice: Sendable {
    var id: UUID
    /// Its app; `nil`: the platform's one app from the server settings.
    var app: String? = nil
    /// The APNs or FCM token, or the Web Push endpoint.
    var address: String
    var environment: APNsEnvironment? = nil
    var topic: String? = nil
    /// Web Push: the browser's keys.
    var p256dh: String? = nil
    var authSecret: String? = nil
    var authorization: PushAuthorization
    var settings: PushSettings
    var retiredAt: Date? = nil
    var retiredReason: String? = nil
}

extension DeviceStore.Device {
    var pushDevice: PushDevice {
        PushDevice(
            id: id, app: app, address: address, environment: environment, topic: topic, p256dh: p256dh,
            authSecret: authSecret, authorization: authorization, settings: settings, retiredAt: retiredAt,
            retiredReason: retiredReason)
    }
}
