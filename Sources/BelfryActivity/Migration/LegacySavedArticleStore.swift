import Foundation
import GRDB

/// A saved article as the legacy store holds it, its saved date as written, not yet parsed.
public struct LegacySavedArticleRow: Sendable, Hashable {
    /// The row's id in the legacy store.
    public var id: Int64
    /// The article, as `SavedArticle.articleKey`.
    public var articleKey: String
    /// The reading list; `nil` for the default Saved list.
    public var readingList: String?
    /// The title, when the legacy store has one.
    public var title: String?
    /// The saved date as stored: ISO 8601 text or Unix seconds; anything else is unparsable.
    public var rawSavedDate: String?
    /// The image as stored.
    public var rawImageURL: String?

    /// - Parameters: the row's columns, as stored.
    public init(
        id: Int64, articleKey: String, readingList: String?, title: String?, rawSavedDate: String?,
        rawImageURL: String?
    ) {
        self.id = id
        self.articleKey = articleKey
        self.readingList = readingList
        self.title = title
        self.rawSavedDate = rawSavedDate
        self.rawImageURL = rawImageURL
    }
}

/// A legacy row the migration gave up on, and why.
public struct LegacySkip: Sendable, Hashable {
    /// The row's id in the legacy store.
    public var id: Int64
    /// Why it cannot be copied.
    public var reason: SkipReason

    /// - Parameters:
    ///   - id: the legacy row.
    ///   - reason: why it cannot be copied.
    public init(id: Int64, reason: SkipReason) {
        self.id = id
        self.reason = reason
    }
}

/// Why a legacy row cannot be copied to the new store.
public struct SkipReason: Error, RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The reason as the legacy store records it.
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }

    /// The row has no saved date.
    public static let missingSavedDate = SkipReason(rawValue: "missing_saved_date")
    /// The saved date is neither ISO 8601 text nor Unix seconds.
    public static let unparsableSavedDate = SkipReason(rawValue: "unparsable_saved_date")
    /// The row has no article key.
    public static let missingArticleKey = SkipReason(rawValue: "missing_article_key")
}

/// The legacy side of the saved-articles migration: the old app's store of saves.
public protocol LegacySavedArticleStoring: Sendable {
    /// Rows neither migrated nor skipped, oldest id first.
    /// - Throws: `ActivityError` with `.legacyReadFailed`.
    func pendingRows(limit: Int) throws(ActivityError) -> [LegacySavedArticleRow]

    /// In one transaction, sets `is_saved_migrated` on `migrated` and records the reason on each
    /// of `skipped`. Call it only after the new store holds the migrated rows.
    /// - Throws: `ActivityError` with `.legacyWriteFailed`; nothing is marked then.
    func mark(migrated: [Int64], skipped: [LegacySkip]) throws(ActivityError)

    /// Saves an article the legacy way, with its saved date, as not yet migrated, and clears any
    /// earlier skip. Saving it again in the same list updates the row.
    /// - Returns: the row's id.
    /// - Throws: `ActivityError` with `.legacyWriteFailed`.
    func save(_ article: SavedArticle) throws(ActivityError) -> Int64

    /// Removes the article from one list (`nil`: the default Saved list).
    /// - Throws: `ActivityError` with `.legacyWriteFailed`.
    func remove(articleKey: String, readingList: String?) throws(ActivityError)
}

/// The old app's saved-articles table in SQLite, a database of its own.
///
/// `saved_date` has no declared type, as in the old schema, so it holds whatever was written:
/// ISO 8601 text, Unix seconds, or junk. The schema update adds `is_saved_migrated` and
/// `migration_skip_reason`.
///
/// A row the migration cannot parse gets a `migration_skip_reason` and keeps
/// `is_saved_migrated = 0`: the flag keeps meaning "the new store has this save", the row is
/// not fetched again, and clearing the reason (or saving the article again) retries it.
public final class LegacySavedArticleStore: LegacySavedArticleStoring {
    let dbQueue: DatabaseQueue

    /// Opens (or creates) the legacy store in a file and adds the migration columns if missing.
    /// - Parameter path: the database file.
    /// - Throws: `ActivityError` with `.storeUnavailable`.
    public convenience init(path: String) throws(ActivityError) {
        self.init(dbQueue: try ActivityDatabase.open(path: path, migrator: Self.migrator, name: "legacy store"))
    }

    /// A legacy store in memory, for tests.
    /// - Throws: `ActivityError` with `.storeUnavailable`.
    public static func inMemory() throws(ActivityError) -> LegacySavedArticleStore {
        LegacySavedArticleStore(dbQueue: try ActivityDatabase.open(path: nil, migrator: migrator, name: "legacy store"))
    }

    init(dbQueue: DatabaseQueue) {
        self.dbQueue = dbQueue
    }

