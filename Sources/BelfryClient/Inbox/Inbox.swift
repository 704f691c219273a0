import BelfryCore
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Something that changed in the user's inbox or preferences, from the live stream.
public enum InboxUpdate: Sendable, Equatable {
    /// The bell's counts; sent first on every connection and after every change.
    case counts(InboxCounts)
    /// A new notification reached the inbox.
    case created(InboxNotification)
    /// A notification changed (read, seen, archived, answered), here or on another device.
    case updated(InboxNotification)
    /// Another device changed the preferences of `tenant` (`nil`: the user's defaults).
    case preferencesUpdated(tenant: String?, etag: String)
    /// The stream connected (again).
    case connected
    /// The stream was lost; it reconnects after `retryIn` seconds.
    case disconnected(BelfryClientError, retryIn: TimeInterval)
}

/// Which notifications a page lists.
public enum InboxStatus: String, Sendable, CaseIterable {
    /// Not read and not archived.
    case unread
    /// Read, not archived.
    case read
    /// Everything not archived.
    case all
    /// Archived only.
    case archived
}

/// The user's inbox: pages of notifications, the bell's counts, marking them, answering
/// their actions, and a live stream of changes.
public final class Inbox: Sendable {
    private let api: BelfryAPI
    /// Waits between reconnects of the live stream: doubling from 1 s up to this, with jitter.
    let maxReconnectDelay: TimeInterval = 30

    init(api: BelfryAPI) {
        self.api = api
    }

    /// A page of notifications, newest first. Pass the page's `nextCursor` for the next one.
    /// - Parameter limit: 1 to 100.
    public func list(
        status: InboxStatus = .all, limit: Int = 20, cursor: String? = nil, category: String? = nil,
        tenant: String? = nil
    ) async throws(BelfryClientError) -> InboxPage {
        try await api.send(
            "GET", "v1/me/notifications",
            query: [
                "status": status.rawValue, "limit": String(limit), "cursor": cursor, "category": category,
                "tenant": tenant,
            ], idempotent: true
        ).decode()
    }

    /// The unread and unseen counts (archived left out), of one tenant or all.
    public func counts(tenant: String? = nil) async throws(BelfryClientError) -> InboxCounts {
        try await api.send("GET", "v1/me/notifications/counts", query: ["tenant": tenant], idempotent: true).decode()
    }

    /// Marks a notification read (and seen).
    public func markRead(_ id: UUID) async throws(BelfryClientError) -> InboxNotification {
        try await mark(id, "read")
    }

    /// Marks a notification unread again.
    public func markUnread(_ id: UUID) async throws(BelfryClientError) -> InboxNotification {
        try await mark(id, "unread")
    }

    /// Marks a notification seen: the user saw it in the list, without opening it.
    public func markSeen(_ id: UUID) async throws(BelfryClientError) -> InboxNotification {
        try await mark(id, "seen")
    }

    /// Archives a notification: it leaves the list and the counts.
    public func archive(_ id: UUID) async throws(BelfryClientError) -> InboxNotification {
        try await mark(id, "archive")
    }

    /// Brings an archived notification back to the list.
    public func unarchive(_ id: UUID) async throws(BelfryClientError) -> InboxNotification {
        try await mark(id, "unarchive")
    }

    /// Marks every notification (of a tenant or category, if given) read.
    /// - Returns: the counts afterwards.
    @discardableResult
    public func markAllRead(
        tenant: String? = nil, category: String? = nil
    ) async throws(BelfryClientError)
        -> InboxCounts
    {
        struct Answer: Decodable { var counts: InboxCounts }
        return try await api.send(
            "POST", "v1/me/notifications/read-all", query: ["tenant": tenant, "category": category], idempotent: true
        ).decode(Answer.self).counts
    }

    /// Marks every notification seen (the bell was opened).
    @discardableResult
    public func markAllSeen() async throws(BelfryClientError) -> InboxCounts {
        struct Answer: Decodable { var counts: InboxCounts }
        return try await api.send("POST", "v1/me/notifications/seen-all", idempotent: true).decode(Answer.self).counts
    }

    /// Chooses one of a notification's custom actions: recorded, the notification marked read,
    /// and the choice forwarded to the app's backend.
    public func respond(to id: UUID, action: String) async throws(BelfryClientError) -> InboxNotification {
        struct Answer: Decodable { var notification: InboxNotification }
        let path = "v1/me/notifications/\(id.uuidString.lowercased())/actions/\(action)"
        // Not retried on network errors: the backend would hear of the choice twice.
        return try await api.send("POST", path, idempotent: false).decode(Answer.self).notification
    }

