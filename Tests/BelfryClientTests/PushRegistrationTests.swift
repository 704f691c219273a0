import BelfryCore
import BelfryTestSupport
import Foundation
import Testing

@testable import BelfryClient

/// The push subscription's state machine, seed 000 steps 1, 2, 5, 6, 9 and 10, against fakes of
/// the OS permission, the device token and the server.
@MainActor
@Suite("BelfryClient push registration")
struct PushRegistrationTests {
    let clock = ManualClock()
    let store = InMemoryKeyValueStore()
    let server = FakeDeviceServer()
    let transport: GatedTransport
    let tokens = CountingTokens()

    init() {
        let server = server
        transport = GatedTransport(FakeTransport { try server.handle($0) })
    }

    func client() -> BelfryClient {
        BelfryClient(
            baseURL: URL(string: "https://belfry.test")!, tokenProvider: tokens, transport: transport, clock: clock,
            store: store)
    }

    func registration(
        _ authorizer: FakeAuthorizer, _ tokenSource: FakeTokenSource, follows: Bool = false,
        legacy: LegacySubscriptionFlag? = nil
    ) -> PushRegistration {
        PushRegistration(
            client: client(), authorizer: authorizer, tokenSource: tokenSource,
            options: PushRegistrationOptions(
                topic: "org.example.app", environment: .sandbox, tokenTimeout: 10, tokenRetryDelays: [5, 30],
                followsSystemPermission: follows, legacyFlag: legacy, locale: "en-US", appVersion: "7.1"))
    }

    /// Moves the clock once something sleeps on it.
    func advance(_ seconds: TimeInterval) async throws {
        try await Eventually.until("something waits on the clock") { clock.sleeperCount > 0 }
        await clock.advance(by: seconds)
    }

    var storedRecord: PushSubscriptionRecord? {
        store.data(forKey: PushRegistration.storeKey).flatMap {
            try? BelfryAPI.decoder.decode(PushSubscriptionRecord.self, from: $0)
        }
    }

    /// Signs in and turns push on with a token that comes at once.
    func subscribed(
        _ authorizer: FakeAuthorizer = FakeAuthorizer(), _ tokenSource: FakeTokenSource = FakeTokenSource()
    )
        async throws -> PushRegistration
    {
        let push = registration(authorizer, tokenSource)
        await push.login(user: "ada", tenants: ["enwiki", "dewiki"])
        await push.enable()
        try #require(push.phase == .on)
        return push
    }

    @Test("seed 000 step 1: off, and nothing asked, until the user turns push on")
    func step1OffUntilAsked() async {
        let authorizer = FakeAuthorizer()
        let tokenSource = FakeTokenSource()
        let push = registration(authorizer, tokenSource)
        #expect(push.phase == .loggedOut)
        await push.login(user: "ada", tenants: ["enwiki"])
        #expect(push.phase == .off)
        #expect(!push.isOn)
        #expect(authorizer.requests.isEmpty)
        #expect(tokenSource.registerCalls == 0)
        #expect(server.registrations.isEmpty)
        #expect(storedRecord == nil)
    }

    @Test("seed 000 step 2: enabling asks permission in context, registers the device, then saves the record")
    func step2EnableRegisters() async throws {
        let authorizer = FakeAuthorizer()
        let tokenSource = FakeTokenSource()
        let push = registration(authorizer, tokenSource)
        await push.login(user: "ada", tenants: ["enwiki", "dewiki"])
        await push.enable()

        #expect(push.phase == .on)
        #expect(authorizer.requests == [[.alert, .sound, .badge]])
        let sent = try #require(server.registrations.first)
        #expect(sent.token == FakeTokenSource.token(1).hexToken)
        #expect(sent.environment == .sandbox)
        #expect(sent.topic == "org.example.app")
        #expect(sent.authorization == .authorized)
        #expect(sent.settings == PushSettings())
        #expect(sent.locale == "en-US" && sent.appVersion == "7.1")
        let record = try #require(storedRecord)
        #expect(record == push.record)
        #expect(record.user == "ada" && record.tenants == ["enwiki", "dewiki"])
        #expect(record.token == sent.token && record.topic == "org.example.app")
        #expect(record.confirmedAt == clock.now())
    }

    @Test("seed 000 step 2: the record is written only after the server confirmed; a refusal is a retryable failure")
    func step2SavedOnlyWhenConfirmed() async throws {
        server.registrationFailures = [503]
        let push = registration(FakeAuthorizer(), FakeTokenSource())
        await push.login(user: "ada", tenants: ["enwiki"])
        await push.enable()
        guard case .failed(let error) = push.phase else {
            Issue.record("expected a failure, got \(push.phase)")
            return
        }
        #expect(error.status == 503)
        #expect(storedRecord == nil && push.record == nil)
        #expect(!push.isOn)

        await push.retry()
        #expect(push.phase == .on)
        #expect(storedRecord != nil)
    }

