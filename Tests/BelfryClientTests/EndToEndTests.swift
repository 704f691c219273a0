import BelfryCore
import BelfryTestSupport
import Foundation
import Testing

@testable import BelfryClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The SDK against a real `belfry serve` on a free port, with a fresh SQLite file.
@MainActor
@Suite("BelfryClient against a live server", .serialized)
struct EndToEndTests {
    nonisolated static let key = "sdk-test-key-0123456789abcdef"

    final class Server: Sendable {
        let process: BackgroundProcess
        let base: URL
        let directory: URL

        /// - Parameter environment: more settings for the server (APNs, say).
        init(environment extra: [String: String] = [:]) async throws {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("belfry-sdk-\(UUID())")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let server = try await BelfryServeProcess.start(
                database: directory.appendingPathComponent("b.sqlite").path,
                environment: ["BELFRY_API_KEY": EndToEndTests.key, "DATABASE_URL": "", "BELFRY_CONFIG": ""]
                    .merging(extra) { _, new in new })
            process = server.process
            base = URL(string: server.base)!
        }

        func stop() {
            process.terminate()
            try? FileManager.default.removeItem(at: directory)
        }

        /// A backend call with the API key.
        @discardableResult
        func admin(_ method: String, _ path: String, _ json: String? = nil) async throws -> Data {
            guard let url = URL(string: path, relativeTo: base) else { throw TestFailure("bad path \(path)") }
            var request = URLRequest(url: url)
            request.httpMethod = method
            request.setValue("Bearer \(EndToEndTests.key)", forHTTPHeaderField: "Authorization")
            if let json {
                request.setValue("application/json", forHTTPHeaderField: "Content-Type")
                request.httpBody = Data(json.utf8)
            }
            let (data, response) = try await URLSession.shared.data(for: request)
            let status = (response as? HTTPURLResponse)?.statusCode ?? 0
            guard (200..<300).contains(status) else {
                throw TestFailure("\(method) \(path): \(status) \(String(decoding: data, as: UTF8.self))")
            }
            return data
        }

        /// A client for `user`, whose tokens the backend mints (again on refresh).
        @MainActor
        func client(for user: String, tenants: [String] = []) async throws -> BelfryClient {
            let list = tenants.map { "\"\($0)\"" }.joined(separator: ",")
            try await admin("PUT", "v1/users/\(user)", #"{"tenants": [\#(list)]}"#)
            let server = self
            let tokens = ClosureTokenProvider { _ in
                let data = try await server.admin("POST", "v1/users/\(user)/tokens")
                return try BelfryAPI.decoder.decode(TokenGrant.self, from: data).token
            }
            return BelfryClient(
                baseURL: base, tokenProvider: tokens, store: InMemoryKeyValueStore(), debounce: 0.2)
        }

        /// What the server has for `user` on `tenant`.
        func preferences(of user: String, tenant: String) async throws -> PreferenceData {
            try JSONDecoder().decode(
                PreferenceData.self, from: try await admin("GET", "v1/users/\(user)/preferences?tenant=\(tenant)"))
        }
    }

    static func withServer(
        environment: [String: String] = [:], _ body: (Server) async throws -> Void
    ) async throws {
        let server = try await Server(environment: environment)
        do {
            try await body(server)
        } catch {
            server.stop()
            throw error
        }
        server.stop()
    }

    /// Polls `condition` until it holds or 20 s pass (the server's workers run on their own time).
    static func eventually(_ what: String, _ condition: () async throws -> Bool) async throws {
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            if try await condition() { return }
            try await Task.sleep(nanoseconds: 50_000_000)
        }
        throw TestFailure("\(what) did not happen within 20 s")
    }