    private func mark(_ id: UUID, _ verb: String) async throws(BelfryClientError) -> InboxNotification {
        try await api.send("POST", "v1/me/notifications/\(id.uuidString.lowercased())/\(verb)", idempotent: true)
            .decode()
    }

    /// The live stream (`GET /v1/me/stream`): connects, reconnects with backoff after a loss
    /// (sending `Last-Event-ID`, so missed events of the last minutes are replayed), and ends
    /// when the consumer stops iterating. The server ends a stream when its token expires
    /// (`token_expired`); the stream then reconnects at once with a refreshed token.
    public func updates() -> AsyncStream<InboxUpdate> {
        let (stream, continuation) = AsyncStream<InboxUpdate>.makeStream(bufferingPolicy: .bufferingNewest(256))
        let task = Task { [api, maxReconnectDelay] in
            var lastEventID: String?
            var failures = 0
            var refresh = false
            // The token of the last stream that ended with it: a provider that hands it out again
            // gets backoff, not a tight loop.
            var expiredToken: String?
            while !Task.isCancelled {
                var parser = EventStreamParser()
                var error: BelfryClientError
                do {
                    let token = try await api.tokenProvider.token(refresh: refresh)
                    var request = URLRequest(url: api.url("v1/me/stream"))
                    request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
                    request.setValue("text/event-stream", forHTTPHeaderField: "Accept")
                    request.timeoutInterval = 3600
                    if let lastEventID { request.setValue(lastEventID, forHTTPHeaderField: "Last-Event-ID") }
                    let (response, chunks) = try await api.transport.stream(for: request)
                    refresh = response.statusCode == 401
                    guard response.statusCode == 200 else {
                        throw BelfryClientError(
                            code: refresh ? .unauthorized : .invalidResponse,
                            message: "the stream answered HTTP \(response.statusCode)", status: response.statusCode)
                    }
                    failures = 0
                    continuation.yield(.connected)
                    var tokenExpired = false
                    chunks: for try await chunk in chunks {
                        for event in parser.feed(chunk) {
                            // The stream ends with its token: reconnect at once with a new one.
                            if event.event == "token_expired" {
                                tokenExpired = true
                                break chunks
                            }
                            if let update = Self.update(from: event) { continuation.yield(update) }
                        }
                        lastEventID = parser.lastEventID ?? lastEventID
                    }
                    if tokenExpired {
                        lastEventID = parser.lastEventID ?? lastEventID
                        refresh = true
                        if token != expiredToken {
                            expiredToken = token
                            continue
                        }
                        throw BelfryClientError(
                            code: .unauthorized, message: "the token provider gave the expired token again", status: 401
                        )
                    }
                    error = BelfryClientError(code: .network, message: "the stream ended")
                } catch let failure as BelfryClientError {
                    error = failure
                } catch let other {
                    if Task.isCancelled { break }
                    error = BelfryClientError(
                        code: .network, message: "the stream failed: \(other.localizedDescription)",
                        underlying: other)
                }
                lastEventID = parser.lastEventID ?? lastEventID
                if Task.isCancelled { break }
                failures += 1
                let ceiling = min(maxReconnectDelay, pow(2, Double(failures - 1)))
                let delay =
                    parser.retry.map { max($0, ceiling / 2) } ?? ceiling / 2 + Double.random(in: 0...(ceiling / 2))
                continuation.yield(.disconnected(error, retryIn: delay))
                do {
                    try await api.clock.sleep(for: delay)
                } catch {
                    break
                }
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }

    static func update(from event: ServerSentEvent) -> InboxUpdate? {
        let data = Data(event.data.utf8)
        switch InboxStreamEvent(rawValue: event.event) {
        case .counts:
            return (try? BelfryAPI.decoder.decode(InboxCounts.self, from: data)).map(InboxUpdate.counts)
        case .notificationCreated:
            return (try? BelfryAPI.decoder.decode(InboxNotification.self, from: data)).map(InboxUpdate.created)
        case .notificationUpdated:
            return (try? BelfryAPI.decoder.decode(InboxNotification.self, from: data)).map(InboxUpdate.updated)
        case .preferencesUpdated:
            struct Changed: Decodable {
                var tenant: String?
                var etag: String
            }
            return (try? JSONDecoder().decode(Changed.self, from: data)).map {
                .preferencesUpdated(tenant: $0.tenant, etag: $0.etag)
            }
        case nil:
            return nil
        }
    }
}
