import BelfryCore
import BelfryTestSupport
import Foundation
import Testing

@testable import BelfryClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Issue 37's end-to-end cases against a real `belfry serve`: an action answered on a delivered
/// notification while offline reaches the app's webhook exactly once, and a read on one client
/// clears the notification from another's Notification Center.
@MainActor
@Suite("BelfryClient delivered notifications against a live server", .serialized)
struct DeliveredEndToEndTests {
    /// The webhook receiver the server tests use (Python, checking signatures on its own).
    final class Receiver: Sendable {
        static let secret = "webhook-secret-0123456789"
        let process: BackgroundProcess
        let url: String
        let log: String

        init() async throws {
            let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
                .appendingPathComponent("../BelfryServerTests/Support/webhook_receiver.py").standardized.path
            log = FileManager.default.temporaryDirectory.appendingPathComponent("belfry-sdk-hook-\(UUID()).jsonl").path
            process = try BackgroundProcess("/usr/bin/env", ["python3", script, Self.secret, "200", log])
            let output = try await process.waitForOutput(containing: "listening ")
            let port = try #require(output.firstMatch(of: /listening (\d+)/)).output.1
            url = "http://127.0.0.1:\(port)/hooks/belfry"
        }

        /// The bodies received, each as JSON.
        func bodies() -> [[String: Any]] {
            guard let text = try? String(contentsOfFile: log, encoding: .utf8) else { return [] }
            return text.split(separator: "\n").compactMap {
                (try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])?["body"] as? [String: Any]
            }
        }

        func stop() {
            process.terminate()
            try? FileManager.default.removeItem(atPath: log)
        }
    }

    /// The system transport, cut off while `offline` is on, as a phone in a tunnel is.
    final class Cutoff: HTTPTransport {
        let offline = Switch()
        let inner = URLSessionTransport()

        func data(for request: URLRequest) async throws -> (Data, HTTPURLResponse) {
            if offline.isOn { throw URLError(.notConnectedToInternet) }
            return try await inner.data(for: request)
        }

        func stream(for request: URLRequest) async throws -> (HTTPURLResponse, AsyncThrowingStream<Data, any Error>) {
            if offline.isOn { throw URLError(.notConnectedToInternet) }
            return try await inner.stream(for: request)
        }
    }

    static func tokens(_ server: EndToEndTests.Server, _ user: String) -> ClosureTokenProvider {
        ClosureTokenProvider { _ in
            let data = try await server.admin("POST", "v1/users/\(user)/tokens")
            return try BelfryAPI.decoder.decode(TokenGrant.self, from: data).token
        }
    }

    @Test("an action answered while offline reaches the webhook exactly once after reconnecting")
    func offlineAnswer() async throws {
        let receiver = try await Receiver()
        defer { receiver.stop() }
        try await EndToEndTests.withServer(environment: [
            "BELFRY_WEBHOOK_URL": receiver.url, "BELFRY_WEBHOOK_SECRET": Receiver.secret,
        ]) { server in
            _ = try await server.client(for: "ada")  // creates her
            let transport = Cutoff()
            let clock = ManualClock()
            let belfry = BelfryClient(
                baseURL: server.base, tokenProvider: Self.tokens(server, "ada"), transport: transport, clock: clock,
                store: InMemoryKeyValueStore())
            _ = try await belfry.notificationCategories()
            try await server.admin(
                "POST", "v1/events",
                #"{"category": "edit-user-talk", "recipients": ["ada"], "content": {"title": "New message", "body": "Hi"}}"#
            )
            var page = InboxPage(notifications: [], nextCursor: nil)
            try await EndToEndTests.eventually("the notification") {
                page = try await belfry.inbox.list()
                return !page.notifications.isEmpty
            }
            let item = try #require(page.notifications.first)
            // The push as the app gets it: APNs names the category only.
            let delivered = try #require(
                DeliveredNotification(apnsUserInfo: [
                    "aps": ["alert": ["title": "New message", "body": "Hi"], "category": "edit-user-talk"],
                    "belfry": ["notification_id": item.id.uuidString.lowercased(), "tenant": "enwiki"],
                ]))

            transport.offline.isOn = true
            let request = belfry.opened.opened(delivered, actionIdentifier: "mark-read")
            #expect(request == .actionAnswered(actionID: "mark-read"), "\"Mark as read\" does not open the app")
            for _ in 0..<6 {
                while clock.sleeperCount == 0 { await Task.yield() }
                await clock.advance(by: 5)
            }
            #expect(belfry.opened.waiting.count == 1, "kept while offline")

            transport.offline.isOn = false
            while !belfry.opened.waiting.isEmpty {
                if clock.sleeperCount > 0 { await clock.advance(by: 60) }
                await Task.yield()
            }
            await belfry.opened.flush()
            // The same answer again, from a second device: the server records one answer only.
            let second = try await server.client(for: "ada")
            second.opened.opened(delivered, actionIdentifier: "mark-read")
            await second.opened.flush()

            func actions() -> [[String: Any]] {
                receiver.bodies().filter { $0["type"] as? String == "notification.action" }
            }
            try await EndToEndTests.eventually("the webhook's notification.action") { !actions().isEmpty }
            try await Task.sleep(nanoseconds: 1_500_000_000)  // time for a repeat to arrive, were there one
            let answers = actions()
            #expect(answers.count == 1)
            #expect((answers.first?["action"] as? [String: Any])?["id"] as? String == "mark-read")
            let answered = (answers.first?["notification"] as? [String: Any])?["id"] as? String
            #expect(answered.flatMap(UUID.init(uuidString:)) == item.id)
            #expect(try await belfry.inbox.counts().unread == 0, "the answer marked it read")
        }
    }

    @Test("a read on a second client removes the notification from the first client's delivered list")
    func readElsewhere() async throws {
        try await EndToEndTests.withServer { server in
            let phone = try await server.client(for: "ada")
            let laptop = try await server.client(for: "ada")
            let center = InMemoryNotificationScheduler()
            let reconciler = DeliveredReconciler(scheduler: center)
            var updates = phone.inbox.updates().makeAsyncIterator()
            #expect(await updates.next() == .connected)
            #expect(await updates.next() == .counts(InboxCounts(unread: 0, unseen: 0)))
            try await server.admin(
                "POST", "v1/events",
                #"{"category": "mention", "recipients": ["ada"], "content": {"title": "Live", "body": "b"}}"#)
            guard case .created(let item) = await updates.next() else {
                Issue.record("expected notification.created")
                return
            }
            // The push reached the phone's Notification Center.
            await center.deliver(
                ScheduledNotification(
                    identifier: "apns-\(item.id)", title: item.title, body: item.body, fireDate: Date(),
                    showing: [.alert], userInfo: ["belfry": .object(["notification_id": .string(item.id.uuidString)])]))
            if let counts = await updates.next() { await reconciler.apply(counts) }
            #expect(await center.badge == 1)

            _ = try await laptop.inbox.markRead(item.id)
            // One stream event: the notification, read.
            let event = try #require(await updates.next())
            guard case .updated(let read) = event, read.id == item.id, read.readAt != nil else {
                Issue.record("expected notification.updated, got \(event)")
                return
            }
            #expect(await reconciler.apply(event) == ["apns-\(item.id)"])
            #expect(await center.delivered().isEmpty)
            if let counts = await updates.next() { await reconciler.apply(counts) }
            #expect(await center.badge == 0)
        }
    }
}
