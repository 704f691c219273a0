import BelfryCore
import Foundation
import Testing

@testable import BelfryClient

@Suite("BelfryClient event stream parser")
struct EventStreamParserTests {
    @Test("events split across chunks at any byte arrive whole")
    func chunked() {
        let text =
            "retry: 3000\nevent: counts\ndata: {\"unread\":1,\"unseen\":1}\n\nid: a-2\nevent: notification.created\ndata: {}\n\n"
        let bytes = Array(text.utf8)
        for size in [1, 2, 7, bytes.count] {
            var parser = EventStreamParser()
            var events: [ServerSentEvent] = []
            for start in stride(from: 0, to: bytes.count, by: size) {
                events += parser.feed(Data(bytes[start..<min(start + size, bytes.count)]))
            }
            #expect(
                events == [
                    ServerSentEvent(id: nil, event: "counts", data: #"{"unread":1,"unseen":1}"#),
                    ServerSentEvent(id: "a-2", event: "notification.created", data: "{}"),
                ], "chunks of \(size)")
            #expect(parser.lastEventID == "a-2")
            #expect(parser.retry == 3)
        }
    }

    @Test("comments (heartbeats) are skipped; CRLF line ends and multi-line data are read")
    func format() {
        var parser = EventStreamParser()
        let events = parser.feed(
            Data(": heartbeat\r\n\r\nevent: x\r\ndata: one\r\ndata: two\r\n\r\ndata:no space\n\n".utf8))
        #expect(
            events == [
                ServerSentEvent(id: nil, event: "x", data: "one\ntwo"),
                ServerSentEvent(id: nil, event: "message", data: "no space"),
            ])
    }

    @Test("stream events become inbox updates; unknown or malformed ones are ignored")
    func updates() {
        #expect(
            Inbox.update(from: .init(event: "counts", data: #"{"unread":2,"unseen":0}"#))
                == .counts(InboxCounts(unread: 2, unseen: 0)))
        #expect(
            Inbox.update(from: .init(event: "preferences.updated", data: #"{"tenant":"dewiki","etag":"\"e\""}"#))
                == .preferencesUpdated(tenant: "dewiki", etag: "\"e\""))
        #expect(Inbox.update(from: .init(event: "counts", data: "nonsense")) == nil)
        #expect(Inbox.update(from: .init(event: "something.new", data: "{}")) == nil)
    }
}

@MainActor
@Suite("BelfryClient inbox and bell")
struct InboxTests {
    let clock = ManualClock()

    func client(_ transport: FakeTransport, tokens: any TokenProvider = CountingTokens()) -> BelfryClient {
        BelfryClient(
            baseURL: URL(string: "https://belfry.test")!, tokenProvider: tokens, transport: transport,
            clock: clock, store: InMemoryKeyValueStore())
    }

    static let item = InboxNotification(
        id: UUID(), category: "mention", tenant: "enwiki", title: "Hi", body: "b", url: nil, data: nil, actions: [],
        createdAt: Date(timeIntervalSince1970: 1_800_000_000), seenAt: nil, readAt: nil, archivedAt: nil)

    @Test("list, counts and marks use the inbox routes with their parameters")
    func routes() async throws {
        let item = Self.item
        let transport = FakeTransport { request in
            switch request.path {
            case "/v1/me/notifications":
                (200, [:], Fixtures.json(InboxPage(notifications: [item], nextCursor: "c2")))
            case "/v1/me/notifications/counts":
                (200, [:], Data(#"{"unread":4,"unseen":2}"#.utf8))
            case "/v1/me/notifications/read-all":
                (200, [:], Data(#"{"updated":4,"counts":{"unread":0,"unseen":0}}"#.utf8))
            default:
                (200, [:], Fixtures.json(item))
            }
        }
        let inbox = client(transport).inbox
        let page = try await inbox.list(status: .unread, limit: 5, cursor: "c1", tenant: "enwiki")
        #expect(page.notifications.map(\.id) == [item.id])
        #expect(page.nextCursor == "c2")
        #expect(
            transport.requests[0].query == ["status": "unread", "limit": "5", "cursor": "c1", "tenant": "enwiki"])
        #expect(try await inbox.counts() == InboxCounts(unread: 4, unseen: 2))
        _ = try await inbox.markRead(item.id)
        _ = try await inbox.markSeen(item.id)
        _ = try await inbox.archive(item.id)
        #expect(try await inbox.markAllRead(category: "mention") == InboxCounts(unread: 0, unseen: 0))
        let id = item.id.uuidString.lowercased()
        #expect(
            transport.requests.dropFirst(2).map { "\($0.method) \($0.path)" } == [
                "POST /v1/me/notifications/\(id)/read", "POST /v1/me/notifications/\(id)/seen",
                "POST /v1/me/notifications/\(id)/archive", "POST /v1/me/notifications/read-all",
            ])
        #expect(transport.requests.last?.query == ["category": "mention"])
    }

    @Test("updates: events as they come; after a loss it reconnects with backoff and Last-Event-ID")
    func liveUpdates() async throws {
        let transport = FakeTransport()
        let connections = Fixtures.Counter()
        transport.streamHandler = { _ in
            let (stream, continuation) = AsyncThrowingStream.makeStream(of: Data.self)
            if connections.next() == 1 {
                continuation.yield(Data("event: counts\ndata: {\"unread\":1,\"unseen\":1}\n\n".utf8))
                continuation.yield(Data("id: abc-7\nevent: counts\ndata: {\"unread\":2,\"unseen\":2}\n\n".utf8))
                continuation.finish(throwing: URLError(.networkConnectionLost))
            } else {
                continuation.yield(Data("event: counts\ndata: {\"unread\":0,\"unseen\":0}\n\n".utf8))
            }
            return (200, stream)
        }
        var updates = client(transport).inbox.updates().makeAsyncIterator()
        #expect(await updates.next() == .connected)
        #expect(await updates.next() == .counts(InboxCounts(unread: 1, unseen: 1)))
        #expect(await updates.next() == .counts(InboxCounts(unread: 2, unseen: 2)))
        guard case .disconnected(_, let delay) = await updates.next() else {
            Issue.record("expected a disconnect")
            return
        }
        #expect(delay >= 0.5 && delay <= 1, "the first wait is about a second")
        while clock.sleeperCount == 0 { await Task.yield() }
        await clock.advance(by: delay)
        #expect(await updates.next() == .connected)
        #expect(await updates.next() == .counts(InboxCounts(unread: 0, unseen: 0)))
        #expect(transport.requests.last?.header("Last-Event-ID") == "abc-7")
        #expect(transport.requests.last?.headers["Authorization"] == "Bearer t1")
    }

    @Test("a stream refused with 401 reconnects with a fresh token")
    func streamRefresh() async throws {
        let transport = FakeTransport()
        transport.streamHandler = { request in
            let (stream, continuation) = AsyncThrowingStream.makeStream(of: Data.self)
            if request.headers["Authorization"] == "Bearer t1" {
                continuation.finish()
                return (401, stream)
            }
            return (200, stream)
        }
        var updates = client(transport).inbox.updates().makeAsyncIterator()
        guard case .disconnected(let error, let delay) = await updates.next() else {
            Issue.record("expected a disconnect")
            return
        }
        #expect(error.status == 401)
        while clock.sleeperCount == 0 { await Task.yield() }
        await clock.advance(by: delay)
        #expect(await updates.next() == .connected)
        #expect(transport.requests.last?.headers["Authorization"] == "Bearer t2")
    }

    @Test("a stream that ends with its token reconnects at once with a fresh one, without a disconnect")
    func tokenExpiry() async throws {
        let transport = FakeTransport()
        let connections = Fixtures.Counter()
        transport.streamHandler = { _ in
            let (stream, continuation) = AsyncThrowingStream.makeStream(of: Data.self)
            if connections.next() == 1 {
                continuation.yield(Data("id: abc-3\nevent: counts\ndata: {\"unread\":1,\"unseen\":1}\n\n".utf8))
                continuation.yield(
                    Data("event: token_expired\ndata: {\"expired_at\":\"2026-11-23T15:00:00Z\"}\n\n".utf8))
                continuation.finish()
            } else {
                continuation.yield(Data("event: counts\ndata: {\"unread\":0,\"unseen\":0}\n\n".utf8))
            }
            return (200, stream)
        }
        var updates = client(transport).inbox.updates().makeAsyncIterator()
        #expect(await updates.next() == .connected)
        #expect(await updates.next() == .counts(InboxCounts(unread: 1, unseen: 1)))
        #expect(await updates.next() == .connected, "no disconnect and no wait in between")
        #expect(await updates.next() == .counts(InboxCounts(unread: 0, unseen: 0)))
        #expect(transport.requests.map { $0.headers["Authorization"] } == ["Bearer t1", "Bearer t2"])
        #expect(transport.requests.last?.header("Last-Event-ID") == "abc-3")
        #expect(clock.sleeperCount == 0)
    }

    @Test("a token provider that hands out the expired token again gets backoff, not a tight loop")
    func expiredAgain() async throws {
        let transport = FakeTransport()
        transport.streamHandler = { _ in
            let (stream, continuation) = AsyncThrowingStream.makeStream(of: Data.self)
            continuation.yield(Data("event: token_expired\ndata: {}\n\n".utf8))
            continuation.finish()
            return (200, stream)
        }
        let stale = ClosureTokenProvider { _ in "stale" }
        var updates = client(transport, tokens: stale).inbox.updates().makeAsyncIterator()
        #expect(await updates.next() == .connected)
        #expect(await updates.next() == .connected, "the first expiry reconnects at once")
        guard case .disconnected(let error, _) = await updates.next() else {
            Issue.record("expected a disconnect")
            return
        }
        #expect(error.status == 401)
    }

    @Test(
        "the bell in seed 001's four cases: feed on or off, unread or none",
        arguments: [(true, 3), (true, 0), (false, 3), (false, 0)])
    func bellCases(feed: Bool, unread: Int) async throws {
        let transport = FakeTransport { _ in (200, [:], Data(#"{"unread":\#(unread),"unseen":0}"#.utf8)) }
        let bell = BellBadgeModel(inbox: client(transport).inbox, isExploreFeedEnabled: feed)
        await bell.refresh()
        #expect(bell.placement == (feed ? .exploreFeed : .topBar))
        #expect(bell.showsBadge == (unread > 0))
        #expect(bell.badgeText == (unread > 0 ? "3" : nil))
        #expect(bell.accessibilityLabel == (unread > 0 ? "Notifications, 3 unread" : "Notifications"))
    }

    @Test("the badge follows the live counts, caps at 99+, and keeps its count when a refresh fails")
    func bellUpdates() async throws {
        let transport = FakeTransport { _ in (503, [:], Data()) }
        let bell = BellBadgeModel(inbox: client(transport).inbox)
        bell.apply(.counts(InboxCounts(unread: 1, unseen: 1)))
        #expect(bell.accessibilityLabel == "Notifications, 1 unread")
        bell.apply(.counts(InboxCounts(unread: 250, unseen: 0)))
        #expect(bell.badgeText == "99+")
        bell.apply(.created(Self.item))
        #expect(bell.unreadCount == 250, "only counts events set the count")
        await bell.refresh()
        #expect(bell.unreadCount == 250)
        #expect(bell.lastError?.status == 503)
        bell.isExploreFeedEnabled = false
        #expect(bell.placement == .topBar)
    }
}
