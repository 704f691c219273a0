import Foundation

/// An article the reader saved, in the default Saved list or in a named reading list.
///
/// The store keeps one record per article and list: an article saved in two lists is two
/// records with the same `articleKey`. Counts treat it as one article, dated by its latest save.
public struct SavedArticle: Sendable, Hashable {
    /// Identifies the article across lists (for example "enwiki:Belfry").
    public var articleKey: String
    /// The title to show.
    public var title: String
    /// When it was saved.
    public var savedDate: Date
    /// An image for the article when one was known at save time.
    public var imageURL: URL?
    /// The reading list it was saved to; `nil` for the default Saved list.
    public var readingList: String?

    /// - Parameters:
    ///   - articleKey: identifies the article; must not be empty.
    ///   - title: the title to show.
    ///   - savedDate: when it was saved.
    ///   - imageURL: an image, if known.
    ///   - readingList: the reading list; `nil` for the default Saved list.
    public init(articleKey: String, title: String, savedDate: Date, imageURL: URL? = nil, readingList: String? = nil) {
        self.articleKey = articleKey
        self.title = title
        self.savedDate = savedDate
        self.imageURL = imageURL
        self.readingList = readingList
    }
}

/// What the saved-articles module shows, read from the store in one transaction.
public struct SavedArticlesActivity: Sendable, Equatable {
    /// The window counted: from the start of the local day 29 days ago through the time of reading.
    public var window: DateInterval
    /// Articles whose latest save falls in the window, each counted once however many lists hold it.
    public var count: Int
    /// The latest save of any article, in or before the window; `nil` when nothing is saved.
    public var lastSavedDate: Date?
    /// The most recently saved articles in the window, latest first, one per article.
    public var recent: [SavedArticle]

    /// - Parameters:
    ///   - window: the window counted.
    ///   - count: articles saved in the window.
    ///   - lastSavedDate: the latest save.
    ///   - recent: recent articles, latest first.
    public init(window: DateInterval, count: Int, lastSavedDate: Date?, recent: [SavedArticle]) {
        self.window = window
        self.count = count
        self.lastSavedDate = lastSavedDate
        self.recent = recent
    }
}
