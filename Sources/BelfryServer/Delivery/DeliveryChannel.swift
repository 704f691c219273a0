import BelfryCore
import Foundation

/// One delivery to attempt, as a channel sees it.
struct DeliveryJob: Sendable {
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
    var notificationID: UUID
    var channel: ChannelDefinition
    /// This attempt's number, from 1.
    var attempt: Int
    var userID: UUID
    /// For push channels: the device to deliver to.
    var deviceID: UUID?
    var externalUserID: String
    var category: String
    var tenant: String
    var title: String
    var body: String
    var url: String?
    /// The event's `data`, as JSON text.
    var data: String?
    var createdAt: Date
}

/// What a provider's answer means for a delivery.
enum DeliveryOutcome: Sendable, Equatable {
    case sent(status: Int?)
    /// Try again later: after `retryAfter` seconds when the provider said so, else after backoff.
    case retry(status: Int?, retryAfter: TimeInterval?, error: String)
    /// Trying again cannot help.
    case permanentFailure(status: Int?, error: String)
}

/// A way to deliver: webhook now; APNs, Web Push and email implement the same interface.
protocol DeliveryChannel: Sendable {
    /// Attempts per delivery before it is dead-lettered.
    var maxAttempts: Int { get }
    func deliver(_ job: DeliveryJob) async -> DeliveryOutcome
}

/// Backoff between attempts: exponential with full jitter, so retries from many deliveries
/// spread out instead of arriving together.
struct Backoff: Sendable {
    var base: TimeInterval = 5
    var cap: TimeInterval = 3600
    /// The longest wait a provider's Retry-After is allowed to ask for.
    var maxRetryAfter: TimeInterval = 24 * 3600

    /// The wait before the attempt after `attempt`, with `jitter` uniform in 0..<1.
    func delay(afterAttempt attempt: Int, retryAfter: TimeInterval?, jitter: Double) -> TimeInterval {
        if let retryAfter { return min(max(retryAfter, 0), maxRetryAfter) }
        let ceiling = min(cap, base * pow(2, Double(max(attempt - 1, 0))))
        return ceiling * jitter
    }
}

/// The in-app inbox. Fan-out writes the notification itself; a notification due later (a
/// calendar schedule) becomes available at its time, and this marks its delivery done then.
struct InboxChannel: DeliveryChannel {
    var maxAttempts: Int { 1 }

    func deliver(_ job: DeliveryJob) async -> DeliveryOutcome {
        .sent(status: nil)
    }
}
