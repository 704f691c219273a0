import AsyncHTTPClient
import BelfryCore
import BelfryTestSupport
import Foundation
import NIOCore
import NIOPosix
import Testing

/// Two `belfry serve` processes on one PostgreSQL database: a stream held by one hears of
/// changes made through the other.
@Suite("Inbox streams across instances", .serialized)
struct InboxRelayTests {
    struct Instance {
        var process: BackgroundProcess
        var base: String
        var port: Int
    }

    static func start(_ url: String, key: String, _ extra: [String] = []) async throws -> Instance {
        let server = try await BelfryServeProcess.start(
            database: url, environment: ["BELFRY_API_KEY": key, "DATABASE_URL": "", "BELFRY_CONFIG": ""],
            arguments: extra, readyLine: "listening for other instances' inbox changes")
        return Instance(process: server.process, base: server.base, port: server.port)
    }

    @Test("a stream on an API-only instance receives what another instance's fan-out and API calls changed")
    func twoInstances() async throws {
        try await withTestStorage(.postgres) { location in
            guard case .postgres(let url) = location else { return }
            let key = "relay-test-key-0123456789abcdef"
            // The first instance runs the workers and migrates; the second serves API and streams only.
            let worker = try await Self.start(url, key: key)
            defer { worker.process.terminate() }
            let front = try await Self.start(url, key: key, ["--no-workers"])
            defer { front.process.terminate() }
            #expect(front.process.output.contains("workers:  off (--no-workers)"))

            let client = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
            do {
                let put = try await CommandLineTests.request(
                    "PUT", "\(front.base)/v1/users/ada", bearer: key, json: "{}")
                #expect(put.status == 201 || put.status == 200, "\(put.body)")
                let minted = try await CommandLineTests.request(
                    "POST", "\(front.base)/v1/users/ada/tokens", bearer: key, json: "{}")
                let ada = try JSONDecoder.iso8601.decode(TokenGrant.self, from: Data(minted.body.utf8)).token
                var request = HTTPClientRequest(url: "\(front.base)/v1/me/stream")
                request.headers.add(name: "Authorization", value: "Bearer \(ada)")
                let response = try await client.execute(request, timeout: .seconds(60))
                #expect(response.status == .ok)
                let stream = EventStreamReader(response)
                #expect(try await stream.next()?.data == #"{"unread":0,"unseen":0}"#)

                // Accepted by the front; fanned out by the worker instance, which alone runs workers.
                let event =
                    #"{"category": "mention", "recipients": ["ada", "bob"], "content": {"title": "Across", "body": "b"}}"#
                let accepted = try await CommandLineTests.request(
                    "POST", "\(front.base)/v1/events", bearer: key, json: event)
                #expect(accepted.status == 202, "\(accepted.body)")
                let created = try await stream.next()
                #expect(created?.name == "notification.created")
                #expect(created?.data.contains(#""title":"Across""#) == true)
                let counts = try await stream.next()
                #expect(counts?.name == "counts")
                #expect(counts?.data == #"{"unread":1,"unseen":1}"#)

                // Read through the worker instance (another device of ada's, on another instance).
                let page = try await CommandLineTests.request(
                    "GET", "\(worker.base)/v1/me/notifications", bearer: ada)
                let item = try #require(
                    try JSONDecoder.iso8601.decode(InboxPage.self, from: Data(page.body.utf8)).notifications.first)
                let read = try await CommandLineTests.request(
                    "POST", "\(worker.base)/v1/me/notifications/\(item.id)/read", bearer: ada)
                #expect(read.status == 200, "\(read.body)")
                let updated = try await stream.next()
                #expect(updated?.name == "notification.updated")
                #expect(updated?.data.contains(#""read_at":"#) == true)
                #expect(try await stream.next()?.data == #"{"unread":0,"unseen":0}"#)

                let unread = try await CommandLineTests.request(
                    "POST", "\(worker.base)/v1/me/notifications/\(item.id)/unread", bearer: ada)
                #expect(unread.status == 200)
                #expect(try await stream.next()?.name == "notification.updated")
                #expect(try await stream.next()?.data == #"{"unread":1,"unseen":0}"#)
                let all = try await CommandLineTests.request(
                    "POST", "\(worker.base)/v1/me/notifications/read-all", bearer: ada)
                #expect(all.status == 200)
                let afterAll = try await stream.next()
                #expect(afterAll?.name == "counts")
                #expect(afterAll?.data == #"{"unread":0,"unseen":0}"#)

                let changed = try await CommandLineTests.request(
                    "PATCH", "\(worker.base)/v1/me/preferences/categories/mention", bearer: ada,
                    json: #"{"preference": "opt_out"}"#)
                #expect(changed.status == 200, "\(changed.body)")
                let preferences = try await stream.next()
                #expect(preferences?.name == "preferences.updated")
                #expect(preferences?.data.contains(#""tenant":"enwiki""#) == true)

                // The listening connections are cut: the front reconnects, sends fresh counts (what
                // was signalled meanwhile is gone), and hears the other instance's changes again.
                try await PostgresTestServer.shared.psql(
                    url,
                    """
                    SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                    WHERE datname = current_database() AND query LIKE 'LISTEN%'
                    """)
                let resync = try await stream.next()
                #expect(resync?.name == "counts")
                #expect(resync?.data == #"{"unread":0,"unseen":0}"#)
                let again = try await CommandLineTests.request(
                    "POST", "\(worker.base)/v1/me/notifications/\(item.id)/unread", bearer: ada)
                #expect(again.status == 200)
                #expect(try await stream.next()?.name == "notification.updated")
                #expect(try await stream.next()?.data == #"{"unread":1,"unseen":0}"#)

                // Events accepted together are fanned out together, and told in one statement of
                // several messages: each one's notification reaches the stream.
                try await withThrowingTaskGroup(of: Int.self) { group in
                    for index in 0..<4 {
                        group.addTask {
                            let body =
                                #"{"category": "edit-user-talk", "recipients": ["ada"], "#
                                + #""content": {"title": "Batch \#(index)", "body": "b"}}"#
                            return try await CommandLineTests.request(
                                "POST", "\(front.base)/v1/events", bearer: key, json: body
                            ).status
                        }
                    }
                    for try await status in group { #expect(status == 202) }
                }
                var titles: Set<String> = []
                for _ in 0..<8 {
                    let next = try #require(try await stream.next())
                    guard next.name == "notification.created" else { continue }
                    let item = try JSONDecoder.iso8601.decode(InboxNotification.self, from: Data(next.data.utf8))
                    titles.insert(item.title)
                }
                #expect(titles == Set((0..<4).map { "Batch \($0)" }))
            } catch {
                try? await client.shutdown()
                throw error
            }
            try await client.shutdown()
        }
    }
}
