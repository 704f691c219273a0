import Foundation
import GRDB
import Testing

@testable import BelfryActivity

@Suite("BelfryActivity saved-articles migration")
struct SavedArticlesMigrationTests {
    static let base = Date(timeIntervalSince1970: 1_772_000_000)

    /// Both stores as files in a fresh directory, reopened from disk by each call.
    struct Files {
        let directory: URL
        var legacyPath: String { directory.appendingPathComponent("legacy.sqlite").path }
        var storePath: String { directory.appendingPathComponent("saved.sqlite").path }
        func legacy() throws -> LegacySavedArticleStore { try LegacySavedArticleStore(path: legacyPath) }
        func store() throws -> SavedArticleStore { try SavedArticleStore(path: storePath) }
    }

    func withFiles<T>(_ body: (Files) async throws -> T) async throws -> T {
        try await withTemporaryDirectory { try await body(Files(directory: $0)) }
    }

    /// Writes `count` well-formed old-app rows, one an hour apart; returns their dates by key.
    @discardableResult
    func seed(_ legacy: LegacySavedArticleStore, count: Int) throws -> [String: Date] {
        var dates: [String: Date] = [:]
        for index in 0..<count {
            let date = Self.base.addingTimeInterval(Double(index) * 3600)
            try legacy.insertOldAppRow(key: "enwiki:\(index)", savedDate: LegacySavedDate.text(for: date))
            dates["enwiki:\(index)"] = date
        }
        return dates
    }

    func dates(_ store: SavedArticleStore) throws -> [String: Date] {
        Dictionary(try store.allArticles().map { ($0.articleKey, $0.savedDate) }, uniquingKeysWith: max)
    }

    @Test("seed 002: runIfNeeded moves a batch at a time within its budget, then does nothing once done")
    func runIfNeeded() async throws {
        try await withFiles { files in
            let legacy = try files.legacy()
            let expected = try seed(legacy, count: 25)
            let store = try files.store()
            let migration = SavedArticlesMigration(
                recorder: SavedArticlesRecorder(legacy: legacy, store: store), batchSize: 10)
            // No budget: one batch, at launch.
            let first = await migration.runIfNeeded(budget: .zero)
            #expect(first.batchCount == 1 && first.migratedCount == 10 && !first.isComplete)
            #expect(try legacy.pendingCount() == 15)
            // A foreground with time to spare: the rest.
            let second = await migration.runIfNeeded(budget: .seconds(60))
            #expect(second.migratedCount == 15 && second.isComplete)
            #expect(try dates(store) == expected)
            // Done: later calls touch nothing.
            let third = await migration.runIfNeeded(budget: .seconds(60))
            #expect(third.batchCount == 0 && third.isComplete)
        }
    }

    @Test("seed 002: the module reads the same figures before, during and after the migration")
    func figuresThroughout() async throws {
        try await withFiles { files in
            let legacy = try files.legacy()
            // 25 saves an hour apart, the last at base + 24 h; one of them also in a reading list
            // that the new store already has (saved there later); one unparsable row.
            try seed(legacy, count: 25)
            try legacy.insertOldAppRow(key: "enwiki:bad", savedDate: "last Tuesday")
            let store = try files.store()
            try store.upsert([
                SavedArticle(
                    articleKey: "enwiki:3", title: "Three", savedDate: Self.base.addingTimeInterval(30 * 3600),
                    readingList: "Travel")
            ])
            let recorder = SavedArticlesRecorder(legacy: legacy, store: store)
            let now = Self.base.addingTimeInterval(48 * 3600)
            let controller = SavedArticleDataController(
                store: SavedArticlesDuringMigration(recorder: recorder), now: { now })
            func figures() async throws -> (Int, Date?, [String]) {
                let activity = try await controller.activity(recentLimit: 3)
                return (activity.count, activity.lastSavedDate, activity.recent.map(\.articleKey))
            }
            let expected = (25, Self.base.addingTimeInterval(30 * 3600), ["enwiki:3", "enwiki:24", "enwiki:23"])
            let before = try await figures()
            #expect(before.0 == expected.0 && before.1 == expected.1 && before.2 == expected.2)
            // The new store alone would say 1 before the migration.
            #expect(try await store.activity(from: Self.base, to: now, recentLimit: 3).count == 1)

            let migration = SavedArticlesMigration(recorder: recorder, batchSize: 10)
            var report = MigrationReport()
            repeat {
                report = await migration.runBatch()
                let during = try await figures()
                #expect(during.0 == expected.0 && during.1 == expected.1 && during.2 == expected.2)
            } while !report.isComplete
            #expect(try legacy.pendingCount() == 0)
            #expect(try await store.activity(from: Self.base, to: now, recentLimit: 3).count == 25)
        }
    }

