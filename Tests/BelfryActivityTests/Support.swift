import Foundation
import GRDB

@testable import BelfryActivity

/// A fresh directory for database files, removed when `body` returns or throws.
func withTemporaryDirectory<T>(_ body: (URL) async throws -> T) async throws -> T {
    let directory = FileManager.default.temporaryDirectory
        .appendingPathComponent("belfry-activity-\(UUID().uuidString)", isDirectory: true)
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    return try await body(directory)
}

extension Calendar {
    /// A Gregorian calendar in the named time zone.
    static func gregorian(_ timeZone: String) -> Calendar {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: timeZone)!
        return calendar
    }

    /// The instant of a local wall-clock time in this calendar's time zone.
    func date(_ year: Int, _ month: Int, _ day: Int, _ hour: Int = 0, _ minute: Int = 0, _ second: Int = 0) -> Date {
        date(from: DateComponents(year: year, month: month, day: day, hour: hour, minute: minute, second: second))!
    }
}

/// A clock tests set by hand.
final class TestClock: @unchecked Sendable {
    // @unchecked: `current` is only touched under `lock`.
    private let lock = NSLock()
    private var current: Date

    init(_ date: Date) { current = date }

    var now: Date {
        get { lock.withLock { current } }
        set { lock.withLock { current = newValue } }
    }

    /// The clock as the types under test take it.
    var function: @Sendable () -> Date { { self.now } }
}

/// An article-summary service answering from a table, recording every request.
final class FakeSummaries: ArticleSummaryFetching, @unchecked Sendable {
    // @unchecked: `requested` is only touched under `lock`.
    struct Unavailable: Error {}

    private let lock = NSLock()
    private var requestedKeys: [String] = []
    /// Thumbnails by article key; a key not listed has a summary without an image.
    let thumbnails: [String: URL]
    /// Keys whose summary request fails.
    let failing: Set<String>

    init(thumbnails: [String: URL] = [:], failing: Set<String> = []) {
        self.thumbnails = thumbnails
        self.failing = failing
    }

    var requested: [String] { lock.withLock { requestedKeys } }

    func summary(forArticleKey articleKey: String) async throws -> ArticleSummary {
        lock.withLock { requestedKeys.append(articleKey) }
        if failing.contains(articleKey) { throw Unavailable() }
        return ArticleSummary(articleKey: articleKey, thumbnailURL: thumbnails[articleKey])
    }
}

/// A new store that fails the writes a test chooses, and otherwise passes them to a real one.
final class FlakyStore: SavedArticleStoring, @unchecked Sendable {
    // @unchecked: the counters and switches are only touched under `lock`.
    private let lock = NSLock()
    let base: any SavedArticleStoring
    private var upserts = 0
    private var failingUpserts: Set<Int> = []
    private var failsReads = false
    /// Runs before each upsert reaches the real store.
    var beforeUpsert: (@Sendable () -> Void)?

    static let failure = ActivityError(code: .writeFailed, message: "Injected write failure.")

    init(_ base: any SavedArticleStoring) { self.base = base }

    /// Fails the upserts with these numbers, counting from 1.
    func failUpserts(_ numbers: Set<Int>) { lock.withLock { failingUpserts = numbers } }
    func failReads(_ fails: Bool) { lock.withLock { failsReads = fails } }
    var upsertCount: Int { lock.withLock { upserts } }

    func upsert(_ articles: [SavedArticle]) throws(ActivityError) {
        let fails = lock.withLock {
            upserts += 1
            return failingUpserts.contains(upserts)
        }
        if fails { throw Self.failure }
        try base.upsert(articles)
    }

    func remove(articleKey: String, readingList: String?) throws(ActivityError) {
        try base.remove(articleKey: articleKey, readingList: readingList)
    }

    func activity(
        from start: Date, to end: Date, recentLimit: Int
    ) async throws(ActivityError)
        -> SavedArticlesActivity
    {
        if lock.withLock({ failsReads }) {
            throw ActivityError(code: .readFailed, message: "Injected read failure.")
        }
        return try await base.activity(from: start, to: end, recentLimit: recentLimit)
    }
}

/// A legacy store whose marks fail when a test says so, as if the app died before marking.
final class FlakyLegacy: LegacySavedArticleStoring, @unchecked Sendable {
    // @unchecked: the switch is only touched under `lock`.
    private let lock = NSLock()
    let base: any LegacySavedArticleStoring
    private var failsMarks = false

    init(_ base: any LegacySavedArticleStoring) { self.base = base }

    func failMarks(_ fails: Bool) { lock.withLock { failsMarks = fails } }

    func pendingRows(limit: Int) throws(ActivityError) -> [LegacySavedArticleRow] {
        try base.pendingRows(limit: limit)
    }

    func mark(migrated: [Int64], skipped: [LegacySkip]) throws(ActivityError) {
        if lock.withLock({ failsMarks }) {
            throw ActivityError(code: .legacyWriteFailed, message: "Injected mark failure.")
        }
        try base.mark(migrated: migrated, skipped: skipped)
    }

    func save(_ article: SavedArticle) throws(ActivityError) -> Int64 { try base.save(article) }

    func remove(articleKey: String, readingList: String?) throws(ActivityError) {
        try base.remove(articleKey: articleKey, readingList: readingList)
    }
}

extension LegacySavedArticleStore {
    /// Writes a row the way the old app did, its saved date as any SQLite value.
    @discardableResult
    func insertOldAppRow(
        key: String, list: String = "", title: String? = "Title", savedDate: (any DatabaseValueConvertible)?,
        imageURL: String? = nil
    ) throws -> Int64 {
        try dbQueue.write { db in
            try db.execute(
                sql: """
                    INSERT INTO saved_articles (article_key, reading_list, display_title, saved_date, image_url)
                    VALUES (?, ?, ?, ?, ?)
                    """, arguments: [key, list, title, savedDate?.databaseValue ?? .null, imageURL])
            return db.lastInsertedRowID
        }
    }

    /// Each row's flags, by id.
    func flags() throws -> [Int64: (migrated: Bool, skipReason: String?)] {
        try dbQueue.read { db in
            var flags: [Int64: (migrated: Bool, skipReason: String?)] = [:]
            for row in try Row.fetchAll(
                db, sql: "SELECT id, is_saved_migrated, migration_skip_reason FROM saved_articles")
            {
                flags[row["id"]] = (row["is_saved_migrated"], row["migration_skip_reason"])
            }
            return flags
        }
    }

    /// The raw saved date of a row.
    func rawSavedDate(key: String, list: String = "") throws -> String? {
        try dbQueue.read { db in
            try String.fetchOne(
                db,
                sql: "SELECT CAST(saved_date AS TEXT) FROM saved_articles WHERE article_key = ? AND reading_list = ?",
                arguments: [key, list])
        }
    }

    /// Every row's key and list.
    func keys() throws -> Set<String> {
        try dbQueue.read { db in
            Set(try String.fetchAll(db, sql: "SELECT article_key || '/' || reading_list FROM saved_articles"))
        }
    }
}

extension SavedArticleStore {
    /// Every record's key and list.
    func keys() throws -> Set<String> {
        Set(try allArticles().map { "\($0.articleKey)/\($0.readingList ?? "")" })
    }
}
