import Foundation
import Testing

@testable import BelfryActivity

@MainActor
@Suite("BelfryActivity saved-articles module")
struct SavedArticlesModuleTests {
    static let newYork = Calendar.gregorian("America/New_York")
    static let enUS = Locale(identifier: "en_US")
    static let deDE = Locale(identifier: "de_DE")

    /// A module over an in-memory store holding `articles`, at `now` in `calendar`.
    func module(
        _ articles: [SavedArticle], now: Date, calendar: Calendar = newYork, locale: Locale = enUS,
        summaries: FakeSummaries = FakeSummaries(), maxSummaryRequests: Int = 3
    ) throws -> SavedArticlesModule {
        let store = try SavedArticleStore.inMemory()
        try store.upsert(articles)
        return SavedArticlesModule(
            dataController: SavedArticleDataController(store: store, calendar: calendar, now: { now }),
            summaries: summaries, locale: locale, maxSummaryRequests: maxSummaryRequests)
    }

    func article(_ key: String, _ date: Date, list: String? = nil, image: String? = nil) -> SavedArticle {
        SavedArticle(
            articleKey: key, title: key, savedDate: date, imageURL: image.flatMap(URL.init(string:)),
            readingList: list)
    }

    /// Spaces ICU may put in times ("9:41\u{202F}AM") read as plain spaces.
    func plain(_ text: String?) -> String? {
        text.map { String($0.map { $0 == "\u{202F}" || $0 == "\u{00A0}" ? " " : $0 }) }
    }

    @Test("seed 002: counts articles saved or added to a reading list in the last 30 days")
    func countsSavesAndReadingLists() async throws {
        let calendar = Self.newYork
        let now = calendar.date(2026, 5, 20, 10)
        let model = try module(
            [
                article("enwiki:A", calendar.date(2026, 5, 19, 8)),
                article("enwiki:B", calendar.date(2026, 5, 2, 8), list: "Travel"),
                article("enwiki:C", calendar.date(2026, 4, 25, 23), list: "Cooking"),
                article("enwiki:Old", calendar.date(2026, 4, 1, 12)),
                article("enwiki:Older", calendar.date(2025, 12, 1, 12), list: "Travel"),
            ], now: now)
        await model.refresh()
        #expect(model.count == 3)
        #expect(model.countText == "3")
        #expect(model.hasLoaded)
    }

    @Test("seed 002: an article saved in several lists counts once, dated by its latest save")
    func deduplicatesAcrossReadingLists() async throws {
        let calendar = Self.newYork
        let now = calendar.date(2026, 5, 20, 10)
        let model = try module(
            [
                article("enwiki:A", calendar.date(2026, 5, 10, 8)),
                article("enwiki:A", calendar.date(2026, 5, 12, 8), list: "Travel"),
                article("enwiki:A", calendar.date(2026, 5, 14, 8), list: "Cooking"),
                // Saved long ago, added to a reading list this month: counts.
                article("enwiki:B", calendar.date(2026, 1, 2, 8)),
                article("enwiki:B", calendar.date(2026, 5, 1, 8), list: "Travel"),
            ], now: now)
        await model.refresh()
        #expect(model.count == 2)
        let activity = try await SavedArticleDataController(
            store: try {
                let store = try SavedArticleStore.inMemory()
                try store.upsert([
                    article("enwiki:A", calendar.date(2026, 5, 10, 8)),
                    article("enwiki:A", calendar.date(2026, 5, 14, 8), list: "Cooking"),
                ])
                return store
            }(), calendar: calendar, now: { now }
        ).activity(recentLimit: 10)
        #expect(activity.recent.map(\.articleKey) == ["enwiki:A"])
        #expect(activity.recent.first?.savedDate == calendar.date(2026, 5, 14, 8))
        #expect(activity.recent.first?.readingList == "Cooking")
    }

