import BelfryCore
import Foundation
import Testing

@testable import BelfryClient

/// Seed 003's "define the types… define custom actions": the categories an app registers.
@MainActor
@Suite("BelfryClient notification categories")
struct NotificationCategoriesTests {
    static let workspace = WorkspaceConfig(
        channels: [
            ChannelDefinition(id: "inbox", kind: .inbox, name: "Inbox"),
            ChannelDefinition(id: "ios_push", kind: .apns, name: "iOS"),
        ],
        sections: [],
        categories: [
            CategoryDefinition(
                id: "edit-user-talk", name: "Talk page message", channels: [.init(channel: "inbox")],
                actions: [
                    NotificationAction(id: "reply", title: "Reply", opensApp: true),
                    NotificationAction(id: "mark-read", title: "Mark as read"),
                    NotificationAction(id: "block", title: "Block", destructive: true),
                ],
                push: PushHints(threadID: "talk", interruptionLevel: .active)),
            CategoryDefinition(id: "mention", name: "Mention", channels: [.init(channel: "inbox")]),
        ],
        tenants: [TenantDefinition(id: "enwiki", name: "English Wikipedia")], defaultTenant: "enwiki")

    let clock = ManualClock()

    func client(_ transport: FakeTransport, store: InMemoryKeyValueStore) -> BelfryClient {
        BelfryClient(
            baseURL: URL(string: "https://belfry.test")!, tokenProvider: CountingTokens(), transport: transport,
            clock: clock, store: store)
    }

    /// What the system was given.
    final class Registrar: NotificationCategoryRegistering, @unchecked Sendable {
        private let lock = NSLock()
        private var calls: [[NotificationCategoryRegistration]] = []
        var registered: [[NotificationCategoryRegistration]] { lock.withLock { calls } }
        func setNotificationCategories(_ categories: [NotificationCategoryRegistration]) async {
            lock.withLock { calls.append(categories) }
        }
    }

    @Test("one call fetches the categories and registers them with the system, offline from the kept copy")
    func registersWithTheSystem() async throws {
        let body = try JSONEncoder().encode(Self.workspace)
        let offline = Switch()
        let transport = FakeTransport { _ in
            if offline.isOn { throw URLError(.notConnectedToInternet) }
            return (200, ["ETag": "\"w1\"", "Content-Type": "application/json"], body)
        }
        let store = InMemoryKeyValueStore()
        let registrar = Registrar()
        let registered = try await client(transport, store: store).registerNotificationCategories(with: registrar)
        #expect(registrar.registered == [registered])
        #expect(registered.map(\.identifier) == ["edit-user-talk", "mention"])
        #expect(registered.first?.actions.map(\.identifier) == ["reply", "mark-read", "block"])

        offline.isOn = true
        let relaunched = client(transport, store: store)
        let pending = Task { try await relaunched.registerNotificationCategories(with: registrar) }
        for delay in [0.5, 1, 2] {
            while clock.sleeperCount == 0 { await Task.yield() }
            await clock.advance(by: delay)
        }
        #expect(try await pending.value == registered)
        #expect(registrar.registered.count == 2, "registered again at the next launch, from the kept copy")
    }

    @Test("categories come with their actions and hints as plain values; a kept copy is asked for with its ETag")
    func categories() async throws {
        let body = try JSONEncoder().encode(Self.workspace)
        let offline = Switch()
        let transport = FakeTransport { request in
            if offline.isOn { throw URLError(.notConnectedToInternet) }
            if request.header("If-None-Match") == "\"w1\"" { return (304, ["ETag": "\"w1\""], Data()) }
            return (200, ["ETag": "\"w1\"", "Content-Type": "application/json"], body)
        }
        let store = InMemoryKeyValueStore()
        let belfry = client(transport, store: store)
        let categories = try await belfry.notificationCategories()
        #expect(categories.map(\.identifier) == ["edit-user-talk", "mention"])
        let talk = try #require(categories.first)
        #expect(
            talk.actions == [
                .init(identifier: "reply", title: "Reply", foreground: true),
                .init(identifier: "mark-read", title: "Mark as read"),
                .init(identifier: "block", title: "Block", destructive: true),
            ])
        #expect(talk.threadIdentifier == "talk")
        #expect(talk.interruptionLevel == "active")
        #expect(talk.name == "Talk page message")
        #expect(transport.requests.last?.path == "/v1/config")
        #expect(transport.requests.last?.header("If-None-Match") == nil)
        #expect(transport.requests.last?.headers["Authorization"] == "Bearer t1", "a user token reads it")

        // Asked again: the ETag goes along, and a 304 gives the kept copy.
        #expect(try await belfry.notificationCategories() == categories)
        #expect(transport.requests.last?.header("If-None-Match") == "\"w1\"")

        // Offline: the kept copy, also in a new client on the same store (the next launch).
        offline.isOn = true
        let relaunched = client(transport, store: store)
        let pending = Task { try await relaunched.notificationCategories() }
        // The request is retried first (0.5 s, 1 s, 2 s apart), then the copy answers.
        for delay in [0.5, 1, 2] {
            while clock.sleeperCount == 0 { await Task.yield() }
            await clock.advance(by: delay)
        }
        #expect(try await pending.value == categories)
    }

    @Test("without a kept copy, a failure is the caller's to see")
    func noCopy() async throws {
        let transport = FakeTransport { _ in (403, [:], Data(#"{"error":{"code":"forbidden","message":"no"}}"#.utf8)) }
        await #expect(throws: BelfryClientError.self) {
            try await client(transport, store: InMemoryKeyValueStore()).notificationCategories()
        }
    }
}

/// A flag a fake transport reads from any thread.
final class Switch: @unchecked Sendable {
    // @unchecked: `on` is only touched under `lock`.
    private let lock = NSLock()
    private var on = false

    var isOn: Bool {
        get { lock.withLock { on } }
        set { lock.withLock { on = newValue } }
    }
}
