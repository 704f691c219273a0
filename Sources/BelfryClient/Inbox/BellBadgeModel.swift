import BelfryCore
import Foundation
import Observation

/// The bell and its badge (seed 001): one source of truth for the unread count, wherever
/// the bell is shown.
///
/// With the explore feed on, the bell sits in the feed's top bar; with it off, in the top
/// bar of the screen the app opens on. Either way it shows a badge while anything is unread.
@MainActor
@Observable
public final class BellBadgeModel {
    /// Where the bell is shown.
    public enum Placement: String, Sendable {
        /// The explore feed's top bar.
        case exploreFeed
        /// The top bar of the first screen, when the explore feed is turned off.
        case topBar
    }

    /// Whether the app's explore feed is on (a user setting).
    public var isExploreFeedEnabled: Bool
    /// Unread notifications (archived left out).
    public private(set) var unreadCount = 0
    /// The last problem refreshing the count, if the last refresh failed.
    public private(set) var lastError: BelfryClientError?

    @ObservationIgnored private let inbox: Inbox

    /// - Parameters:
    ///   - inbox: where the count comes from (`BelfryClient.inbox`).
    ///   - isExploreFeedEnabled: the user's explore feed setting.
    public init(inbox: Inbox, isExploreFeedEnabled: Bool = true) {
        self.inbox = inbox
        self.isExploreFeedEnabled = isExploreFeedEnabled
    }

    /// Where the bell is shown now.
    public var placement: Placement { isExploreFeedEnabled ? .exploreFeed : .topBar }
    /// Whether the bell shows a badge.
    public var showsBadge: Bool { unreadCount > 0 }
    /// The badge's text: the count, capped at "99+"; `nil` when there is no badge.
    public var badgeText: String? {
        showsBadge ? (unreadCount > 99 ? "99+" : String(unreadCount)) : nil
    }
    /// What VoiceOver reads for the bell.
    public var accessibilityLabel: String {
        switch unreadCount {
        case 0: "Notifications"
        case 1: "Notifications, 1 unread"
        default: "Notifications, \(unreadCount) unread"
        }
    }

    /// Reads the count from the server.
    public func refresh() async {
        do throws(BelfryClientError) {
            unreadCount = try await inbox.counts().unread
            lastError = nil
        } catch {
            lastError = error
        }
    }

    /// Takes the count from a live-stream update.
    public func apply(_ update: InboxUpdate) {
        if case .counts(let counts) = update { unreadCount = counts.unread }
    }

    /// Keeps the count current from `updates` until the task is cancelled.
    public func follow(_ updates: AsyncStream<InboxUpdate>) async {
        for await update in updates { apply(update) }
    }
}