    @Test("seed 000 step 2: a token given before permission is used without waiting")
    func step2TokenBeforePermission() async throws {
        let tokenSource = FakeTokenSource(tokenOnRegister: nil)
        let push = registration(FakeAuthorizer(), tokenSource)
        tokenSource.send(FakeTokenSource.token(7))
        try await Eventually.until("the early token is seen") { push.latestToken != nil }
        await push.login(user: "ada", tenants: ["enwiki"])
        await push.enable()
        #expect(tokenSource.registerCalls == 0)
        #expect(push.phase == .on)
        #expect(push.record?.token == FakeTokenSource.token(7).hexToken)
    }

    @Test("state machine: a token that comes late, after permission, completes the subscription")
    func tokenLate() async throws {
        let tokenSource = FakeTokenSource(tokenOnRegister: nil)
        let push = registration(FakeAuthorizer(), tokenSource)
        await push.login(user: "ada", tenants: ["enwiki"])
        let enabling = Task { await push.enable() }
        try await Eventually.until("waiting for the token") { push.phase == .waitingForToken(attempt: 1) }
        #expect(push.isBusy && push.isOn)
        await clock.advance(by: 9)
        #expect(push.phase == .waitingForToken(attempt: 1))
        tokenSource.send(FakeTokenSource.token(2))
        await enabling.value
        #expect(push.phase == .on)
        #expect(push.record?.token == FakeTokenSource.token(2).hexToken)
        #expect(tokenSource.registerCalls == 1)
    }

    @Test(
        "state machine: a token that never comes is asked again with backoff, then fails; a later token still completes it"
    )
    func tokenNever() async throws {
        let tokenSource = FakeTokenSource(tokenOnRegister: nil)
        let push = registration(FakeAuthorizer(), tokenSource)
        await push.login(user: "ada", tenants: ["enwiki"])
        let enabling = Task { await push.enable() }
        try await Eventually.until("first ask") { push.phase == .waitingForToken(attempt: 1) }
        try await advance(10)  // the first wait
        try await advance(5)  // the first backoff
        try await Eventually.until("second ask") { push.phase == .waitingForToken(attempt: 2) }
        try await advance(10)
        try await advance(30)
        try await Eventually.until("third ask") { push.phase == .waitingForToken(attempt: 3) }
        try await advance(10)
        await enabling.value
        guard case .failed(let error) = push.phase else {
            Issue.record("expected a failure, got \(push.phase)")
            return
        }
        #expect(error.code == .pushTokenUnavailable)
        #expect(tokenSource.registerCalls == 3)
        #expect(server.registrations.isEmpty && storedRecord == nil)
        #expect(clock.sleeperCount == 0)

        tokenSource.send(FakeTokenSource.token(3))
        try await Eventually.until("subscribed with the late token") { push.phase == .on }
        #expect(push.record?.token == FakeTokenSource.token(3).hexToken)
    }

    @Test("seed 000 step 4: permission refused leaves push off, in the denied state, with nothing registered")
    func step4Denied() async throws {
        let authorizer = FakeAuthorizer()
        authorizer.answer = .denied
        let tokenSource = FakeTokenSource()
        let push = registration(authorizer, tokenSource)
        await push.login(user: "ada", tenants: ["enwiki"])
        await push.enable()
        #expect(push.phase == .denied)
        #expect(!push.isOn)
        #expect(authorizer.requests.count == 1)
        #expect(tokenSource.registerCalls == 0)
        #expect(server.registrations.isEmpty)
        // Turning it on again cannot ask again: the OS answers from the user's choice.
        await push.enable()
        #expect(push.phase == .denied)
    }

    @Test("seed 000 step 5: a new launch shows the saved subscription without asking anything")
    func step5Relaunch() async throws {
        _ = try await subscribed()
        let before = server.registrations.count
        let relaunched = registration(FakeAuthorizer(.authorized), FakeTokenSource(tokenOnRegister: nil))
        await relaunched.login(user: "ada", tenants: ["enwiki", "dewiki"])
        #expect(relaunched.phase == .on)
        #expect(relaunched.record == storedRecord)
        #expect(server.registrations.count == before)
    }

