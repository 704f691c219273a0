import Foundation
import GRDB

/// Where saved articles live: the store the module reads, and that saves and the migration write.
///
/// Writes are synchronous so that `SavedArticlesRecorder` can keep a save and a migration batch
/// from interleaving; the read the module makes is asynchronous so it never blocks the main actor.
public protocol SavedArticleStoring: Sendable {
    /// Writes `articles` in one transaction, one record per article and list. A record already
    /// there keeps the later of the two saved dates, so writing the same save twice changes nothing.
    /// - Throws: `ActivityError` with `.invalidArgument` for an empty article key, `.writeFailed`
    ///   when the database refuses; nothing is written then.
    func upsert(_ articles: [SavedArticle]) throws(ActivityError)

    /// Removes the article from one list (`nil`: the default Saved list); removing what is not
    /// there does nothing.
    /// - Throws: `ActivityError` with `.writeFailed`.
    func remove(articleKey: String, readingList: String?) throws(ActivityError)

    /// Reads the module's figures for saves on or after `start`.
    /// - Parameters:
    ///   - start: the first instant counted.
    ///   - end: the instant of reading, the end of the returned window.
    ///   - recentLimit: how many recent articles to return at most.
    /// - Throws: `ActivityError` with `.readFailed`.
    func activity(
        from start: Date, to end: Date, recentLimit: Int
    ) async throws(ActivityError)
        -> SavedArticlesActivity
}

/// The saved-articles store in SQLite, with its own schema migrations.
///
/// The table `saved_article` has one row per article and list (`reading_list` is "" for the
/// default Saved list) and a non-null `saved_date`.
public final class SavedArticleStore: SavedArticleStoring {
    let dbQueue: DatabaseQueue

    /// Opens (or creates) the store in a file and brings its schema up to date.
    /// - Parameter path: the database file.
    /// - Throws: `ActivityError` with `.storeUnavailable`.
    public convenience init(path: String) throws(ActivityError) {
        self.init(dbQueue: try ActivityDatabase.open(path: path, migrator: Self.migrator, name: "saved-articles store"))
    }

    /// A store in memory, gone when released: for previews and tests.
    /// - Throws: `ActivityError` with `.storeUnavailable`.
    public static func inMemory() throws(ActivityError) -> SavedArticleStore {
        SavedArticleStore(
            dbQueue: try ActivityDatabase.open(path: nil, migrator: migrator, name: "saved-articles store"))
    }

    init(dbQueue: DatabaseQueue) {
        self.dbQueue = dbQueue
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1 saved articles") { db in
            try db.execute(
                sql: """
                    CREATE TABLE saved_article (
                        article_key TEXT NOT NULL CHECK (article_key <> ''),
                        reading_list TEXT NOT NULL DEFAULT '',
                        title TEXT NOT NULL DEFAULT '',
                        saved_date DATETIME NOT NULL,
                        image_url TEXT,
                        PRIMARY KEY (article_key, reading_list)
                    );
                    CREATE INDEX saved_article_on_saved_date ON saved_article(saved_date);
                    """)
        }
        return migrator
    }

    public func upsert(_ articles: [SavedArticle]) throws(ActivityError) {
        if let bad = articles.first(where: { $0.articleKey.isEmpty }) {
            throw ActivityError(
                code: .invalidArgument, message: "articleKey must not be empty (article titled \"\(bad.title)\").")
        }
        guard !articles.isEmpty else { return }
        do {
            try dbQueue.write { db in
                // The later save wins the date, title and image; an earlier one only fills a missing image.
                let statement = try db.makeStatement(
                    sql: """
                        INSERT INTO saved_article (article_key, reading_list, title, saved_date, image_url)
                        VALUES (?, ?, ?, ?, ?)
                        ON CONFLICT (article_key, reading_list) DO UPDATE SET
                            title = CASE WHEN excluded.saved_date >= saved_article.saved_date
                                THEN excluded.title ELSE saved_article.title END,
                            image_url = CASE WHEN excluded.saved_date >= saved_article.saved_date
                                THEN coalesce(excluded.image_url, saved_article.image_url)
                                ELSE coalesce(saved_article.image_url, excluded.image_url) END,
                            saved_date = max(saved_article.saved_date, excluded.saved_date)
                        """)
                for article in articles {
                    try statement.execute(arguments: [
                        article.articleKey, article.readingList ?? "", article.title, article.savedDate,
                        article.imageURL?.absoluteString,
                    ])
                }
            }
        } catch {
            throw .wrapping(error, code: .writeFailed, "Could not write \(articles.count) saved article(s).")
        }
    }

    public func remove(articleKey: String, readingList: String?) throws(ActivityError) {
        do {
            try dbQueue.write { db in
                try db.execute(
                    sql: "DELETE FROM saved_article WHERE article_key = ? AND reading_list = ?",
                    arguments: [articleKey, readingList ?? ""])
            }
        } catch {
            throw .wrapping(error, code: .writeFailed, "Could not remove saved article \(articleKey).")
        }
    }

    public func activity(
        from start: Date, to end: Date, recentLimit: Int
    ) async throws(ActivityError)
        -> SavedArticlesActivity
    {
        let limit = max(0, recentLimit)
        do {
            return try await dbQueue.read { db in
                // One row per article: its latest save (SQLite takes the other bare columns from
                // the row holding max()), and an image from any of its lists when that row has none.
                let latest = """
                    SELECT article_key, reading_list, title, max(saved_date) AS latest,
                        coalesce(image_url, (
                            SELECT other.image_url FROM saved_article AS other
                            WHERE other.article_key = saved_article.article_key AND other.image_url IS NOT NULL
                            ORDER BY other.saved_date DESC LIMIT 1)) AS image
                    FROM saved_article GROUP BY article_key HAVING latest >= ?
                    """
                let count =
                    try Int.fetchOne(db, sql: "SELECT count(*) FROM (\(latest))", arguments: [start]) ?? 0
                let lastSavedDate = try Date.fetchOne(db, sql: "SELECT max(saved_date) FROM saved_article")
                let recent = try Row.fetchAll(
                    db, sql: "\(latest) ORDER BY latest DESC, article_key LIMIT ?", arguments: [start, limit]
                ).map(Self.article(from:))
                return SavedArticlesActivity(
                    window: DateInterval(start: start, end: max(start, end)), count: count,
                    lastSavedDate: lastSavedDate, recent: recent)
            }
        } catch {
            throw .wrapping(error, code: .readFailed, "Could not read saved articles.")
        }
    }

    /// Every record, latest save first: one per article and list.
    /// - Throws: `ActivityError` with `.readFailed`.
    public func allArticles() throws(ActivityError) -> [SavedArticle] {
        do {
            return try dbQueue.read { db in
                try Row.fetchAll(
                    db,
                    sql: """
                        SELECT article_key, reading_list, title, saved_date AS latest, image_url AS image
                        FROM saved_article ORDER BY saved_date DESC, article_key, reading_list
                        """
                ).map(Self.article(from:))
            }
        } catch {
            throw .wrapping(error, code: .readFailed, "Could not read saved articles.")
        }
    }

    private static func article(from row: Row) -> SavedArticle {
        let list: String = row["reading_list"]
        let image: String? = row["image"]
        return SavedArticle(
            articleKey: row["article_key"], title: row["title"], savedDate: row["latest"],
            imageURL: image.flatMap(URL.init(string:)), readingList: list.isEmpty ? nil : list)
    }
}