    @Test("preferences: read, optimistic updates, one coalesced write, refused items, confirmed by the server")
    func preferences() async throws {
        try await Self.withServer { server in
            let belfry = try await server.client(for: "ada")
            var confirmed: [PreferenceData] = []
            belfry.emitter.on(.preferencesUpdated) { confirmed.append($0) }
            let read = await belfry.preferences.getPreferences(args: .init(tenantId: "dewiki"))
            #expect(read.status == .success)
            #expect(read.body?.category("login-fail")?.isEditable == false)

            _ = await belfry.preferences.updateCategoryPreference(category: "mention", preference: .optOut)
            _ = await belfry.preferences.updateChannelPreferenceInCategory(
                channel: "email", preference: .optIn, category: "edit-user-talk")
            _ = await belfry.preferences.updateOverallChannelPreference(channel: "email", preference: .required)
            let refused = await belfry.preferences.updateCategoryPreference(category: "login-fail", preference: .optOut)
            #expect(refused.error?.code == .notEditable)
            #expect(belfry.preferences.data?.category("mention")?.preference == .optOut, "shown at once")

            try await Self.eventually("the write") { !confirmed.isEmpty }
            let stored = try await server.preferences(of: "ada", tenant: "dewiki")
            #expect(stored.category("mention")?.preference == .optOut)
            #expect(
                stored.category("edit-user-talk")?.channels?.first { $0.channel == "email" }?.preference == .optIn)
            #expect(stored.channelPreferences?.first { $0.channel == "email" }?.isRestricted == true)
            #expect(confirmed.last == stored)
            #expect(try await server.preferences(of: "ada", tenant: "enwiki").category("mention")?.preference == .optIn)
        }
    }

    @Test("per-site fan-out: a type toggle reaches four tenants; a new tenant gets the user's choices")
    func fourTenants() async throws {
        try await Self.withServer { server in
            let belfry = try await server.client(for: "grace", tenants: ["enwiki", "dewiki", "wikidata", "commons"])
            let sync = TenantPreferenceSync(client: belfry)
            await sync.start(tenants: ["enwiki", "dewiki", "wikidata"])
            try await sync.setCategory("edit-thank", .optOut)
            try await sync.setChannel("ios_push", in: "mention", .optOut)
            for tenant in ["enwiki", "dewiki", "wikidata"] {
                let stored = try await server.preferences(of: "grace", tenant: tenant)
                #expect(stored.category("edit-thank")?.preference == .optOut, "\(tenant)")
                #expect(stored.category("mention")?.channels?.first { $0.channel == "ios_push" }?.preference == .optOut)
            }
            #expect(
                try await server.preferences(of: "grace", tenant: "commons").category("edit-thank")?.preference
                    == .optIn)

            await sync.setTenants(["enwiki", "dewiki", "wikidata", "commons"])
            await sync.settled()
            #expect(sync.states["commons"] == .synced)
            let commons = try await server.preferences(of: "grace", tenant: "commons")
            #expect(commons.category("edit-thank")?.preference == .optOut, "copied to the new tenant")
            #expect(commons.category("mention")?.channels?.first { $0.channel == "ios_push" }?.preference == .optOut)
        }
    }

    @Test("inbox: a triggered notification is listed, counted, read, and answered with an action")
    func inbox() async throws {
        try await Self.withServer { server in
            let belfry = try await server.client(for: "linus")
            try await server.admin(
                "POST", "v1/events",
                #"{"category": "edit-user-talk", "recipients": ["linus"], "content": {"title": "New message", "body": "Hi"}}"#
            )
            var page = InboxPage(notifications: [], nextCursor: nil)
            try await Self.eventually("the notification") {
                page = try await belfry.inbox.list()
                return !page.notifications.isEmpty
            }
            let item = try #require(page.notifications.first)
            #expect(item.title == "New message")
            #expect(item.actions.map(\.id) == ["reply", "mark-read"])
            #expect(try await belfry.inbox.counts() == InboxCounts(unread: 1, unseen: 1))
            #expect(try await belfry.inbox.markSeen(item.id).seenAt != nil)
            #expect(try await belfry.inbox.counts() == InboxCounts(unread: 1, unseen: 0))
            let answered = try await belfry.inbox.respond(to: item.id, action: "mark-read")
            #expect(answered.readAt != nil)
            #expect(try await belfry.inbox.counts().unread == 0)
            do throws(BelfryClientError) {
                _ = try await belfry.inbox.respond(to: item.id, action: "nope")
                Issue.record("expected action_not_found")
            } catch {
                #expect(error.code.rawValue == "action_not_found")
                #expect(error.status == 404)
            }
            #expect(try await belfry.inbox.list(status: .unread).notifications.isEmpty)
            #expect(try await belfry.inbox.archive(item.id).archivedAt != nil)
            #expect(try await belfry.inbox.list(status: .archived).notifications.map(\.id) == [item.id])
        }
    }

    @Test("live stream: new notifications and counts arrive, and another device's preference change reaches the SDK")
    func liveStream() async throws {
        try await Self.withServer { server in
            let belfry = try await server.client(for: "ada")
            let other = try await server.client(for: "ada")
            _ = await belfry.preferences.getPreferences(args: .init(tenantId: "enwiki"))
            let bell = BellBadgeModel(inbox: belfry.inbox)
            var updates = belfry.inbox.updates().makeAsyncIterator()
            #expect(await updates.next() == .connected)
            #expect(await updates.next() == .counts(InboxCounts(unread: 0, unseen: 0)))

            try await server.admin(
                "POST", "v1/events",
                #"{"category": "mention", "recipients": ["ada"], "content": {"title": "Live", "body": "b"}}"#)
            guard case .created(let item) = await updates.next() else {
                Issue.record("expected notification.created")
                return
            }
            #expect(item.title == "Live")
            let counts = await updates.next()
            #expect(counts == .counts(InboxCounts(unread: 1, unseen: 1)))
            if let counts { bell.apply(counts) }
            #expect(bell.accessibilityLabel == "Notifications, 1 unread")

            // Another device of ada's turns a category off; this one follows.
            var changed: [PreferenceData] = []
            belfry.emitter.on(.preferencesUpdated) { changed.append($0) }
            let following = Task { await belfry.followPreferenceChanges() }
            defer { following.cancel() }
            try await Task.sleep(nanoseconds: 300_000_000)
            _ = await other.preferences.getPreferences(args: .init(tenantId: "enwiki"))
            _ = await other.preferences.updateCategoryPreference(category: "edit-thank", preference: .optOut)
            await other.preferences.flush()
            try await Self.eventually("the other device's change") {
                belfry.preferences.data?.category("edit-thank")?.preference == .optOut
            }
            #expect(changed.last?.category("edit-thank")?.preference == .optOut)
        }
    }
}