    @Test("seed 000 step 6: permission flipped in the background; the server learns each change")
    func step6PermissionFlipped() async throws {
        let authorizer = FakeAuthorizer()
        let push = try await subscribed(authorizer)
        authorizer.set(.denied)
        await push.recheck()
        #expect(push.phase == .denied)
        #expect(server.registrations.last?.authorization == .denied)
        #expect(push.record?.authorization == .denied)
        #expect(push.record != nil)

        authorizer.set(NotificationSettings(authorizationStatus: .authorized, alertSetting: .disabled))
        await push.recheck()
        #expect(push.phase == .on)
        #expect(server.registrations.last?.authorization == .authorized)
        #expect(server.registrations.last?.settings?.alert == .disabled)

        let count = server.registrations.count
        await push.recheck()
        #expect(server.registrations.count == count, "nothing changed, nothing sent")
    }

    @Test("seed 000 step 9: logout returns at once and removes the device behind the scenes with the user's token")
    func step9Logout() async throws {
        let push = try await subscribed()
        let deviceID = try #require(push.record?.deviceID)
        transport.hold("DELETE")
        await push.logout()
        #expect(push.phase == .loggedOut)
        #expect(push.record == nil && storedRecord == nil)
        try await Eventually.until("the removal is in flight") { transport.heldCount == 1 }
        #expect(server.deletions.isEmpty)
        transport.release()
        await push.settled()
        #expect(server.deletions.map(\.id) == [deviceID.uuidString])
        #expect(server.deletions.first?.authorization == "Bearer t1")
    }

    @Test("state machine: logout while waiting for the token registers nothing")
    func logoutWhileWaitingForToken() async throws {
        let tokenSource = FakeTokenSource(tokenOnRegister: nil)
        let push = registration(FakeAuthorizer(), tokenSource)
        await push.login(user: "ada", tenants: ["enwiki"])
        let enabling = Task { await push.enable() }
        try await Eventually.until("waiting for the token") { push.phase == .waitingForToken(attempt: 1) }
        await push.logout()
        await enabling.value
        tokenSource.send(FakeTokenSource.token(4))
        await push.settled()
        #expect(push.phase == .loggedOut)
        #expect(server.registrations.isEmpty && storedRecord == nil)
        #expect(clock.sleeperCount == 0)
    }

    @Test("state machine: logout while the registration is in flight removes the device it created")
    func logoutDuringRegistration() async throws {
        let push = registration(FakeAuthorizer(), FakeTokenSource())
        await push.login(user: "ada", tenants: ["enwiki"])
        transport.hold("POST")
        let enabling = Task { await push.enable() }
        try await Eventually.until("the registration is in flight") { transport.heldCount == 1 }
        await push.logout()
        #expect(push.phase == .loggedOut)
        transport.release()
        await enabling.value
        await push.settled()
        #expect(server.registrations.count == 1)
        #expect(server.devices.isEmpty, "the device registered after logout was removed")
        #expect(server.deletions.first?.authorization == "Bearer t1")
        #expect(storedRecord == nil && push.record == nil)
    }

    @Test("state machine: a new device token resubscribes and removes the old device")
    func tokenChanges() async throws {
        let tokenSource = FakeTokenSource()
        let push = try await subscribed(FakeAuthorizer(), tokenSource)
        let old = try #require(push.record)
        tokenSource.send(FakeTokenSource.token(9))
        try await Eventually.until("resubscribed") { push.record?.token == FakeTokenSource.token(9).hexToken }
        await push.settled()
        #expect(push.phase == .on)
        #expect(storedRecord?.deviceID != old.deviceID)
        #expect(server.deletions.map(\.id) == [old.deviceID.uuidString])
        #expect(server.devices.count == 1)
    }

    @Test("each launch and foreground asks the OS for the token again; a changed one replaces the old device")
    func tokenRefreshAtLaunch() async throws {
        _ = try await subscribed()
        let old = try #require(storedRecord)
        // The same token at the next launch: asked for, and nothing changes on the server.
        let same = FakeTokenSource(tokenOnRegister: FakeTokenSource.token(1))
        let relaunched = registration(FakeAuthorizer(.authorized), same)
        await relaunched.login(user: "ada", tenants: ["enwiki", "dewiki"])
        await relaunched.settled()
        #expect(same.registerCalls == 1, "asked at launch, though a record is saved")
        #expect(relaunched.record?.deviceID == old.deviceID)
        #expect(server.deletions.isEmpty)
        // Restored on a new phone: the OS gives another token, found at the next foreground.
        let restored = FakeTokenSource(tokenOnRegister: FakeTokenSource.token(7))
        let again = registration(FakeAuthorizer(.authorized), restored)
        await again.login(user: "ada", tenants: ["enwiki", "dewiki"])
        try await Eventually.until("the new token registered") {
            again.record?.token == FakeTokenSource.token(7).hexToken
        }
        await again.settled()
        #expect(again.phase == .on)
        #expect(server.deletions.map(\.id) == [old.deviceID.uuidString], "the old device is removed")
        await again.recheck()
        await again.settled()
        #expect(restored.registerCalls == 2, "and asked again at the foreground")
        // Permission revoked: nothing is asked.
        let denied = FakeTokenSource()
        let off = registration(FakeAuthorizer(.denied), denied)
        await off.login(user: "ada", tenants: ["enwiki", "dewiki"])
        await off.settled()
        #expect(denied.registerCalls == 0)
    }

