import Foundation

/// Where a delivery stands.
enum DeliveryStatus: String, Sendable, CaseIterable {
    /// `skipped`: a fallback not needed after all; the event's status counts it with the skips.
    case queued, running, sent, failed, dead, skipped
}
