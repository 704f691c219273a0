import BelfryCore
import Foundation
import Testing

@testable import BelfryClient

/// Seed 004's preference surface: optimistic updates, a 1 s debounce (5 s at most), coalescing,
/// rollback, stale writes, persisted replay and changes from other devices.
@MainActor
@Suite("BelfryClient preferences")
struct PreferencesTests {
    let clock = ManualClock()
    let server = Fixtures.PreferenceServer()
    let transport: FakeTransport
    let store = InMemoryKeyValueStore()

    init() {
        let server = server
        transport = FakeTransport { try server.handle($0) }
    }

    func client(store: (any KeyValueStore)? = nil) -> BelfryClient {
        BelfryClient(
            baseURL: URL(string: "https://belfry.test")!, tokenProvider: CountingTokens(), transport: transport,
            clock: clock, store: store ?? self.store)
    }

    var writes: [FakeTransport.Recorded] { transport.requests.filter { $0.method == "POST" } }

    func changes(of request: FakeTransport.Recorded) throws -> [PreferenceChange] {
        try JSONDecoder().decode(PreferenceChangesRequest.self, from: request.body ?? Data()).changes
    }

    @Test("getPreferences reads the tenant's preferences and makes it the one updates change")
    func read() async throws {
        let belfry = client()
        let response = await belfry.preferences.getPreferences(args: .init(tenantId: "dewiki"))
        #expect(response.status == .success)
        #expect(response.body == Fixtures.preferences)
        #expect(belfry.preferences.data == Fixtures.preferences)
        #expect(belfry.preferences.tenantId == "dewiki")
        #expect(transport.requests.first?.query["tenant"] == "dewiki")
        #expect(transport.requests.first?.path == "/v1/me/preferences")
    }

    @Test("an update changes the local state at once, and nothing is sent before the window ends")
    func optimistic() async throws {
        let belfry = client()
        _ = await belfry.preferences.getPreferences(args: .init(tenantId: "enwiki"))
        let response = await belfry.preferences.updateCategoryPreference(category: "mention", preference: .optOut)
        #expect(response.status == .success)
        #expect(response.body?.category("mention")?.preference == .optOut)
        #expect(belfry.preferences.data?.category("mention")?.preference == .optOut)
        #expect(belfry.preferences.hasPendingWrites)
        await clock.advance(by: 0.99)
        #expect(writes.isEmpty, "still inside the 1 s window")
        await clock.advance(by: 0.01)
        await belfry.preferences.settled()
        #expect(writes.count == 1)
        #expect(try changes(of: writes[0]) == [.category("mention", .optOut)])
        #expect(writes[0].json["tenants"] as? [String] == ["enwiki"])
        #expect(!belfry.preferences.hasPendingWrites)
    }

    @Test("ten toggles of one switch within the window send one request with the final state")
    func coalesceSameSwitch() async throws {
        let belfry = client()
        _ = await belfry.preferences.getPreferences(args: .init(tenantId: "enwiki"))
        for index in 0..<10 {
            _ = await belfry.preferences.updateChannelPreferenceInCategory(
                channel: "ios_push", preference: index.isMultiple(of: 2) ? .optOut : .optIn, category: "mention")
            await clock.advance(by: 0.05)
        }
        _ = await belfry.preferences.updateChannelPreferenceInCategory(
            channel: "ios_push", preference: .optOut, category: "mention")
        await clock.advance(by: 1)
        await belfry.preferences.settled()
        #expect(writes.count == 1)
        #expect(try changes(of: writes[0]) == [.channelInCategory(channel: "ios_push", category: "mention", .optOut)])
    }