    /// The old app's table as it may already exist; `migrator` then adds the migration columns.
    static let legacyTableSQL = """
        CREATE TABLE IF NOT EXISTS saved_articles (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            article_key TEXT NOT NULL,
            reading_list TEXT NOT NULL DEFAULT '',
            display_title TEXT,
            saved_date,
            image_url TEXT,
            UNIQUE (article_key, reading_list)
        )
        """

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1 legacy saved articles") { db in
            try db.execute(sql: legacyTableSQL)
        }
        migrator.registerMigration("v2 saved-date migration flags") { db in
            try db.execute(
                sql: """
                    ALTER TABLE saved_articles ADD COLUMN is_saved_migrated INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE saved_articles ADD COLUMN migration_skip_reason TEXT;
                    CREATE INDEX saved_articles_pending ON saved_articles(id)
                        WHERE is_saved_migrated = 0 AND migration_skip_reason IS NULL;
                    """)
        }
        return migrator
    }

    public func pendingRows(limit: Int) throws(ActivityError) -> [LegacySavedArticleRow] {
        do {
            return try dbQueue.read { db in
                try Row.fetchAll(
                    db,
                    sql: """
                        SELECT id, article_key, reading_list, display_title,
                            CAST(saved_date AS TEXT) AS saved_date, image_url
                        FROM saved_articles
                        WHERE is_saved_migrated = 0 AND migration_skip_reason IS NULL
                        ORDER BY id LIMIT ?
                        """, arguments: [max(0, limit)]
                ).map { row in
                    let list: String? = row["reading_list"]
                    return LegacySavedArticleRow(
                        id: row["id"], articleKey: row["article_key"] ?? "",
                        readingList: list?.isEmpty == false ? list : nil, title: row["display_title"],
                        rawSavedDate: row["saved_date"], rawImageURL: row["image_url"])
                }
            }
        } catch {
            throw .wrapping(error, code: .legacyReadFailed, "Could not read legacy saved articles.")
        }
    }

    public func mark(migrated: [Int64], skipped: [LegacySkip]) throws(ActivityError) {
        guard !migrated.isEmpty || !skipped.isEmpty else { return }
        do {
            try dbQueue.write { db in
                for id in migrated {
                    try db.execute(sql: "UPDATE saved_articles SET is_saved_migrated = 1 WHERE id = ?", arguments: [id])
                }
                for skip in skipped {
                    try db.execute(
                        sql: "UPDATE saved_articles SET migration_skip_reason = ? WHERE id = ?",
                        arguments: [skip.reason.rawValue, skip.id])
                }
            }
        } catch {
            throw .wrapping(
                error, code: .legacyWriteFailed,
                "Could not mark \(migrated.count) legacy row(s) migrated and \(skipped.count) skipped.")
        }
    }

    public func save(_ article: SavedArticle) throws(ActivityError) -> Int64 {
        do {
            return try dbQueue.write { db in
                try db.execute(
                    sql: """
                        INSERT INTO saved_articles (article_key, reading_list, display_title, saved_date, image_url)
                        VALUES (?, ?, ?, ?, ?)
                        ON CONFLICT (article_key, reading_list) DO UPDATE SET
                            display_title = excluded.display_title, saved_date = excluded.saved_date,
                            image_url = coalesce(excluded.image_url, saved_articles.image_url),
                            is_saved_migrated = 0, migration_skip_reason = NULL
                        """,
                    arguments: [
                        article.articleKey, article.readingList ?? "", article.title,
                        LegacySavedDate.text(for: article.savedDate), article.imageURL?.absoluteString,
                    ])
                return try Int64.fetchOne(
                    db, sql: "SELECT id FROM saved_articles WHERE article_key = ? AND reading_list = ?",
                    arguments: [article.articleKey, article.readingList ?? ""]) ?? db.lastInsertedRowID
            }
        } catch {
            throw .wrapping(
                error, code: .legacyWriteFailed, "Could not save \(article.articleKey) in the legacy store.")
        }
    }

    public func remove(articleKey: String, readingList: String?) throws(ActivityError) {
        do {
            try dbQueue.write { db in
                try db.execute(
                    sql: "DELETE FROM saved_articles WHERE article_key = ? AND reading_list = ?",
                    arguments: [articleKey, readingList ?? ""])
            }
        } catch {
            throw .wrapping(error, code: .legacyWriteFailed, "Could not remove \(articleKey) from the legacy store.")
        }
    }

    /// How many rows are still to migrate (neither migrated nor skipped).
    /// - Throws: `ActivityError` with `.legacyReadFailed`.
    public func pendingCount() throws(ActivityError) -> Int {
        do {
            return try dbQueue.read { db in
                try Int.fetchOne(
                    db,
                    sql:
                        "SELECT count(*) FROM saved_articles WHERE is_saved_migrated = 0 AND migration_skip_reason IS NULL"
                ) ?? 0
            }
        } catch {
            throw .wrapping(error, code: .legacyReadFailed, "Could not count legacy saved articles.")
        }
    }
}