    @Test("seed 002 (engineering): the migration copies saved dates in batches and marks legacy rows migrated")
    func copiesInBatches() async throws {
        try await withFiles { files in
            let legacy = try files.legacy()
            let expected = try seed(legacy, count: 7)
            let store = try files.store()
            let report = await SavedArticlesMigration(
                recorder: SavedArticlesRecorder(legacy: legacy, store: store), batchSize: 3
            ).run()
            #expect(report.migratedCount == 7)
            #expect(report.batchCount == 3)
            #expect(report.isComplete)
            #expect(report.failure == nil)
            #expect(try dates(store) == expected)
            #expect(try legacy.pendingCount() == 0)
            #expect(try legacy.flags().values.allSatisfy { $0.migrated && $0.skipReason == nil })
            // What the new store holds survives a relaunch.
            #expect(try dates(files.store()) == expected)
        }
    }

    @Test("the migration resumes where a failed new-store write stopped it, marking nothing of that batch")
    func resumesAfterFailure() async throws {
        try await withFiles { files in
            let legacy = try files.legacy()
            let expected = try seed(legacy, count: 7)
            let store = FlakyStore(try files.store())
            store.failUpserts([2])
            let migration = SavedArticlesMigration(
                recorder: SavedArticlesRecorder(legacy: legacy, store: store), batchSize: 3)

            let first = await migration.run()
            #expect(first.migratedCount == 3)
            #expect(first.failure == FlakyStore.failure)
            #expect(!first.isComplete)
            #expect(try legacy.pendingCount() == 4)
            #expect(try dates(files.store()).count == 3)

            let second = await migration.run()
            #expect(second.migratedCount == 4)
            #expect(second.isComplete)
            #expect(try dates(files.store()) == expected)
            #expect(try legacy.pendingCount() == 0)
        }
    }

    @Test("running the migration again changes nothing")
    func idempotentRerun() async throws {
        try await withFiles { files in
            let legacy = try files.legacy()
            try seed(legacy, count: 5)
            let store = try files.store()
            let migration = SavedArticlesMigration(recorder: SavedArticlesRecorder(legacy: legacy, store: store))
            _ = await migration.run()
            let before = try store.allArticles()
            let again = await migration.run()
            #expect(again.migratedCount == 0)
            #expect(again.skipped.isEmpty)
            #expect(again.isComplete)
            #expect(try store.allArticles() == before)
        }
    }

    @Test("a crash between the new-store write and the legacy mark leaves no duplicates after relaunch")
    func crashBetweenWriteAndMark() async throws {
        try await withFiles { files in
            let expected: [String: Date]
            do {
                let legacy = try files.legacy()
                expected = try seed(legacy, count: 4)
                let flaky = FlakyLegacy(legacy)
                flaky.failMarks(true)
                let report = await SavedArticlesMigration(
                    recorder: SavedArticlesRecorder(legacy: flaky, store: try files.store()), batchSize: 10
                ).run()
                #expect(report.failure?.code == .legacyWriteFailed)
                #expect(report.migratedCount == 0)
                #expect(try legacy.pendingCount() == 4)
                #expect(try dates(files.store()) == expected)
            }
            // Relaunch: both stores opened afresh from their files.
            let legacy = try files.legacy()
            let store = try files.store()
            let report = await SavedArticlesMigration(recorder: SavedArticlesRecorder(legacy: legacy, store: store))
                .run()
            #expect(report.migratedCount == 4)
            #expect(report.isComplete)
            #expect(try store.allArticles().count == 4)
            #expect(try dates(store) == expected)
        }
    }

