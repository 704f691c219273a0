import Foundation

/// What the module reads while the migration runs (seed 002: correct figures throughout): the
/// new store, and the legacy rows not yet copied to it, each article counted once with its
/// latest save. Once every legacy row is migrated (or skipped), the legacy read finds nothing
/// (an indexed query of the pending rows) and the figures are the new store's alone.
///
/// Writes go to the new store only; the app saves through ``SavedArticlesRecorder``.
public struct SavedArticlesDuringMigration: SavedArticleStoring {
    /// The new store.
    public let store: any SavedArticleStoring
    /// The old app's store, whose unmigrated rows are read too.
    public let legacy: any LegacySavedArticleStoring

    /// - Parameter recorder: the app's recorder, whose two stores are read.
    public init(recorder: SavedArticlesRecorder) {
        store = recorder.store
        legacy = recorder.legacy
    }

    public func upsert(_ articles: [SavedArticle]) throws(ActivityError) {
        try store.upsert(articles)
    }

    public func remove(articleKey: String, readingList: String?) throws(ActivityError) {
        try store.remove(articleKey: articleKey, readingList: readingList)
    }

    public func activity(
        from start: Date, to end: Date, recentLimit: Int
    ) async throws(ActivityError)
        -> SavedArticlesActivity
    {
        // The legacy rows first: a batch that commits between the two reads then has its rows in
        // both (counted once, by key) rather than in neither.
        let pending = try legacy.pendingRows(limit: Int.max).compactMap {
            try? SavedArticlesRecorder.article(from: $0).get()
        }
        let current = try await store.activity(from: start, to: end, recentLimit: Int.max)
        guard !pending.isEmpty else {
            var activity = current
            activity.recent = Array(current.recent.prefix(max(0, recentLimit)))
            return activity
        }
        var latest: [String: SavedArticle] = [:]
        for article in current.recent + pending.filter({ $0.savedDate >= start }) {
            if let known = latest[article.articleKey], known.savedDate >= article.savedDate {
                // An image from either copy, as the store takes one from any of an article's lists.
                if known.imageURL == nil, let image = article.imageURL { latest[article.articleKey]?.imageURL = image }
                continue
            }
            var newer = article
            newer.imageURL = newer.imageURL ?? latest[article.articleKey]?.imageURL
            latest[article.articleKey] = newer
        }
        let recent = latest.values.sorted { ($0.savedDate, $1.articleKey) > ($1.savedDate, $0.articleKey) }
        let lastSaved = ([current.lastSavedDate].compactMap { $0 } + pending.map(\.savedDate)).max()
        return SavedArticlesActivity(
            window: current.window, count: latest.count, lastSavedDate: lastSaved,
            recent: Array(recent.prefix(max(0, recentLimit))))
    }
}
