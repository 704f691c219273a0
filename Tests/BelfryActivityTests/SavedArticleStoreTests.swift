import Foundation
import Testing

@testable import BelfryActivity

@Suite("BelfryActivity saved-article store")
struct SavedArticleStoreTests {
    static let base = Date(timeIntervalSince1970: 1_772_000_000)

    @Test("seed 002 (engineering): the new store keeps a saved date per article and list, the latest winning")
    func upsertKeepsLatest() throws {
        let store = try SavedArticleStore.inMemory()
        let later = Self.base.addingTimeInterval(3600)
        try store.upsert([SavedArticle(articleKey: "enwiki:A", title: "New", savedDate: later)])
        try store.upsert([
            SavedArticle(
                articleKey: "enwiki:A", title: "Old", savedDate: Self.base,
                imageURL: URL(string: "https://img.test/a.jpg")),
            SavedArticle(articleKey: "enwiki:A", title: "Listed", savedDate: Self.base, readingList: "Travel"),
        ])
        let articles = try store.allArticles()
        #expect(
            articles == [
                SavedArticle(
                    articleKey: "enwiki:A", title: "New", savedDate: later,
                    imageURL: URL(string: "https://img.test/a.jpg")),
                SavedArticle(articleKey: "enwiki:A", title: "Listed", savedDate: Self.base, readingList: "Travel"),
            ])
    }

    @Test("removing takes the article out of one list only")
    func removeFromOneList() throws {
        let store = try SavedArticleStore.inMemory()
        try store.upsert([
            SavedArticle(articleKey: "enwiki:A", title: "A", savedDate: Self.base),
            SavedArticle(articleKey: "enwiki:A", title: "A", savedDate: Self.base, readingList: "Travel"),
        ])
        try store.remove(articleKey: "enwiki:A", readingList: nil)
        try store.remove(articleKey: "enwiki:missing", readingList: nil)
        #expect(try store.keys() == ["enwiki:A/Travel"])
    }

    @Test("an upsert holding one invalid record writes none of them")
    func upsertAllOrNothing() throws {
        let store = try SavedArticleStore.inMemory()
        #expect(throws: ActivityError.self) {
            try store.upsert([
                SavedArticle(articleKey: "enwiki:A", title: "A", savedDate: Self.base),
                SavedArticle(articleKey: "", title: "No key", savedDate: Self.base),
            ])
        }
        #expect(try store.allArticles().isEmpty)
    }

    @Test("the store keeps its records in its file across reopening")
    func persistsInFile() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("saved.sqlite").path
            try SavedArticleStore(path: path).upsert([
                SavedArticle(articleKey: "enwiki:A", title: "A", savedDate: Self.base)
            ])
            #expect(try SavedArticleStore(path: path).allArticles().map(\.savedDate) == [Self.base])
        }
    }

    @Test("a store that cannot be opened says so")
    func unavailableStore() {
        #expect {
            try SavedArticleStore(path: "/nonexistent-directory/saved.sqlite")
        } throws: { ($0 as? ActivityError)?.code == .storeUnavailable }
    }

    @Test("legacy saved dates: ISO 8601 or Unix seconds parse; anything else is refused with a reason")
    func legacyDateParsing() {
        #expect(LegacySavedDate.parse("2026-03-02T12:00:00Z") == .success(Date(timeIntervalSince1970: 1_772_452_800)))
        #expect(
            LegacySavedDate.parse("2026-03-02T13:00:00.500+01:00")
                == .success(Date(timeIntervalSince1970: 1_772_452_800.5)))
        #expect(LegacySavedDate.parse(" 1772000000 ") == .success(Date(timeIntervalSince1970: 1_772_000_000)))
        #expect(LegacySavedDate.parse("1772000000.0") == .success(Date(timeIntervalSince1970: 1_772_000_000)))
        #expect(LegacySavedDate.parse(nil) == .failure(.missingSavedDate))
        #expect(LegacySavedDate.parse("") == .failure(.missingSavedDate))
        #expect(LegacySavedDate.parse("March 2nd") == .failure(.unparsableSavedDate))
        #expect(LegacySavedDate.parse("nan") == .failure(.unparsableSavedDate))
        #expect(LegacySavedDate.parse("-1") == .failure(.unparsableSavedDate))
        let date = Date(timeIntervalSince1970: 1_772_000_000.125)
        #expect(LegacySavedDate.parse(LegacySavedDate.text(for: date)) == .success(date))
    }
}
