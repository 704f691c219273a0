import AsyncHTTPClient
import BelfryCore
import BelfryTestSupport
import Foundation
import NIOCore
import Testing
import Vapor

@testable import BelfryServer

/// Reads server-sent events from a live stream.
final class EventStreamReader {
    struct Event: Equatable {
        var id: String?
        var name: String
        var data: String
    }

    private var iterator: HTTPClientResponse.Body.AsyncIterator
    private var pending = ""

    init(_ response: HTTPClientResponse) {
        iterator = response.body.makeAsyncIterator()
    }

    /// The next event (comments such as heartbeats are skipped).
    func next() async throws -> Event? {
        while true {
            if let end = pending.range(of: "\n\n") {
                let block = String(pending[..<end.lowerBound])
                pending.removeSubrange(..<end.upperBound)
                var event = Event(id: nil, name: "message", data: "")
                var hasField = false
                for line in block.split(separator: "\n") where !line.hasPrefix(":") {
                    let parts = line.split(separator: ":", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
                    guard parts.count == 2 else { continue }
                    hasField = true
                    switch parts[0] {
                    case "id": event.id = parts[1]
                    case "event": event.name = parts[1]
                    case "data": event.data = parts[1]
                    default: break
                    }
                }
                if hasField && !(event.name == "message" && event.data.isEmpty) { return event }
                continue
            }
            guard let buffer = try await iterator.next() else { return nil }
            pending += String(buffer: buffer)
        }
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

    @Test(
        "a new notification and the new counts reach an open stream within a second", arguments: TestDatabase.allCases)
    func liveDelivery(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            try await app.server.start(address: .hostname("127.0.0.1", port: 0))
            let port = try #require(app.http.server.shared.localAddress?.port)
            let client = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
            do {
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

                let refused = try await client.execute(
                    HTTPClientRequest(url: "http://127.0.0.1:\(port)/v1/me/stream?token=nonsense"),
                    timeout: .seconds(10))
                #expect(refused.status == .unauthorized)
            } catch {
                try? await client.shutdown()
                await app.server.shutdown()
                throw error
            }
            try await client.shutdown()
            await app.server.shutdown()
        }
    }
}