    @Test("unparsable legacy rows are reported and skipped, not retried, and the migration completes")
    func skipsUnparsableRows() async throws {
        try await withFiles { files in
            let legacy = try files.legacy()
            let good = try legacy.insertOldAppRow(key: "enwiki:good", savedDate: "2026-03-02T12:00:00Z")
            let fraction = try legacy.insertOldAppRow(
                key: "enwiki:fraction", savedDate: "2026-03-02T12:00:00.250+01:00")
            let seconds = try legacy.insertOldAppRow(key: "enwiki:seconds", savedDate: 1_772_000_000)
            let null = try legacy.insertOldAppRow(key: "enwiki:null", savedDate: nil)
            let junk = try legacy.insertOldAppRow(key: "enwiki:junk", savedDate: "last Tuesday")
            let empty = try legacy.insertOldAppRow(key: "enwiki:empty", savedDate: "  ")
            let blob = try legacy.insertOldAppRow(key: "enwiki:blob", savedDate: Data([0xFF, 0x00, 0x13]))
            let negative = try legacy.insertOldAppRow(key: "enwiki:negative", savedDate: -5)
            let noKey = try legacy.insertOldAppRow(key: "", savedDate: "2026-03-02T12:00:00Z")
            let badImage = try legacy.insertOldAppRow(
                key: "enwiki:bad-image", savedDate: "2026-03-02T12:00:00Z", imageURL: "not a url")
            let store = try files.store()
            let migration = SavedArticlesMigration(
                recorder: SavedArticlesRecorder(legacy: legacy, store: store), batchSize: 4)

            let report = await migration.run()
            #expect(report.isComplete)
            #expect(report.failure == nil)
            #expect(report.migratedCount == 4)
            #expect(
                Set(report.skipped) == [
                    .init(legacyID: null, articleKey: "enwiki:null", reason: .missingSavedDate),
                    .init(legacyID: junk, articleKey: "enwiki:junk", reason: .unparsableSavedDate),
                    .init(legacyID: empty, articleKey: "enwiki:empty", reason: .missingSavedDate),
                    .init(legacyID: blob, articleKey: "enwiki:blob", reason: .unparsableSavedDate),
                    .init(legacyID: negative, articleKey: "enwiki:negative", reason: .unparsableSavedDate),
                    .init(legacyID: noKey, articleKey: "", reason: .missingArticleKey),
                ])
            #expect(
                try dates(store) == [
                    "enwiki:good": Date(timeIntervalSince1970: 1_772_452_800),
                    "enwiki:fraction": Date(timeIntervalSince1970: 1_772_449_200.25),
                    "enwiki:seconds": Date(timeIntervalSince1970: 1_772_000_000),
                    "enwiki:bad-image": Date(timeIntervalSince1970: 1_772_452_800),
                ])
            #expect(try store.allArticles().first { $0.articleKey == "enwiki:bad-image" }?.imageURL == nil)
            let flags = try legacy.flags()
            #expect(
                flags[good]?.migrated == true && flags[fraction]?.migrated == true && flags[seconds]?.migrated == true
                    && flags[badImage]?.migrated == true)
            // Skipped rows keep is_saved_migrated = 0 and carry the reason instead.
            #expect(flags[junk]?.migrated == false)
            #expect(flags[junk]?.skipReason == "unparsable_saved_date")

            let again = await migration.run()
            #expect(again.skipped.isEmpty)
            #expect(again.migratedCount == 0)
            #expect(again.isComplete)
        }
    }

    @Test("batches holding only unparsable rows do not stall the migration")
    func unparsableBatchesDoNotStall() async throws {
        let legacy = try LegacySavedArticleStore.inMemory()
        for index in 0..<5 { try legacy.insertOldAppRow(key: "enwiki:bad\(index)", savedDate: "??") }
        try legacy.insertOldAppRow(key: "enwiki:good", savedDate: "2026-03-02T12:00:00Z")
        let store = try SavedArticleStore.inMemory()
        let report = await SavedArticlesMigration(
            recorder: SavedArticlesRecorder(legacy: legacy, store: store), batchSize: 2
        ).run()
        #expect(report.isComplete)
        #expect(report.skipped.count == 5)
        #expect(report.migratedCount == 1)
        // Three full batches, then one that finds nothing left.
        #expect(report.batchCount == 4)
    }

    @Test("saving a skipped article again clears the skip and the save reaches both stores")
    func resaveClearsSkip() async throws {
        let legacy = try LegacySavedArticleStore.inMemory()
        let id = try legacy.insertOldAppRow(key: "enwiki:A", savedDate: "garbage")
        let store = try SavedArticleStore.inMemory()
        let recorder = SavedArticlesRecorder(legacy: legacy, store: store, now: { Self.base })
        _ = await SavedArticlesMigration(recorder: recorder).run()
        try await recorder.save(articleKey: "enwiki:A", title: "A")
        #expect(try legacy.flags()[id]?.migrated == true)
        #expect(try legacy.flags()[id]?.skipReason == nil)
        #expect(try dates(store) == ["enwiki:A": Self.base])
    }

    @Test("seed 002 (engineering): a legacy save writes its saved date to both stores and marks it migrated")
    func dualWrite() async throws {
        try await withFiles { files in
            let legacy = try files.legacy()
            let store = try files.store()
            let clock = TestClock(Self.base)
            let recorder = SavedArticlesRecorder(legacy: legacy, store: store, now: clock.function)
            try await recorder.save(
                articleKey: "enwiki:A", title: "A", readingList: "Travel",
                imageURL: URL(string: "https://img.test/a.jpg"))
            #expect(try legacy.rawSavedDate(key: "enwiki:A", list: "Travel") == LegacySavedDate.text(for: Self.base))
            #expect(try legacy.pendingCount() == 0)
            #expect(
                try store.allArticles() == [
                    SavedArticle(
                        articleKey: "enwiki:A", title: "A", savedDate: Self.base,
                        imageURL: URL(string: "https://img.test/a.jpg"), readingList: "Travel")
                ])

            // Saving again later moves the date in both stores; unsaving removes it from both.
            clock.now = Self.base.addingTimeInterval(60)
            try await recorder.save(articleKey: "enwiki:A", title: "A", readingList: "Travel")
            #expect(try dates(store) == ["enwiki:A": Self.base.addingTimeInterval(60)])
            #expect(try store.allArticles().first?.imageURL == URL(string: "https://img.test/a.jpg"))
            try await recorder.unsave(articleKey: "enwiki:A", readingList: "Travel")
            #expect(try store.allArticles().isEmpty)
            #expect(try legacy.keys().isEmpty)
        }
    }

    @Test("when the new store refuses a save, the legacy save stands and the migration copies it later")
    func saveWhenNewStoreFails() async throws {
        let legacy = try LegacySavedArticleStore.inMemory()
        let store = FlakyStore(try SavedArticleStore.inMemory())
        store.failUpserts([1])
        let recorder = SavedArticlesRecorder(legacy: legacy, store: store, now: { Self.base })
        await #expect(throws: FlakyStore.failure) {
            try await recorder.save(articleKey: "enwiki:A", title: "A")
        }
        #expect(try legacy.pendingCount() == 1)
        let report = await SavedArticlesMigration(recorder: recorder).run()
        #expect(report.migratedCount == 1)
        let base = try #require(store.base as? SavedArticleStore)
        #expect(try dates(base) == ["enwiki:A": Self.base])
    }

    @Test("an empty article key is refused before anything is written")
    func emptyKeyRefused() async throws {
        let legacy = try LegacySavedArticleStore.inMemory()
        let store = try SavedArticleStore.inMemory()
        let recorder = SavedArticlesRecorder(legacy: legacy, store: store)
        await #expect(throws: ActivityError.self) { try await recorder.save(articleKey: "", title: "A") }
        #expect(throws: ActivityError.self) {
            try store.upsert([SavedArticle(articleKey: "", title: "A", savedDate: Self.base)])
        }
        #expect(try legacy.keys().isEmpty)
    }

    @Test("seed 002 (engineering): saves and unsaves between migration batches end in both stores exactly once")
    func savesDuringMigration() async throws {
        try await withFiles { files in
            let legacy = try files.legacy()
            try seed(legacy, count: 6)
            let store = try files.store()
            let clock = TestClock(Self.base.addingTimeInterval(86_400))
            let recorder = SavedArticlesRecorder(legacy: legacy, store: store, now: clock.function)
            let migration = SavedArticlesMigration(recorder: recorder, batchSize: 2)

            let first = await migration.runBatch()
            #expect(first.migratedCount == 2)
            #expect(!first.isComplete)
            // A new save, a save again of a row still waiting, one of a row already copied,
            // and an unsave of a row still waiting.
            try await recorder.save(articleKey: "enwiki:new", title: "New")
            try await recorder.save(articleKey: "enwiki:4", title: "Again")
            try await recorder.save(articleKey: "enwiki:0", title: "Again")
            try await recorder.unsave(articleKey: "enwiki:5")

            let rest = await migration.run()
            #expect(rest.isComplete)
            #expect(rest.failure == nil)
            let saved = try store.allArticles()
            #expect(saved.count == 6)
            #expect(
                Set(saved.map(\.articleKey)) == [
                    "enwiki:0", "enwiki:1", "enwiki:2", "enwiki:3", "enwiki:4", "enwiki:new",
                ])
            let later = clock.now
            #expect(try dates(store)["enwiki:4"] == later)
            #expect(try dates(store)["enwiki:0"] == later)
            #expect(try store.keys() == legacy.keys())
            #expect(try legacy.pendingCount() == 0)
        }
    }

    @Test("saves racing a running migration leave both stores in step")
    func concurrentSavesAndMigration() async throws {
        // In memory: the interleaving is the point here, not the files.
        do {
            let legacy = try LegacySavedArticleStore.inMemory()
            try seed(legacy, count: 300)
            let store = try SavedArticleStore.inMemory()
            let recorder = SavedArticlesRecorder(
                legacy: legacy, store: store, now: { Self.base.addingTimeInterval(999_999) })
            let migration = SavedArticlesMigration(recorder: recorder, batchSize: 7)
            let report = try await withThrowingTaskGroup(of: MigrationReport?.self) { group in
                group.addTask { await migration.run() }
                for index in stride(from: 0, to: 400, by: 8) {
                    group.addTask {
                        try await recorder.save(articleKey: "enwiki:\(index)", title: "Raced")
                        if index % 16 == 0 { try await recorder.unsave(articleKey: "enwiki:\(index)") }
                        return nil
                    }
                }
                var report: MigrationReport?
                for try await result in group where result != nil { report = result }
                return report
            }
            #expect(report?.isComplete == true)
            _ = await migration.run()
            #expect(try legacy.pendingCount() == 0)
            #expect(try store.keys() == legacy.keys())
            let saved = try store.allArticles()
            #expect(saved.count == Set(saved.map(\.articleKey)).count)
            #expect(
                saved.filter { $0.title == "Raced" }.allSatisfy {
                    $0.savedDate == Self.base.addingTimeInterval(999_999)
                })
        }
    }

    @Test("seed 002 (engineering): opening an old app's database adds isSavedMigrated and leaves its rows to migrate")
    func upgradesOldAppDatabase() async throws {
        try await withFiles { files in
            // The old app's database, written before the migration columns existed.
            let old = try DatabaseQueue(path: files.legacyPath)
            try await old.write { db in
                try db.execute(sql: LegacySavedArticleStore.legacyTableSQL)
                try db.execute(
                    sql: "INSERT INTO saved_articles (article_key, display_title, saved_date) VALUES (?, ?, ?)",
                    arguments: ["enwiki:Old", "Old", "2025-12-24T09:00:00Z"])
            }
            try old.close()

            let legacy = try files.legacy()
            let columns = try await legacy.dbQueue.read { db in try db.columns(in: "saved_articles").map(\.name) }
            #expect(columns.contains("is_saved_migrated"))
            #expect(columns.contains("migration_skip_reason"))
            #expect(try legacy.pendingCount() == 1)
            let store = try files.store()
            let report = await SavedArticlesMigration(recorder: SavedArticlesRecorder(legacy: legacy, store: store))
                .run()
            #expect(report.migratedCount == 1)
            #expect(try dates(store) == ["enwiki:Old": Date(timeIntervalSince1970: 1_766_566_800)])
        }
    }
}
