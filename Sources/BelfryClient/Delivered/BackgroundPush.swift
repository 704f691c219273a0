import BelfryCore
import Foundation

/// What a background push's refresh came to: the answer an app gives the system's fetch
/// completion handler (Apple's `UIBackgroundFetchResult`).
public enum BackgroundFetchResult: String, Sendable, Equatable {
    /// The counts or preferences changed.
    case newData
    /// Nothing changed, or the push was not Belfry's.
    case noData
    /// The server could not be reached.
    case failed
}

extension BelfryClient {
    /// Whether `userInfo` is one of Belfry's background pushes: APNs `content-available` with
    /// Belfry's dictionary, or an FCM data message marked `background`.
    public static func isBackgroundPush(userInfo: [AnyHashable: Any]) -> Bool {
        if let aps = userInfo["aps"] as? [String: Any], userInfo["belfry"] is [String: Any] {
            return (aps["content-available"] as? Int) == 1
        }
        return userInfo["background"] as? String == "1" && userInfo["notification_id"] is String
    }

    /// Handles a background push (seed 003: a push that lets the app "download information and
    /// update its interface"): reads the inbox counts, sets the badge, and reads the
    /// preferences of the tenants read before, once. Pushes that arrive while a refresh runs
    /// share it rather than start their own.
    ///
    /// Call it from the app delegate's `didReceiveRemoteNotification(_:fetchCompletionHandler:)`
    /// (or Android's `onMessageReceived`) and hand the result to the completion handler.
    /// - Parameters:
    ///   - userInfo: the push's payload; one that is not Belfry's background push does nothing.
    ///   - badge: where the badge is set (`SystemNotificationScheduler`); `nil` leaves it.
    public func handleBackgroundPush(
        userInfo: [AnyHashable: Any], badge: (any NotificationScheduling)? = nil
    ) async -> BackgroundFetchResult {
        guard Self.isBackgroundPush(userInfo: userInfo) else { return .noData }
        if let running = backgroundRefresh { return await running.value }
        let refresh = Task { await self.refreshInBackground(badge: badge) }
        backgroundRefresh = refresh
        let result = await refresh.value
        backgroundRefresh = nil
        return result
    }

    private func refreshInBackground(badge: (any NotificationScheduling)?) async -> BackgroundFetchResult {
        do throws(BelfryClientError) {
            let counts = try await inbox.counts()
            await badge?.setBadge(counts.unread)
            let countsChanged = refreshedCounts != counts
            refreshedCounts = counts
            let preferencesChanged = try await preferences.refreshRead()
            return countsChanged || preferencesChanged ? .newData : .noData
        } catch {
            return .failed
        }
    }
}
