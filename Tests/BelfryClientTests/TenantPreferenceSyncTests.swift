import BelfryCore
import Foundation
import Testing

@testable import BelfryClient

/// Seed 000 steps 7 and 8: a type toggle on every site, and new sites getting the user's choices.
@MainActor
@Suite("BelfryClient per-site sync")
struct TenantPreferenceSyncTests {
    let clock = ManualClock()
    let store = InMemoryKeyValueStore()
    let server = Fixtures.PreferenceServer()
    let transport: FakeTransport

    init() {
        let server = server
        transport = FakeTransport { try server.handle($0) }
    }

    func sync() -> TenantPreferenceSync {
        let client = BelfryClient(
            baseURL: URL(string: "https://belfry.test")!, tokenProvider: CountingTokens(), transport: transport,
            clock: clock, store: store)
        return TenantPreferenceSync(client: client, jitter: { 0.5 })
    }

    var writes: [PreferenceChangesRequest] {
        transport.requests.filter { $0.method == "POST" }.compactMap {
            try? JSONDecoder().decode(PreferenceChangesRequest.self, from: $0.body ?? Data())
        }
    }

    @Test("a type toggle is one atomic request to every tenant")
    func toggleEverywhere() async throws {
        let sync = sync()
        await sync.start(tenants: ["enwiki", "dewiki", "wikidata", "commons"])
        try await sync.setCategory("mention", .optOut)
        try await sync.setChannel("ios_push", in: "mention", .optOut)
        #expect(writes.count == 2)
        #expect(writes[0].tenants == ["enwiki", "dewiki", "wikidata", "commons"])
        #expect(writes[0].changes == [.category("mention", .optOut)])
        #expect(writes[1].changes == [.channelInCategory(channel: "ios_push", category: "mention", .optOut)])
    }

    @Test("a failed toggle throws, so the screen can flip the switch back")
    func toggleFails() async throws {
        let sync = sync()
        await sync.start(tenants: ["enwiki", "dewiki"])
        server.failures = [500]
        await #expect(throws: BelfryClientError.self) { try await sync.setCategory("mention", .optOut) }
    }

    @Test("a new tenant gets the user's current choices copied from the first tenant")
    func copyToNewTenant() async throws {
        let sync = sync()
        await sync.start(tenants: ["enwiki"])
        server.changeElsewhere(.category("mention", .optOut))
        await sync.setTenants(["enwiki", "frwiki"])
        #expect(sync.states["frwiki"] == .synced)
        let copy = try #require(writes.last)
        #expect(copy.tenants == ["frwiki"])
        #expect(copy.changes.contains(.category("mention", .optOut)))
        #expect(copy.changes.contains(.channelInCategory(channel: "ios_push", category: "mention", .optIn)))
        #expect(!copy.changes.contains { $0.target == "category:login-fail" }, "items users cannot edit are not copied")
        #expect(transport.requests.contains { $0.method == "GET" && $0.query["tenant"] == "enwiki" })
    }

    @Test("a failed copy is retried with exponential backoff until it succeeds, and the state shows it")
    func backoff() async throws {
        let sync = sync()
        await sync.start(tenants: ["enwiki"])
        server.failures = [503, 503]
        await sync.setTenants(["enwiki", "itwiki"])
        guard case .failed(let error, 1, let next) = sync.states["itwiki"] else {
            Issue.record("expected a failed state, got \(String(describing: sync.states["itwiki"]))")
            return
        }
        #expect(error.status == 503)
        // Base 2 s, half fixed and half jitter (0.5): 1.5 s, then 3 s.
        #expect(next.timeIntervalSince(clock.now()) == 1.5)
        await clock.advance(by: 1.5)
        await sync.settled()
        guard case .failed(_, 2, let second) = sync.states["itwiki"] else {
            Issue.record("expected a second failure")
            return
        }
        #expect(second.timeIntervalSince(clock.now()) == 3)
        await clock.advance(by: 3)
        await sync.settled()
        #expect(sync.states["itwiki"] == .synced)
        #expect(store.data(forKey: TenantPreferenceSync.storeKey) == nil)
    }

    @Test("the queue survives a restart: a copy still owed is made after the next login")
    func persistedQueue() async throws {
        do {
            let first = sync()
            await first.start(tenants: ["enwiki"])
            server.failures = [503]
            await first.setTenants(["enwiki", "eswiki"])
            #expect(store.data(forKey: TenantPreferenceSync.storeKey) != nil)
        }
        await clock.advance(by: 10)
        let copies = writes.count
        let second = sync()
        await second.start(tenants: ["enwiki", "eswiki"])
        #expect(second.states["eswiki"] == .synced)
        #expect(writes.count == copies + 1)
        #expect(writes.last?.tenants == ["eswiki"])
    }

    @Test("a removed tenant is forgotten, with any copy it was owed")
    func removal() async throws {
        let sync = sync()
        await sync.start(tenants: ["enwiki"])
        server.failures = [503]
        await sync.setTenants(["enwiki", "ptwiki"])
        await sync.setTenants(["enwiki"])
        #expect(sync.states["ptwiki"] == nil)
        #expect(store.data(forKey: TenantPreferenceSync.storeKey) == nil)
    }
}
