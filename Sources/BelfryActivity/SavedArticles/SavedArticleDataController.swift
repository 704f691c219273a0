import Foundation

/// Reads saved-article activity from the store by itself: nothing has to hand it fetching closures.
///
/// "This month" is the last 30 days by the device's local calendar: from the start of the local
/// day 29 days before today through now. The start is found by stepping calendar days, not by
/// subtracting 30 × 86 400 seconds, so a daylight-saving change inside the window moves nothing.
public struct SavedArticleDataController: Sendable {
    /// How many local days, today included, the window covers.
    public static let windowDays = 30

    /// The store read.
    public let store: any SavedArticleStoring
    /// The calendar (and its time zone) that decides where local days begin.
    public let calendar: Calendar
    /// The clock.
    public let now: @Sendable () -> Date

    /// - Parameters:
    ///   - store: the saved-articles store.
    ///   - calendar: the device's calendar and time zone; `.autoupdatingCurrent` in apps.
    ///   - now: the clock.
    public init(
        store: any SavedArticleStoring, calendar: Calendar = .autoupdatingCurrent,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.store = store
        self.calendar = calendar
        self.now = now
    }

    /// The window counted at `now`: from the start of the local day `windowDays - 1` days before
    /// the day of `now`, through `now`.
    public static func window(endingAt now: Date, calendar: Calendar) -> DateInterval {
        let today = calendar.startOfDay(for: now)
        // startOfDay again: where a day starts later than midnight (a DST change at midnight),
        // stepping back lands on a time that is not that day's start.
        let first = calendar.date(byAdding: .day, value: -(windowDays - 1), to: today).map(calendar.startOfDay(for:))
        let start = first ?? today.addingTimeInterval(-Double(windowDays - 1) * 86_400)
        return DateInterval(start: start, end: max(start, now))
    }

    /// The window counted now.
    public func window() -> DateInterval {
        Self.window(endingAt: now(), calendar: calendar)
    }

    /// Reads the count, the last save and the recent articles for the window counted now.
    /// - Parameter recentLimit: how many recent articles to return at most.
    /// - Throws: `ActivityError` with `.readFailed`.
    public func activity(recentLimit: Int) async throws(ActivityError) -> SavedArticlesActivity {
        let window = window()
        return try await store.activity(from: window.start, to: window.end, recentLimit: recentLimit)
    }
}