    @Test("seed 002: the month is the last 30 local days, from local midnight 29 days before today")
    func windowBoundaryAtLocalMidnight() async throws {
        let calendar = Self.newYork
        let now = calendar.date(2026, 5, 20, 10)
        let start = calendar.date(2026, 4, 21)
        #expect(
            SavedArticleDataController.window(endingAt: now, calendar: calendar) == DateInterval(start: start, end: now)
        )
        let model = try module(
            [
                article("enwiki:first-second", start),
                article("enwiki:last-second-before", start.addingTimeInterval(-1)),
                article("enwiki:just-now", now),
            ], now: now)
        await model.refresh()
        #expect(model.count == 2)
    }

    @Test("seed 002: the month follows local days across the March DST change in New York")
    func windowAcrossSpringForward() async throws {
        let calendar = Self.newYork
        // Clocks went forward on 8 March 2026; the window still starts at local midnight.
        let now = calendar.date(2026, 3, 20, 12)
        let window = SavedArticleDataController.window(endingAt: now, calendar: calendar)
        #expect(window.start == calendar.date(2026, 2, 19))
        #expect(calendar.dateComponents([.hour, .minute], from: window.start) == DateComponents(hour: 0, minute: 0))
        // 29 days and 12 hours of wall-clock time, one hour fewer of real time.
        #expect(window.duration == (29 * 24 + 12 - 1) * 3600)
        // Subtracting 30 × 86 400 s would have started at noon, 19 February: saves that morning count.
        let model = try module(
            [
                article("enwiki:morning", calendar.date(2026, 2, 19, 9)),
                article("enwiki:eve", calendar.date(2026, 2, 18, 23, 59, 59)),
            ], now: now)
        await model.refresh()
        #expect(model.count == 1)

        // The DST day itself as the first day of the window.
        let april = SavedArticleDataController.window(endingAt: calendar.date(2026, 4, 6, 0, 30), calendar: calendar)
        #expect(april.start == calendar.date(2026, 3, 8))
    }

    @Test("seed 002: the month follows local days across the November DST change in New York")
    func windowAcrossFallBack() async throws {
        let calendar = Self.newYork
        // Clocks went back on 1 November 2026.
        let now = calendar.date(2026, 11, 20, 8)
        let window = SavedArticleDataController.window(endingAt: now, calendar: calendar)
        #expect(window.start == calendar.date(2026, 10, 22))
        #expect(window.duration == (29 * 24 + 8 + 1) * 3600)
        let model = try module(
            [
                article("enwiki:first", calendar.date(2026, 10, 22, 0, 0, 1)),
                article("enwiki:before", calendar.date(2026, 10, 21, 23, 59, 59)),
                article("enwiki:repeated-hour", calendar.date(2026, 11, 1, 1, 30)),
            ], now: now)
        await model.refresh()
        #expect(model.count == 2)
    }

    @Test("seed 002: the month is based on the device's time zone, not UTC")
    func windowInDeviceTimeZone() async throws {
        // 00:30 on 20 May in Tokyo is still 19 May in UTC. Tokyo's window starts at its midnight
        // on 21 April; a device on UTC would count from 20 April and include this save.
        let tokyo = Calendar.gregorian("Asia/Tokyo")
        let now = tokyo.date(2026, 5, 20, 0, 30)
        let save = tokyo.date(2026, 4, 20, 19)  // 20 April, 10:00 UTC
        let inTokyo = try module([article("jawiki:A", save)], now: now, calendar: tokyo)
        await inTokyo.refresh()
        #expect(inTokyo.count == 0)
        let inUTC = try module([article("jawiki:A", save)], now: now, calendar: .gregorian("UTC"))
        await inUTC.refresh()
        #expect(inUTC.count == 1)
    }

    @Test(
        "seed 002: a save today shows the time, in the device's locale",
        arguments: [
            ("en_US", "9:41 AM"), ("de_DE", "09:41"),
        ])
    func lastSavedTodayShowsTime(locale: String, expected: String) async throws {
        let calendar = Self.newYork
        let model = try module(
            [article("enwiki:A", calendar.date(2026, 3, 3, 9, 41)), article("enwiki:B", calendar.date(2026, 3, 1, 9))],
            now: calendar.date(2026, 3, 3, 18), locale: Locale(identifier: locale))
        await model.refresh()
        #expect(plain(model.lastSavedText) == expected)
        #expect(model.lastSavedDate == calendar.date(2026, 3, 3, 9, 41))
    }

    @Test(
        "seed 002: a save before today shows a localized date",
        arguments: [
            ("en_US", "Mar 2, 2026"), ("de_DE", "02.03.2026"),
        ])
    func lastSavedEarlierShowsDate(locale: String, expected: String) async throws {
        let calendar = Self.newYork
        let model = try module(
            [article("enwiki:A", calendar.date(2026, 3, 2, 23, 59))], now: calendar.date(2026, 3, 3, 0, 0),
            locale: Locale(identifier: locale))
        await model.refresh()
        #expect(plain(model.lastSavedText) == expected)
    }

    @Test("seed 002: today and its time are the device's local day where the UTC date differs")
    func lastSavedInLocalTimeZone() async throws {
        let tokyo = Calendar.gregorian("Asia/Tokyo")
        // 08:00 on 4 March in Tokyo is 23:00 on 3 March in UTC.
        let now = tokyo.date(2026, 3, 4, 8)
        let sameLocalDay = try module([article("jawiki:A", tokyo.date(2026, 3, 4, 7))], now: now, calendar: tokyo)
        await sameLocalDay.refresh()
        #expect(plain(sameLocalDay.lastSavedText) == "7:00 AM")
        // Same UTC day as now (3 March, 14:30 UTC), but yesterday in Tokyo.
        let sameUTCDay = try module([article("jawiki:A", tokyo.date(2026, 3, 3, 23, 30))], now: now, calendar: tokyo)
        await sameUTCDay.refresh()
        #expect(plain(sameUTCDay.lastSavedText) == "Mar 3, 2026")
    }

    @Test("seed 002: the last save shows even when it is older than the month")
    func lastSavedOlderThanWindow() async throws {
        let calendar = Self.newYork
        let model = try module([article("enwiki:A", calendar.date(2025, 12, 24, 9))], now: calendar.date(2026, 3, 3, 9))
        await model.refresh()
        #expect(model.count == 0)
        #expect(model.countText == "0")
        #expect(plain(model.lastSavedText) == "Dec 24, 2025")
    }

    @Test("seed 002: shows the images of the three most recently saved articles that have one")
    func thumbnailsOfRecentArticles() async throws {
        let calendar = Self.newYork
        let summaries = FakeSummaries(thumbnails: [
            "enwiki:2": URL(string: "https://img.test/2.jpg")!,
            "enwiki:4": URL(string: "https://img.test/4.jpg")!,
            "enwiki:5": URL(string: "https://img.test/5.jpg")!,
        ])
        let model = try module(
            [
                article("enwiki:1", calendar.date(2026, 3, 3, 9)),  // summary without an image
                article("enwiki:2", calendar.date(2026, 3, 3, 8)),
                article("enwiki:3", calendar.date(2026, 3, 3, 7), image: "https://img.test/stored-3.jpg"),
                article("enwiki:4", calendar.date(2026, 3, 3, 6)),
                article("enwiki:5", calendar.date(2026, 3, 3, 5)),
            ], now: calendar.date(2026, 3, 3, 10), summaries: summaries)
        await model.refresh()
        #expect(
            model.thumbnails.map(\.absoluteString) == [
                "https://img.test/2.jpg", "https://img.test/stored-3.jpg", "https://img.test/4.jpg",
            ])
        // The stored image needs no request; nothing is asked beyond what fills three circles.
        #expect(Set(summaries.requested) == ["enwiki:1", "enwiki:2", "enwiki:4"])
    }

    @Test("seed 002: an article without an image, or whose summary fails, gets no circle")
    func noImageNoCircle() async throws {
        let calendar = Self.newYork
        let summaries = FakeSummaries(
            thumbnails: ["enwiki:ok": URL(string: "https://img.test/ok.jpg")!], failing: ["enwiki:fails"])
        let model = try module(
            [
                article("enwiki:fails", calendar.date(2026, 3, 3, 9)),
                article("enwiki:no-image", calendar.date(2026, 3, 3, 8)),
                article("enwiki:ok", calendar.date(2026, 3, 3, 7)),
            ], now: calendar.date(2026, 3, 3, 10), summaries: summaries)
        await model.refresh()
        #expect(model.thumbnails == [URL(string: "https://img.test/ok.jpg")!])
        #expect(model.count == 3)
    }

    @Test("seed 002: summary requests stay within the cap when many articles lack images")
    func summaryRequestCap() async throws {
        let calendar = Self.newYork
        let summaries = FakeSummaries(thumbnails: ["enwiki:9": URL(string: "https://img.test/9.jpg")!])
        let articles = (0..<12).map { article("enwiki:\($0)", calendar.date(2026, 3, 3, 20 - $0)) }
        let model = try module(articles, now: calendar.date(2026, 3, 3, 21), summaries: summaries)
        await model.refresh()
        #expect(summaries.requested.count == 3)
        #expect(Set(summaries.requested) == ["enwiki:0", "enwiki:1", "enwiki:2"])
        #expect(model.thumbnails.isEmpty)

        let generous = FakeSummaries(thumbnails: ["enwiki:9": URL(string: "https://img.test/9.jpg")!])
        let wider = try module(
            articles, now: calendar.date(2026, 3, 3, 21), summaries: generous, maxSummaryRequests: 10)
        await wider.refresh()
        #expect(generous.requested.count == 10)
        #expect(wider.thumbnails == [URL(string: "https://img.test/9.jpg")!])
    }

    @Test("seed 002: tapping the module goes to the Saved tab")
    func tapGoesToSavedTab() throws {
        let model = try module([], now: Date(timeIntervalSince1970: 1_772_000_000))
        #expect(model.tapDestination == .savedTab)
    }

    @Test("seed 002: with no saved history the module stays and shows 0")
    func zeroState() async throws {
        let summaries = FakeSummaries()
        let model = try module([], now: Date(timeIntervalSince1970: 1_772_000_000), summaries: summaries)
        await model.refresh()
        #expect(model.hasLoaded)
        #expect(model.count == 0)
        #expect(model.countText == "0")
        #expect(model.lastSavedText == nil)
        #expect(model.thumbnails.isEmpty)
        #expect(summaries.requested.isEmpty)
        #expect(model.tapDestination == .savedTab)
        #expect(model.accessibilityLabel == "0 articles saved in the last 30 days")
    }

    @Test("VoiceOver reads the count and the last save")
    func accessibilityLabel() async throws {
        let calendar = Self.newYork
        let now = calendar.date(2026, 3, 3, 12)
        let one = try module([article("enwiki:A", calendar.date(2026, 3, 3, 9, 41))], now: now)
        await one.refresh()
        #expect(plain(one.accessibilityLabel) == "1 article saved in the last 30 days, last saved 9:41 AM")
        let many = try module(
            (0..<12).map { article("enwiki:\($0)", calendar.date(2026, 2, 20, $0)) }, now: now)
        await many.refresh()
        #expect(many.accessibilityLabel == "12 articles saved in the last 30 days, last saved Feb 20, 2026")
    }

    @Test("the count is formatted for the locale")
    func countFormatting() async throws {
        let calendar = Self.newYork
        let articles = (0..<1_234).map {
            article("enwiki:\($0)", calendar.date(2026, 3, 1).addingTimeInterval(Double($0)))
        }
        let model = try module(articles, now: calendar.date(2026, 3, 3), locale: Self.deDE)
        await model.refresh()
        #expect(model.count == 1_234)
        #expect(model.countText == "1.234")
    }

    @Test("a failed read keeps what is shown and reports the error; the next refresh clears it")
    func readFailure() async throws {
        let calendar = Self.newYork
        let store = FlakyStore(try SavedArticleStore.inMemory())
        try store.upsert([article("enwiki:A", calendar.date(2026, 3, 3, 9))])
        let model = SavedArticlesModule(
            dataController: SavedArticleDataController(
                store: store, calendar: calendar, now: { calendar.date(2026, 3, 3, 10) }),
            summaries: FakeSummaries(), locale: Self.enUS)
        await model.refresh()
        #expect(model.count == 1)
        store.failReads(true)
        await model.refresh()
        #expect(model.lastError?.code == .readFailed)
        #expect(model.count == 1)
        store.failReads(false)
        await model.refresh()
        #expect(model.lastError == nil)
    }

    @Test("seed 002 (engineering): the module reads only the new store")
    func readsOnlyNewStore() async throws {
        let calendar = Self.newYork
        let now = calendar.date(2026, 3, 3, 10)
        let legacy = try LegacySavedArticleStore.inMemory()
        try legacy.insertOldAppRow(key: "enwiki:A", savedDate: "2026-03-02T12:00:00Z")
        let store = try SavedArticleStore.inMemory()
        let model = SavedArticlesModule(
            dataController: SavedArticleDataController(store: store, calendar: calendar, now: { now }),
            summaries: FakeSummaries(), locale: Self.enUS)
        await model.refresh()
        #expect(model.count == 0)
        let report = await SavedArticlesMigration(recorder: SavedArticlesRecorder(legacy: legacy, store: store)).run()
        #expect(report.migratedCount == 1)
        await model.refresh()
        #expect(model.count == 1)
        #expect(model.lastSavedText == "Mar 2, 2026")
    }
}