    @Test("each change restarts the wait: a change at 0.95 s moves the write to 1.95 s")
    func debounceRestarts() async throws {
        let belfry = client()
        _ = await belfry.preferences.getPreferences(args: .init(tenantId: "enwiki"))
        _ = await belfry.preferences.updateCategoryPreference(category: "mention", preference: .optOut)
        await clock.advance(by: 0.95)
        _ = await belfry.preferences.updateChannelPreferenceInCategory(
            channel: "ios_push", preference: .optOut, category: "mention")
        await clock.advance(by: 0.99)
        await belfry.preferences.settled()
        #expect(writes.isEmpty, "a fixed window from the first change would have written at 1.0 s")
        await clock.advance(by: 0.01)
        await belfry.preferences.settled()
        #expect(writes.count == 1, "written 1 s after the last change")
        #expect(
            try changes(of: writes[0]) == [
                .category("mention", .optOut), .channelInCategory(channel: "ios_push", category: "mention", .optOut),
            ])
    }

    @Test("endless toggling still writes: at most maxWait (5 s) after the first change, then 1 s after the last")
    func maxWait() async throws {
        let belfry = client()
        _ = await belfry.preferences.getPreferences(args: .init(tenantId: "enwiki"))
        var last = PreferenceOptions.optIn
        // A toggle every half second for seven seconds, starting from the server's value (on).
        for step in 0..<15 {
            last = step.isMultiple(of: 2) ? .optIn : .optOut
            _ = await belfry.preferences.updateChannelPreferenceInCategory(
                channel: "ios_push", preference: last, category: "mention")
            if step == 9 {
                // 4.5 s in: the next half second reaches 5 s (quarters add up exactly).
                await clock.advance(by: 0.25)
                await belfry.preferences.settled()
                #expect(writes.isEmpty, "nothing before 5 s")
                await clock.advance(by: 0.25)
                await belfry.preferences.settled()
                #expect(writes.count == 1, "written at 5 s while the toggling goes on")
                #expect(
                    try changes(of: writes[0]) == [
                        .channelInCategory(channel: "ios_push", category: "mention", .optOut)
                    ], "the state at 5 s")
            } else {
                await clock.advance(by: 0.5)
                await belfry.preferences.settled()
            }
        }
        // The last toggle was at 7 s: the rest goes 1 s later.
        #expect(writes.count == 1)
        await clock.advance(by: 0.5)
        await belfry.preferences.settled()
        #expect(writes.count == 2)
        #expect(
            try changes(of: writes[1]) == [.channelInCategory(channel: "ios_push", category: "mention", last)])
        #expect(
            belfry.preferences.data?.category("mention")?.channels?.first { $0.channel == "ios_push" }?.preference
                == last)
    }

    @Test("changes to different switches in one window go in one request")
    func coalesceDifferentSwitches() async throws {
        let belfry = client()
        _ = await belfry.preferences.getPreferences(args: .init(tenantId: "enwiki"))
        _ = await belfry.preferences.updateCategoryPreference(category: "mention", preference: .optOut)
        _ = await belfry.preferences.updateCategoryPreference(category: "edit-thank", preference: .optOut)
        _ = await belfry.preferences.updateOverallChannelPreference(channel: "email", preference: .required)
        await clock.advance(by: 1)
        await belfry.preferences.settled()
        #expect(writes.count == 1)
        #expect(
            Set(try changes(of: writes[0]))
                == [
                    .category("mention", .optOut), .category("edit-thank", .optOut),
                    .overallChannel("email", .required),
                ])
        #expect(belfry.preferences.data?.channelPreferences?.first { $0.channel == "email" }?.isRestricted == true)
    }

    @Test("a switch toggled back to the server's value sends nothing")
    func toggledBack() async throws {
        let belfry = client()
        _ = await belfry.preferences.getPreferences(args: .init(tenantId: "enwiki"))
        _ = await belfry.preferences.updateCategoryPreference(category: "mention", preference: .optOut)
        _ = await belfry.preferences.updateCategoryPreference(category: "mention", preference: .optIn)
        await clock.advance(by: 1)
        await belfry.preferences.settled()
        #expect(writes.isEmpty)
        #expect(belfry.preferences.data == Fixtures.preferences)
        #expect(store.data(forKey: Preferences.storeKey) == nil)
    }

    @Test("a category users cannot edit is refused locally: an error event, no request")
    func notEditable() async throws {
        let belfry = client()
        var errors: [BelfryClientError] = []
        belfry.emitter.on(.preferencesError) { errors.append($0) }
        _ = await belfry.preferences.getPreferences(args: .init(tenantId: "enwiki"))
        let response = await belfry.preferences.updateCategoryPreference(category: "login-fail", preference: .optOut)
        #expect(response.status == .error)
        #expect(response.error?.code == .notEditable)
        let channel = await belfry.preferences.updateChannelPreferenceInCategory(
            channel: "inbox", preference: .optOut, category: "mention")
        #expect(channel.error?.code == .notEditable)
        #expect(errors.map(\.code) == [.notEditable, .notEditable])
        #expect(belfry.preferences.data == Fixtures.preferences)
        await clock.advance(by: 2)
        #expect(writes.isEmpty)
    }

    @Test("updating before reading is refused with a clear error")
    func updateBeforeRead() async throws {
        let response = await client().preferences.updateCategoryPreference(category: "mention", preference: .optOut)
        #expect(response.status == .error)
        #expect(response.error?.message.contains("getPreferences") == true)
        #expect(transport.requests.isEmpty)
    }

    @Test("a failed write is rolled back to the server's state and preferencesError fires")
    func rollback() async throws {
        let belfry = client()
        var errors: [BelfryClientError] = []
        belfry.emitter.on(.preferencesError) { errors.append($0) }
        _ = await belfry.preferences.getPreferences(args: .init(tenantId: "enwiki"))
        server.failures = [500]
        _ = await belfry.preferences.updateCategoryPreference(category: "mention", preference: .optOut)
        #expect(belfry.preferences.data?.category("mention")?.preference == .optOut)
        await clock.advance(by: 1)
        await belfry.preferences.settled()
        #expect(belfry.preferences.data?.category("mention")?.preference == .optIn, "rolled back")
        #expect(errors.count == 1)
        #expect(errors.first?.status == 500)
        #expect(store.data(forKey: Preferences.storeKey) == nil, "nothing left to replay")
    }

    @Test("a stale write (412) is re-read and re-applied: the user's change wins over the other device's")
    func staleWrite() async throws {
        let belfry = client()
        var updates: [PreferenceData] = []
        belfry.emitter.on(.preferencesUpdated) { updates.append($0) }
        _ = await belfry.preferences.getPreferences(args: .init(tenantId: "enwiki"))
        // Another device changes something else, and the next write is refused as stale.
        server.changeElsewhere(.category("edit-thank", .optOut))
        server.failures = [412]
        _ = await belfry.preferences.updateCategoryPreference(category: "mention", preference: .optOut)
        await clock.advance(by: 1)
        await belfry.preferences.settled()
        #expect(writes.count == 2, "refused once, then sent again")
        #expect(writes[0].json["if_match"] as? [String: String] == ["enwiki": "\"v1\""])
        #expect(writes[1].json["if_match"] as? [String: String] == ["enwiki": "\"v2\""])
        let data = try #require(belfry.preferences.data)
        #expect(data.category("mention")?.preference == .optOut, "the user's intent is kept")
        #expect(data.category("edit-thank")?.preference == .optOut, "the other device's change is kept")
        #expect(updates.last == data)
    }

    @Test("a write that stays stale gives up after three tries and rolls back")
    func staleForever() async throws {
        let belfry = client()
        var errors: [BelfryClientError] = []
        belfry.emitter.on(.preferencesError) { errors.append($0) }
        _ = await belfry.preferences.getPreferences(args: .init(tenantId: "enwiki"))
        server.failures = [412, 412, 412]
        _ = await belfry.preferences.updateCategoryPreference(category: "mention", preference: .optOut)
        await clock.advance(by: 1)
        await belfry.preferences.settled()
        #expect(writes.count == 3)
        #expect(errors.first?.code == .preconditionFailed)
        #expect(belfry.preferences.data?.category("mention")?.preference == .optIn)
    }

    @Test("a write made just before the app is killed is sent on the next launch")
    func persistedReplay() async throws {
        do {
            let first = client()
            _ = await first.preferences.getPreferences(args: .init(tenantId: "enwiki"))
            _ = await first.preferences.updateCategoryPreference(category: "mention", preference: .optOut)
            #expect(store.data(forKey: Preferences.storeKey) != nil, "kept before the window ends")
            #expect(writes.isEmpty)
        }

        // The app is killed; a new launch with the same store sends it after the window.
        let second = client()
        #expect(second.preferences.hasPendingWrites)
        await clock.advance(by: 1)
        await second.preferences.settled()
        #expect(writes.count == 1)
        #expect(try changes(of: writes[0]) == [.category("mention", .optOut)])
        #expect(server.state.category("mention")?.preference == .optOut)
        #expect(store.data(forKey: Preferences.storeKey) == nil, "forgotten once confirmed")
    }

    @Test("the persisted queue also works in files, as on Linux")
    func fileStore() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("belfry-sdk-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let files = FileKeyValueStore(directory: directory)
        do {
            let first = client(store: files)
            _ = await first.preferences.getPreferences(args: .init(tenantId: "enwiki"))
            _ = await first.preferences.updateOverallChannelPreference(channel: "email", preference: .required)
        }
        let second = client(store: FileKeyValueStore(directory: directory))
        await clock.advance(by: 1)
        await second.preferences.settled()
        #expect(writes.count == 1)
        #expect(server.state.channelPreferences?.first { $0.channel == "email" }?.isRestricted == true)
        #expect(files.data(forKey: Preferences.storeKey) == nil)
    }

    @Test("preferencesUpdated fires on callbacks and on the async sequence when the server confirms")
    func events() async throws {
        let belfry = client()
        var received: [PreferenceData] = []
        let listener = belfry.emitter.on(.preferencesUpdated) { received.append($0) }
        let events = belfry.emitter.events()
        _ = await belfry.preferences.getPreferences(args: .init(tenantId: "enwiki"))
        _ = await belfry.preferences.updateCategoryPreference(category: "edit-thank", preference: .optOut)
        await clock.advance(by: 1)
        await belfry.preferences.settled()
        #expect(received.count == 1)
        #expect(received.first?.category("edit-thank")?.preference == .optOut)
        var iterator = events.makeAsyncIterator()
        let event = await iterator.next()
        #expect(event == .preferencesUpdated(server.state, tenant: "enwiki"))
        belfry.emitter.off(listener)
        _ = await belfry.preferences.updateCategoryPreference(category: "edit-thank", preference: .optIn)
        await clock.advance(by: 1)
        await belfry.preferences.settled()
        #expect(received.count == 1, "no callback after off")
    }

    @Test("a change from another device updates the state without clobbering a pending local edit")
    func remoteChange() async throws {
        let belfry = client()
        var updates: [PreferenceData] = []
        belfry.emitter.on(.preferencesUpdated) { updates.append($0) }
        _ = await belfry.preferences.getPreferences(args: .init(tenantId: "enwiki"))
        _ = await belfry.preferences.updateCategoryPreference(category: "mention", preference: .optOut)
        server.changeElsewhere(.category("edit-thank", .optOut))
        await belfry.preferences.serverChanged(tenant: "enwiki", etag: "\"v2\"")
        let data = try #require(belfry.preferences.data)
        #expect(data.category("edit-thank")?.preference == .optOut, "the other device's change arrived")
        #expect(data.category("mention")?.preference == .optOut, "the pending local edit is still shown")
        #expect(updates.count == 1)
        // The same version again (our own write echoed) reads nothing.
        let reads = transport.requests.count
        await belfry.preferences.serverChanged(tenant: "enwiki", etag: "\"v2\"")
        #expect(transport.requests.count == reads)
        await clock.advance(by: 1)
        await belfry.preferences.settled()
        #expect(server.state.category("mention")?.preference == .optOut)
    }

    @Test("flush sends at once, without waiting for the window")
    func flush() async throws {
        let belfry = client()
        _ = await belfry.preferences.getPreferences(args: .init(tenantId: "enwiki"))
        _ = await belfry.preferences.updateCategoryPreference(category: "mention", preference: .optOut)
        await belfry.preferences.flush()
        #expect(writes.count == 1)
        await clock.advance(by: 2)
        #expect(writes.count == 1, "the cancelled window sends nothing more")
    }

    @Test("a failed read returns the error and fires preferencesError")
    func readFails() async throws {
        transport.answer { _ in (503, [:], Data(#"{"error":{"code":"database_unavailable","message":"down"}}"#.utf8)) }
        let belfry = client()
        var errors: [BelfryClientError] = []
        belfry.emitter.on(.preferencesError) { errors.append($0) }
        let response = await belfry.preferences.getPreferences(args: .init(tenantId: "enwiki"))
        #expect(response.status == .error)
        #expect(response.error?.code.rawValue == "database_unavailable", "an unknown code is kept as it is")
        #expect(errors.count == 1)
    }
}

@Suite("BelfryClient stored pending writes")
struct PendingWritesTests {
    @Test("every kind of change survives the stored form; lines that do not parse are skipped")
    func roundTrip() {
        let writes: [String: [PreferenceChange]] = [
            "enwiki": [
                .category("mention", .optOut), .channelInCategory(channel: "ios_push", category: "mention", .optIn),
            ],
            "": [.overallChannel("email", .required)],
        ]
        #expect(PendingWrites.decode(PendingWrites.encode(writes)) == writes)
        let damaged = Data(
            "enwiki\tc\tmention\topt_out\nenwiki\tc\tbroken\nx\tzz\ty\tz\nenwiki\tch\temail\tsometimes\n".utf8)
        #expect(PendingWrites.decode(damaged) == ["enwiki": [.category("mention", .optOut)]])
    }

    @Test("the optimistic view applies changes as the server does and refuses what it would refuse")
    func optimisticView() {
        var data = Fixtures.preferences
        #expect(throws: PreferenceChangeError.self) { try data.apply(.category("nope", .optOut)) }
        #expect(throws: PreferenceChangeError.self) {
            try data.apply(.channelInCategory(channel: "email", category: "mention", .optOut))
        }
        #expect(throws: PreferenceChangeError.self) { try data.apply(.overallChannel("pager", .all)) }
        #expect(data == Fixtures.preferences, "nothing changed")
        #expect(data.alreadyHas(.category("mention", .optIn)))
        #expect(!data.alreadyHas(.category("mention", .optOut)))
        #expect(!data.alreadyHas(.category("login-fail", .optOut)), "a refused change is never already there")
    }
}
