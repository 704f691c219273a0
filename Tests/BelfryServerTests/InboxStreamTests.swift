import AsyncHTTPClient
import BelfryCore
import BelfryTestSupport
import Foundation
import NIOCore
import Testing
import Vapor

@testable import BelfryClient
@testable import BelfryServer

/// Reads server-sent events from a live stream. Used by one test task at a time.
final class EventStreamReader: @unchecked Sendable {
    struct Event: Equatable {
        var id: String?
        var name: String
        var data: String
    }

    private var iterator: HTTPClientResponse.Body.AsyncIterator
    /// The SDK's parser, so the server is read as apps read it.
    private var parser = EventStreamParser()
    private var ready: [ServerSentEvent] = []

    init(_ response: HTTPClientResponse) {
        iterator = response.body.makeAsyncIterator()
    }

    /// The next event (comments such as heartbeats are skipped); fails when none comes within
    /// `seconds`, so a missing event fails the test instead of hanging it.
    func next(within seconds: Double = 20) async throws -> Event? {
        try await withThrowingTaskGroup(of: Event?.self) { group in
            group.addTask { try await self.nextEvent() }
            group.addTask {
                try await Task.sleep(for: .seconds(seconds))
                throw TestFailure("no server-sent event within \(seconds) s")
            }
            defer { group.cancelAll() }
            return try await group.next() ?? nil
        }
    }

    private func nextEvent() async throws -> Event? {
        while ready.isEmpty {
            guard let buffer = try await iterator.next() else { return nil }
            ready += parser.feed(Data(buffer.readableBytesView))
        }
        let event = ready.removeFirst()
        return Event(id: event.id, name: event.event, data: event.data)
    }
}

