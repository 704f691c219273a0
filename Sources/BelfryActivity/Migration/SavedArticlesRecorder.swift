import Foundation

/// The one place the app saves and unsaves articles while both stores exist.
///
/// A save goes to the legacy store (with its saved date), then to the new store, then marks the
/// legacy row migrated; an unsave removes from both. Migration batches run on this actor too, and
/// the stores' writes are synchronous, so a save never lands in the middle of a batch: a save
/// made during the migration ends up in both stores exactly once.
///
/// Every failure leaves a state that repeating the call, or the next migration run, repairs:
/// a legacy row is marked migrated only after the new store holds it.
public actor SavedArticlesRecorder {
    /// The old app's store.
    public nonisolated let legacy: any LegacySavedArticleStoring
    /// The store the module reads.
    public nonisolated let store: any SavedArticleStoring
    private let now: @Sendable () -> Date

    /// - Parameters:
    ///   - legacy: the old app's store.
    ///   - store: the new saved-articles store.
    ///   - now: the clock that dates saves.
    public init(
        legacy: any LegacySavedArticleStoring, store: any SavedArticleStoring,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.legacy = legacy
        self.store = store
        self.now = now
    }

    /// Saves an article to the default Saved list or a reading list, dated now, in both stores.
    ///
    /// Saving an article already in that list moves its saved date to now.
    /// - Parameters:
    ///   - articleKey: the article; must not be empty.
    ///   - title: the title to show.
    ///   - readingList: the reading list; `nil` for the default Saved list.
    ///   - imageURL: an image, if known.
    /// - Returns: the saved article.
    /// - Throws: `ActivityError`: `.invalidArgument` for an empty key; `.legacyWriteFailed` when
    ///   the legacy store refuses (nothing saved); `.writeFailed` when the new store refuses (the
    ///   legacy save stands, unmigrated, and the next migration run copies it).
    @discardableResult
    public func save(
        articleKey: String, title: String, readingList: String? = nil, imageURL: URL? = nil
    ) throws(ActivityError) -> SavedArticle {
        guard !articleKey.isEmpty else {
            throw ActivityError(code: .invalidArgument, message: "articleKey must not be empty.")
        }
        let article = SavedArticle(
            articleKey: articleKey, title: title, savedDate: now(), imageURL: imageURL, readingList: readingList)
        let id = try legacy.save(article)
        try store.upsert([article])
        try legacy.mark(migrated: [id], skipped: [])
        return article
    }

    /// Removes an article from one list in both stores; removing what is not saved does nothing.
    /// - Parameters:
    ///   - articleKey: the article.
    ///   - readingList: the reading list; `nil` for the default Saved list.
    /// - Throws: `ActivityError` with `.legacyWriteFailed` or `.writeFailed`; calling again finishes the job.
    public func unsave(articleKey: String, readingList: String? = nil) throws(ActivityError) {
        try legacy.remove(articleKey: articleKey, readingList: readingList)
        try store.remove(articleKey: articleKey, readingList: readingList)
    }

    /// Copies up to `limit` pending legacy rows: the parsable ones to the new store in one
    /// transaction, then marks them migrated and the others skipped, in one legacy transaction.
    func migrateBatch(limit: Int) -> MigrationBatch {
        let rows: [LegacySavedArticleRow]
        do throws(ActivityError) {
            rows = try legacy.pendingRows(limit: limit)
        } catch {
            return MigrationBatch(fetched: 0, migrated: [], skipped: [], failure: error)
        }
        var articles: [SavedArticle] = []
        var migrated: [Int64] = []
        var skipped: [MigrationReport.SkippedRow] = []
        for row in rows {
            switch Self.article(from: row) {
            case .success(let article):
                articles.append(article)
                migrated.append(row.id)
            case .failure(let reason):
                skipped.append(.init(legacyID: row.id, articleKey: row.articleKey, reason: reason))
            }
        }
        do throws(ActivityError) {
            try store.upsert(articles)
            try legacy.mark(migrated: migrated, skipped: skipped.map { LegacySkip(id: $0.legacyID, reason: $0.reason) })
        } catch {
            return MigrationBatch(fetched: rows.count, migrated: [], skipped: [], failure: error)
        }
        return MigrationBatch(fetched: rows.count, migrated: migrated, skipped: skipped, failure: nil)
    }

    static func article(from row: LegacySavedArticleRow) -> Result<SavedArticle, SkipReason> {
        guard !row.articleKey.isEmpty else { return .failure(.missingArticleKey) }
        return LegacySavedDate.parse(row.rawSavedDate).map { date in
            // An image the old app stored badly is dropped, not a reason to skip the save.
            SavedArticle(
                articleKey: row.articleKey, title: row.title ?? "", savedDate: date,
                imageURL: row.rawImageURL.flatMap(URL.init(string:)).flatMap { $0.scheme == nil ? nil : $0 },
                readingList: row.readingList)
        }
    }
}

/// What one migration batch did.
struct MigrationBatch: Sendable {
    var fetched: Int
    var migrated: [Int64]
    var skipped: [MigrationReport.SkippedRow]
    var failure: ActivityError?
}
