import Foundation
import Observation

/// Where tapping an activity module takes the reader.
public enum ActivityDestination: String, Sendable, Hashable {
    /// The Saved tab.
    case savedTab
}

/// The activity tab's saved-articles module (seed 002): how many articles the reader saved in
/// the last 30 days, when they last saved one, and up to three article images.
///
/// The module stays visible with nothing saved: the count reads "0" and there is no last-saved
/// text and no images. Tapping it goes to the Saved tab.
@MainActor
@Observable
public final class SavedArticlesModule {
    /// Articles saved in the last 30 days (local days), each counted once across lists.
    public private(set) var count = 0
    /// The latest save, if any article is saved.
    public private(set) var lastSavedDate: Date?
    /// The last-saved date for display: the time when it is today, a localized date otherwise.
    public private(set) var lastSavedText: String?
    /// Images of the most recently saved articles, latest first; articles without one are left out.
    public private(set) var thumbnails: [URL] = []
    /// Whether a load has finished at least once.
    public private(set) var hasLoaded = false
    /// The last problem loading, if the last load failed; the figures shown are kept.
    public private(set) var lastError: ActivityError?

    /// Where tapping the module goes.
    public let tapDestination = ActivityDestination.savedTab

    @ObservationIgnored private let dataController: SavedArticleDataController
    @ObservationIgnored private let thumbnailLoader: SavedArticleThumbnails
    @ObservationIgnored private let locale: Locale
    /// Counts loads so that a slow, older one never overwrites a newer one.
    @ObservationIgnored private var generation = 0

    /// - Parameters:
    ///   - dataController: reads the saved-articles store; its calendar and clock decide the window.
    ///   - summaries: the article-summary service images come from.
    ///   - locale: formats the count and the last-saved date; `.autoupdatingCurrent` in apps.
    ///   - maxThumbnails: images shown at most (3).
    ///   - maxSummaryRequests: summary requests per load at most (3).
    public init(
        dataController: SavedArticleDataController, summaries: any ArticleSummaryFetching,
        locale: Locale = .autoupdatingCurrent, maxThumbnails: Int = 3, maxSummaryRequests: Int = 3
    ) {
        self.dataController = dataController
        self.locale = locale
        self.thumbnailLoader = SavedArticleThumbnails(
            summaries: summaries, limit: max(0, maxThumbnails), maxRequests: max(0, maxSummaryRequests))
    }

    /// The count for display, formatted for the locale; "0" when nothing was saved.
    public var countText: String {
        let formatter = NumberFormatter()
        formatter.locale = locale
        formatter.numberStyle = .decimal
        return formatter.string(from: NSNumber(value: count)) ?? String(count)
    }

    /// What VoiceOver reads for the module, such as "12 articles saved in the last 30 days,
    /// last saved 9:41 AM".
    public var accessibilityLabel: String {
        let noun = count == 1 ? "article" : "articles"
        let saved = "\(countText) \(noun) saved in the last \(SavedArticleDataController.windowDays) days"
        return lastSavedText.map { "\(saved), last saved \($0)" } ?? saved
    }

    /// Reads the store, then fetches images; call it when the activity tab appears.
    public func refresh() async {
        generation += 1
        let current = generation
        let activity: SavedArticlesActivity
        do throws(ActivityError) {
            activity = try await dataController.activity(
                recentLimit: thumbnailLoader.limit + thumbnailLoader.maxRequests)
        } catch {
            if current == generation { lastError = error }
            return
        }
        guard current == generation else { return }
        count = activity.count
        lastSavedDate = activity.lastSavedDate
        lastSavedText = activity.lastSavedDate.map { formattedLastSaved($0, now: activity.window.end) }
        lastError = nil
        hasLoaded = true

        let urls = await thumbnailLoader.load(for: activity.recent)
        guard current == generation else { return }
        thumbnails = urls
    }

    /// The time when `date` is on the same local day as `now`, a medium-style date otherwise.
    func formattedLastSaved(_ date: Date, now: Date) -> String {
        let calendar = dataController.calendar
        let formatter = DateFormatter()
        formatter.locale = locale
        formatter.calendar = calendar
        formatter.timeZone = calendar.timeZone
        if calendar.isDate(date, inSameDayAs: now) {
            formatter.dateStyle = .none
            formatter.timeStyle = .short
        } else {
            formatter.dateStyle = .medium
            formatter.timeStyle = .none
        }
        return formatter.string(from: date)
    }
}