@Suite("Inbox live stream", .serialized)
struct InboxStreamTests {
    static func open(
        _ port: Int, token: String, lastEventID: String? = nil, client: HTTPClient
    ) async throws
        -> (HTTPClientResponse, EventStreamReader)
    {
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)/v1/me/stream?token=\(token)")
        if let lastEventID { request.headers.add(name: "Last-Event-ID", value: lastEventID) }
        let response = try await client.execute(request, timeout: .seconds(60))
        return (response, EventStreamReader(response))
    }

    /// Serves `app` on a free port for `body`, with a client; both are shut down afterwards.
    static func serving(_ app: Application, _ body: (Int, HTTPClient) async throws -> Void) async throws {
        try await app.server.start(address: .hostname("127.0.0.1", port: 0))
        let client = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
        do {
            try await body(try #require(app.http.server.shared.localAddress?.port), client)
        } catch {
            try? await client.shutdown()
            await app.server.shutdown()
            throw error
        }
        try await client.shutdown()
        await app.server.shutdown()
    }

    @Test("a stream ends when its token expires, saying so; the token then opens nothing")
    func tokenExpiry() async throws {
        try await withBelfry(.sqlite) { app in
            try await Self.serving(app) { port, client in
                _ = try await app.userToken("ada")
                let user = try #require(try await UserModel.query(on: app.db).first())
                let minted = try await app.belfry.tokens.mint(
                    userID: try user.requireID(), externalID: "ada", now: Date(), lifetime: 5)
                let (response, stream) = try await Self.open(port, token: minted.token, client: client)
                #expect(response.status == .ok)
                #expect(try await stream.next()?.name == "counts")
                let expired = try await stream.next(within: 10)
                #expect(expired?.name == "token_expired")
                #expect(expired?.data.contains("expired_at") == true)
                #expect(try await stream.next(within: 10) == nil, "the stream ended")
                let (again, _) = try await Self.open(port, token: minted.token, client: client)
                #expect(again.status == .unauthorized)
            }
        }
    }

    @Test(
        "a new notification and the new counts reach an open stream within a second", arguments: TestDatabase.allCases)
    func liveDelivery(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            try await Self.serving(app) { port, client in
                let ada = try await app.userToken("ada")
                let (response, stream) = try await Self.open(port, token: ada, client: client)
                #expect(response.status == .ok)
                #expect(response.headers.first(name: "Content-Type") == "text/event-stream")
                let first = try await stream.next()
                #expect(first?.name == "counts")
                #expect(first?.data == #"{"unread":0,"unseen":0}"#)

                try await InboxAPITests.notify(app, ["ada", "bob"], title: "Live")
                let created = try await stream.next()
                let counts = try await stream.next()
                #expect(created?.name == "notification.created")
                #expect(created?.data.contains(#""title":"Live""#) == true)
                #expect(counts?.name == "counts")
                #expect(counts?.data == #"{"unread":1,"unseen":1}"#)

                // Reading it on another device updates this one.
                let item = try #require(try await InboxAPITests.page(app, ada).notifications.first)
                #expect(try await app.send(.POST, "/v1/me/notifications/\(item.id)/read", bearer: ada).status == .ok)
                #expect(try await stream.next()?.name == "notification.updated")
                let afterRead = try await stream.next()
                #expect(afterRead?.data == #"{"unread":0,"unseen":0}"#)

                // A preference change on another device.
                #expect(
                    try await app.send(
                        .PATCH, "/v1/me/preferences/categories/mention", bearer: ada, json: ["preference": "opt_out"]
                    ).status == .ok)
                let preferences = try await stream.next()
                #expect(preferences?.name == "preferences.updated")
                #expect(preferences?.data.contains(#""tenant":"enwiki""#) == true)

                // A client that reconnects with Last-Event-ID gets what it missed, in order.
                let (_, replay) = try await Self.open(port, token: ada, lastEventID: created?.id, client: client)
                #expect(try await replay.next()?.name == "counts")
                #expect(try await replay.next()?.id == counts?.id)
                #expect(try await replay.next()?.name == "notification.updated")

                // An id another instance gave replays nothing here: fresh counts, then only what comes next.
                let (_, elsewhere) = try await Self.open(port, token: ada, lastEventID: "0000abcd-1", client: client)
                #expect(try await elsewhere.next()?.name == "counts")
                #expect(try await app.send(.POST, "/v1/me/notifications/\(item.id)/unread", bearer: ada).status == .ok)
                #expect(try await elsewhere.next()?.name == "notification.updated")

                let refused = try await client.execute(
                    HTTPClientRequest(url: "http://127.0.0.1:\(port)/v1/me/stream?token=nonsense"),
                    timeout: .seconds(10))
                #expect(refused.status == .unauthorized)
            }
        }
    }

    @Test(
        "a stream's first counts match the inbox; an erased user's token opens nothing; the token is read as a form",
        arguments: TestDatabase.allCases)
    func opening(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            try await Self.serving(app) { port, client in
                let ada = try await app.userToken("ada")
                let bob = try await app.userToken("bob")
                try await InboxAPITests.notify(app, ["ada"], title: "One")
                try await InboxAPITests.notify(app, ["ada"], title: "Two")
                let page = try await InboxAPITests.page(app, ada)
                let read = try #require(page.notifications.first(where: { $0.title == "Two" }))
                #expect(try await app.send(.POST, "/v1/me/notifications/\(read.id)/read", bearer: ada).status == .ok)

                // The last value of `token` counts, as with Vapor's form decoder; `tokens` is another
                // parameter; names and values are percent-decoded (a token has two ".").
                #expect(ada.filter { $0 == "." }.count == 2)
                let escaped = ada.replacingOccurrences(of: ".", with: "%2E")
                let request = HTTPClientRequest(
                    url: "http://127.0.0.1:\(port)/v1/me/stream?tokens=x&token=nonsense&%74oken=\(escaped)")
                let response = try await client.execute(request, timeout: .seconds(60))
                #expect(response.status == .ok)
                let counts = try await EventStreamReader(response).next()
                #expect(counts?.name == "counts")
                #expect(counts?.data == #"{"unread":1,"unseen":1}"#, "reading one also saw it")
                let (fresh, freshStream) = try await Self.open(port, token: bob, client: client)
                #expect(fresh.status == .ok)
                #expect(try await freshStream.next()?.data == #"{"unread":0,"unseen":0}"#)

                #expect(try await app.send(.DELETE, "/v1/users/bob", bearer: testAPIKey).status == .noContent)
                let openBefore = app.belfry.inboxHub.openStreams
                let gone = try await client.execute(
                    HTTPClientRequest(url: "http://127.0.0.1:\(port)/v1/me/stream?token=\(bob)"), timeout: .seconds(60))
                #expect(gone.status == .unauthorized)
                let body = try await gone.body.collect(upTo: 4096)
                #expect(String(buffer: body).contains("the user of this token no longer exists"))
                #expect(app.belfry.inboxHub.openStreams == openBefore, "the refused stream left the hub")
            }
        }
    }

    @Test("a notification scheduled for later is streamed when it becomes due")
    func scheduledBecomesDue() async throws {
        // 2027-03-01 09:30 UTC; ada's notification is due at 10:00 her time (UTC, as Belfry does
        // not know her zone). Half an hour later her stream's token (an hour) is still valid: the
        // hub checks expiry against this clock every second, and an expired token would end the
        // stream before the notification, as it did once on a slow machine.
        let clock = TestClock(Date(timeIntervalSince1970: 1_803_893_400))
        try await withBelfry(.sqlite, clock: clock) { app in
            try await Self.serving(app) { port, client in
                let ada = try await app.userToken("ada")
                let (_, stream) = try await Self.open(port, token: ada, client: client)
                #expect(try await stream.next()?.name == "counts")
                try await InboxAPITests.notify(
                    app, ["ada"], title: "At ten", schedule: .init(calendar: CalendarRule(hour: 10)))
                try await app.deliveryQueue?.runOnce()
                #expect(try await InboxAPITests.page(app, ada).notifications.isEmpty, "not due yet")

                clock.advance(by: 30 * 60)
                #expect(try await app.deliveryQueue?.runOnce() == 1)
                let created = try await stream.next()
                #expect(created?.name == "notification.created")
                #expect(created?.data.contains(#""title":"At ten""#) == true)
                let counts = try await stream.next()
                #expect(counts?.name == "counts")
                #expect(counts?.data == #"{"unread":1,"unseen":1}"#)
            }
        }
    }

    @Test("a client that stops reading loses its stream, not the server's memory; the others go on")
    func slowReaderEnds() async throws {
        try await withBelfry(.sqlite) { app in
            try await Self.serving(app) { port, client in
                let ada = try await app.userToken("ada")
                let bob = try await app.userToken("bob")
                let (_, stalled) = try await Self.open(port, token: ada, client: client)
                let (_, reading) = try await Self.open(port, token: bob, client: client)
                #expect(try await stalled.next()?.name == "counts")
                #expect(try await reading.next()?.name == "counts")
                let hub = app.belfry.inboxHub
                let users = try await UserModel.query(on: app.db).all()
                let adaID = try #require(users.first { $0.externalID == "ada" }?.id)
                let bobID = try #require(users.first { $0.externalID == "bob" }?.id)
                #expect(hub.openStreams == 2)

                // Ada's client reads nothing more: 64 KiB events pile up in the sockets until
                // the stream has more writes waiting than its bound, and ends.
                let big = String(repeating: "x", count: 64 * 1024)
                var published = 0
                while hub.openStreams == 2 && published < 4 * InboxHub.bufferPerStream {
                    hub.publish(to: adaID, [(name: "notification.created", data: "\"\(big)\"")])
                    published += 1
                    try await Task.sleep(for: .milliseconds(2))
                }
                try await waitUntil { hub.openStreams == 1 }
                #expect(published > InboxHub.bufferPerStream, "the socket took some before writes waited")
                #expect(published < 4 * InboxHub.bufferPerStream)

                // Bob's stream is untouched.
                hub.publish(to: bobID, [(name: "notification.created", data: "{}")])
                #expect(try await reading.next()?.name == "notification.created")
            }
        }
    }

    /// Polls `condition` every 50 ms for up to 10 s.
    private func waitUntil(_ condition: () -> Bool) async throws {
        for _ in 0..<200 where !condition() {
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(condition())
    }

    @Test("a relayed message written by hand decodes as the encoder's does, and is known by its origin")
    func relayedMessageText() throws {
        let origin = UUID()
        let signals: [InboxSignal] = [
            .created(event: UUID(), users: []), .created(event: UUID(), users: [UUID()]),
            .created(event: UUID(), users: (0..<InboxEvents.usersPerMessage).map { _ in UUID() }),
            .updated(user: UUID(), notification: UUID()), .counts(user: UUID()),
            .preferences(user: UUID(), tenant: "frwiki", etag: "\"3\""),
        ]
        let encoder = JSONEncoder()
        for signal in signals {
            let payload = try InboxEvents.Message(origin: origin, signal: signal).payload(encoder)
            let decoded = try JSONDecoder().decode(InboxEvents.Message.self, from: Data(payload.utf8))
            #expect(decoded.signal == signal && decoded.origin == origin)
            let byEncoder = try JSONDecoder().decode(InboxSignal.self, from: encoder.encode(signal))
            let byHand = try JSONDecoder().decode(
                InboxSignal.self, from: Data(try InboxEvents.Message.text(of: signal, encoder).utf8))
            #expect(byHand == byEncoder)
            #expect(InboxEvents.Message.sentBy(origin, payload) && !InboxEvents.Message.sentBy(UUID(), payload))
            #expect(payload.utf8.count < 8_000, "under NOTIFY's limit")
        }
    }
}