    @Test("seed 000 step 10 is off by default: permission granted in Settings does not subscribe by itself")
    func step10OffByDefault() async {
        let authorizer = FakeAuthorizer(.authorized)
        let push = registration(authorizer, FakeTokenSource())
        await push.login(user: "ada", tenants: ["enwiki"])
        #expect(push.phase == .off)
        #expect(server.registrations.isEmpty)
    }

    @Test("seed 000 step 10, when switched on: follows the OS permission both ways")
    func step10FollowsPermission() async throws {
        let authorizer = FakeAuthorizer(.authorized)
        let push = registration(authorizer, FakeTokenSource(), follows: true)
        await push.login(user: "ada", tenants: ["enwiki"])
        #expect(push.phase == .on, "subscribed without a prompt")
        #expect(authorizer.requests.isEmpty)
        let deviceID = try #require(push.record?.deviceID)

        authorizer.set(.denied)
        await push.recheck()
        #expect(push.phase == .denied)
        #expect(push.record == nil && storedRecord == nil)
        #expect(server.deletions.map(\.id) == [deviceID.uuidString])

        authorizer.set(.authorized)
        await push.recheck()
        #expect(push.phase == .on)
    }

    @Test("state machine: an earlier version's boolean flag becomes a record, then is cleared")
    func legacyFlagMigrates() async throws {
        let flag = LockedFlag(true)
        let push = registration(FakeAuthorizer(.authorized), FakeTokenSource(), legacy: flag.legacy)
        await push.login(user: "ada", tenants: ["enwiki"])
        #expect(push.phase == .on)
        #expect(storedRecord?.user == "ada")
        #expect(!flag.value)
    }

    @Test("state machine: the flag is kept when no token comes, and dropped when permission is denied")
    func legacyFlagKeptOrDropped() async throws {
        let flag = LockedFlag(true)
        let tokenSource = FakeTokenSource(tokenOnRegister: nil)
        let push = registration(FakeAuthorizer(.authorized), tokenSource, legacy: flag.legacy)
        let login = Task { await push.login(user: "ada", tenants: ["enwiki"]) }
        for wait in [10.0, 5, 10, 30, 10] { try await advance(wait) }
        await login.value
        #expect(flag.value, "the intent survives until a record replaces it")
        #expect(storedRecord == nil)

        let denied = registration(FakeAuthorizer(.denied), FakeTokenSource(), legacy: flag.legacy)
        await denied.login(user: "ada", tenants: ["enwiki"])
        #expect(denied.phase == .denied)
        #expect(!flag.value)
    }

    @Test("state machine: turning push off removes the device; a failed removal keeps it on")
    func disable() async throws {
        let push = try await subscribed()
        let deviceID = try #require(push.record?.deviceID)
        transport.inner.answer { _ in (503, [:], Data(#"{"error":{"code":"down","message":"down"}}"#.utf8)) }
        await #expect(throws: BelfryClientError.self) { try await push.disable() }
        #expect(push.phase == .on && storedRecord != nil)

        let server = server
        transport.inner.answer { try server.handle($0) }
        try await push.disable()
        #expect(push.phase == .off)
        #expect(storedRecord == nil)
        #expect(server.deletions.map(\.id) == [deviceID.uuidString])
    }

    @Test("state machine: a record registered for another user is not shown to the next one")
    func recordOfAnotherUser() async throws {
        _ = try await subscribed()
        let next = registration(FakeAuthorizer(.authorized), FakeTokenSource())
        await next.login(user: "grace", tenants: ["enwiki"])
        #expect(next.phase == .off)
        #expect(next.record == nil && storedRecord == nil)
    }
}

/// A boolean flag as an earlier app version kept it.
final class LockedFlag: @unchecked Sendable {
    // @unchecked: state under `lock`.
    private let lock = NSLock()
    private var stored: Bool

    init(_ value: Bool) { stored = value }

    var value: Bool { lock.withLock { stored } }

    var legacy: LegacySubscriptionFlag {
        LegacySubscriptionFlag(read: { self.value }, clear: { self.lock.withLock { self.stored = false } })
    }
}
