import Foundation

/// The app's existing article-summary service, the source of thumbnails for the module.
///
/// No cache sits in front of it: the module asks at most a few times per load, and the
/// service's network stack may cache responses itself.
public protocol ArticleSummaryFetching: Sendable {
    /// Fetches the summary of an article.
    /// - Parameter articleKey: the article, as `SavedArticle.articleKey`.
    func summary(forArticleKey articleKey: String) async throws -> ArticleSummary
}

/// What the module needs from an article summary.
public struct ArticleSummary: Sendable, Hashable {
    /// The article.
    public var articleKey: String
    /// Its thumbnail image, if it has one.
    public var thumbnailURL: URL?

    /// - Parameters:
    ///   - articleKey: the article.
    ///   - thumbnailURL: its thumbnail, if any.
    public init(articleKey: String, thumbnailURL: URL?) {
        self.articleKey = articleKey
        self.thumbnailURL = thumbnailURL
    }
}

/// Picks the module's thumbnails: the most recent articles that have an image.
struct SavedArticleThumbnails: Sendable {
    let summaries: any ArticleSummaryFetching
    /// Circles shown at most.
    let limit: Int
    /// Summary requests made at most per load.
    let maxRequests: Int

    /// An image stored with the article is used as is; for the others, summaries are fetched a
    /// few at a time, only as many as still needed, and never more than `maxRequests` in all.
    /// An article whose summary fails or has no image gets no circle.
    func load(for articles: [SavedArticle]) async -> [URL] {
        var found: [(rank: Int, url: URL)] = []
        var requests = 0
        var next = 0
        while found.count < limit, next < articles.count {
            var round: [(rank: Int, key: String)] = []
            while next < articles.count, found.count + round.count < limit {
                if let url = articles[next].imageURL {
                    found.append((next, url))
                } else if requests + round.count < maxRequests {
                    round.append((next, articles[next].articleKey))
                }
                next += 1
            }
            requests += round.count
            found += await fetch(round)
        }
        return found.sorted { $0.rank < $1.rank }.prefix(limit).map(\.url)
    }

    private func fetch(_ round: [(rank: Int, key: String)]) async -> [(rank: Int, url: URL)] {
        guard !round.isEmpty else { return [] }
        let summaries = summaries
        return await withTaskGroup(of: (rank: Int, url: URL)?.self) { group in
            for (rank, key) in round {
                group.addTask {
                    guard let url = try? await summaries.summary(forArticleKey: key).thumbnailURL else { return nil }
                    return (rank, url)
                }
            }
            var results: [(rank: Int, url: URL)] = []
            for await result in group {
                if let result { results.append(result) }
            }
            return results
        }
    }
}
