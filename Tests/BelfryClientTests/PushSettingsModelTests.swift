import BelfryCore
import BelfryTestSupport
import Foundation
import Testing

@testable import BelfryClient

/// Seed 000's Settings > Push Notifications screen, row by row, with every error state.
@MainActor
@Suite("BelfryClient push settings screen")
struct PushSettingsModelTests {
    let clock = ManualClock()
    let store = InMemoryKeyValueStore()
    let server = FakeDeviceServer()
    let transport: GatedTransport
    let authorizer = FakeAuthorizer()
    let tokenSource = FakeTokenSource()
    let tenants = ["enwiki", "dewiki", "wikidata", "commons"]
    let opened = Fixtures.Counter()

    init() {
        let server = server
        transport = GatedTransport(FakeTransport { try server.handle($0) })
        server.preferences.state = Self.preferences
    }

    /// Push types: two on, one required by the site, one whose whole category is off, and a
    /// category without push that the screen leaves out.
    static let preferences = PreferenceData(
        sections: [
            Section(
                name: "Talk", description: nil,
                subcategories: [
                    Category(
                        name: "Talk page message", category: "edit-user-talk", description: "Someone wrote to you.",
                        preference: .optIn, isEditable: true,
                        channels: [
                            CategoryChannel(channel: "inbox", preference: .optIn, isEditable: true),
                            CategoryChannel(channel: "ios_push", preference: .optIn, isEditable: true),
                        ]),
                    Category(
                        name: "Mention", category: "mention", description: nil, preference: .optIn, isEditable: true,
                        channels: [CategoryChannel(channel: "ios_push", preference: .optIn, isEditable: true)]),
                    Category(
                        name: "Email from another user", category: "emailuser", description: nil, preference: .optIn,
                        isEditable: true,
                        channels: [CategoryChannel(channel: "email", preference: .optIn, isEditable: false)]),
                ]),
            Section(
                subcategories: [
                    Category(
                        name: "Failed login", category: "login-fail", description: "Someone tried your password.",
                        preference: .optIn, isEditable: false,
                        channels: [CategoryChannel(channel: "ios_push", preference: .optIn, isEditable: false)]),
                    Category(
                        name: "Page link", category: "article-linked", description: nil, preference: .optOut,
                        isEditable: true,
                        channels: [CategoryChannel(channel: "ios_push", preference: .optOut, isEditable: true)]),
                ]),
        ],
        channelPreferences: [])

    func model(follows: Bool = false, provisionalAtLaunch: Bool = false) -> PushSettingsModel {
        let client = BelfryClient(
            baseURL: URL(string: "https://belfry.test")!, tokenProvider: CountingTokens(), transport: transport,
            clock: clock, store: store)
        let registration = PushRegistration(
            client: client, authorizer: authorizer, tokenSource: tokenSource,
            options: PushRegistrationOptions(
                environment: .production, followsSystemPermission: follows,
                requestsProvisionalAtLaunch: provisionalAtLaunch))
        let opened = opened
        return PushSettingsModel(
            client: client, registration: registration, sync: TenantPreferenceSync(client: client, jitter: { 0.5 }),
            pushChannel: "ios_push", openSystemSettings: { _ = opened.next() })
    }

    func kinds(_ model: PushSettingsModel) -> [PushSettingsModel.Row.Kind] { model.rows.map(\.kind) }

    func row(_ model: PushSettingsModel, _ kind: PushSettingsModel.Row.Kind) throws -> PushSettingsModel.Row {
        try #require(model.rows.first { $0.kind == kind }, "no \(kind) row in \(kinds(model))")
    }

    var preferenceWrites: [PreferenceChangesRequest] {
        transport.inner.requests.filter { $0.method == "POST" && $0.path.hasSuffix("/changes") }.compactMap {
            try? JSONDecoder().decode(PreferenceChangesRequest.self, from: $0.body ?? Data())
        }
    }

    func signedInAndOn() async throws -> PushSettingsModel {
        let model = model()
        await model.signIn(user: "ada", tenants: tenants)
        await model.setPushEnabled(true)
        try #require(model.registration.phase == .on)
        return model
    }

    @Test("seed 000 information architecture: nothing is shown while logged out")
    func loggedOut() async throws {
        let model = model()
        #expect(model.rows.isEmpty)
        await model.signIn(user: "ada", tenants: tenants)
        #expect(!model.rows.isEmpty)
        await model.signOut()
        #expect(model.rows.isEmpty)
    }

    @Test("seed 000 step 1: the primary toggle off and the educational cell; type toggles hidden")
    func step1Off() async throws {
        let model = model()
        await model.signIn(user: "ada", tenants: tenants)
        #expect(kinds(model) == [.primaryToggle, .education])
        let primary = try row(model, .primaryToggle)
        #expect(primary.isOn == false && primary.isEnabled)
        #expect(
            primary.accessibility
                == .init(label: "Push notifications", value: "Off", hint: PushSettingsText().primaryHintOff))
        #expect(authorizer.requests.isEmpty, "permission is asked in context, never on appear")
    }

    @Test("seed 000 steps 2 and 3: turning push on shows the types from the server, in order")
    func step2And3TypesShown() async throws {
        let model = try await signedInAndOn()
        #expect(
            kinds(model) == [
                .primaryToggle, .education, .type(category: "edit-user-talk"), .type(category: "mention"),
                .type(category: "login-fail"), .type(category: "article-linked"),
            ])
        let talk = try row(model, .type(category: "edit-user-talk"))
        #expect(talk.title == "Talk page message" && talk.detail == "Someone wrote to you.")
        #expect(talk.isOn == true && talk.isEnabled)
        #expect(talk.accessibility.value == "On" && talk.accessibility.hint == PushSettingsText().typeHint)
        #expect(try row(model, .type(category: "article-linked")).isOn == false)
        #expect(server.devices.count == 1)
    }

    @Test("seed 000 step 2: the primary toggle is disabled while the request is in flight")
    func step2DisabledWhileBusy() async throws {
        tokenSource.tokenOnRegister = nil
        let model = model()
        await model.signIn(user: "ada", tenants: tenants)
        let enabling = Task { await model.setPushEnabled(true) }
        try await Eventually.until("waiting for the token") { model.registration.phase == .waitingForToken(attempt: 1) }
        let primary = try row(model, .primaryToggle)
        #expect(primary.isOn == true && !primary.isEnabled)
        #expect(primary.accessibility.value == "Turning on")
        tokenSource.send(FakeTokenSource.token(5))
        await enabling.value
        #expect(try row(model, .primaryToggle).isEnabled)
    }

    @Test("seed 000 step 3: types that fail to load show a popup and a row that retries")
    func step3ReadFailed() async throws {
        server.readFailures = [503]
        let model = model()
        await model.signIn(user: "ada", tenants: tenants)
        await model.setPushEnabled(true)
        #expect(model.alert?.kind == .typesReadFailed && model.alert?.canRetry == true)
        #expect(kinds(model) == [.primaryToggle, .education, .typesUnavailable])
        let unavailable = try row(model, .typesUnavailable)
        #expect(unavailable.action == .retryTypes && unavailable.actionTitle == "Try again")
        await model.perform(.retryTypes)
        #expect(kinds(model).count == 6)
    }

    @Test("seed 000 step 4: denied permission shows the cell that opens Settings, and a popup")
    func step4Denied() async throws {
        authorizer.answer = .denied
        let model = model()
        await model.signIn(user: "ada", tenants: tenants)
        await model.setPushEnabled(true)
        #expect(kinds(model) == [.primaryToggle, .education, .permissionDenied])
        #expect(model.alert?.kind == .permissionDenied)
        let denied = try row(model, .permissionDenied)
        #expect(denied.action == .openSettings && denied.actionTitle == "Open Settings")
        #expect(denied.accessibility.hint == PushSettingsText().openSettingsHint)
        await model.perform(.openSettings)
        #expect(opened.next() == 2, "Settings opened once")
        #expect(try row(model, .primaryToggle).isOn == false)
    }

    @Test("seed 000 error state: a failed subscription shows its message and retries")
    func subscriptionFailed() async throws {
        server.registrationFailures = [500]
        let model = model()
        await model.signIn(user: "ada", tenants: tenants)
        await model.setPushEnabled(true)
        #expect(model.alert?.kind == .subscriptionFailed && model.alert?.message == "the server is busy")
        #expect(kinds(model) == [.primaryToggle, .education, .subscriptionFailed])
        #expect(try row(model, .primaryToggle).isOn == false)
        await model.retryAlert()
        #expect(model.registration.phase == .on)
        #expect(kinds(model).count == 6)
    }

    @Test("seed 000 step 5: on appear the screen reflects permission, subscription and types")
    func step5Appear() async throws {
        _ = try await signedInAndOn()
        let relaunched = model()
        await relaunched.signIn(user: "ada", tenants: tenants)
        await relaunched.appear()
        #expect(kinds(relaunched).count == 6)
        #expect(try row(relaunched, .primaryToggle).isOn == true)
    }

    @Test("seed 000 step 6: back from Settings with permission off, the types hide and the denied cell shows")
    func step6Foreground() async throws {
        let model = try await signedInAndOn()
        authorizer.set(.denied)
        await model.foregrounded()
        #expect(kinds(model) == [.primaryToggle, .education, .permissionDenied])
        authorizer.set(.authorized)
        await model.foregrounded()
        #expect(kinds(model).count == 6)
    }

    @Test("seed 000 step 7: a type toggle moves at once and is written to every site in one request")
    func step7Toggle() async throws {
        let model = try await signedInAndOn()
        transport.hold("POST")
        let toggling = Task { await model.setType("mention", isOn: false) }
        try await Eventually.until("the write is in flight") { transport.heldCount == 1 }
        let moving = try row(model, .type(category: "mention"))
        #expect(moving.isOn == false && !moving.isEnabled, "optimistic, and not toggled twice meanwhile")
        transport.release()
        await toggling.value
        #expect(try row(model, .type(category: "mention")).isEnabled)
        #expect(preferenceWrites.count == 1)
        #expect(preferenceWrites.first?.tenants == tenants)
        #expect(
            preferenceWrites.first?.changes == [.channelInCategory(channel: "ios_push", category: "mention", .optOut)])
    }

    @Test("seed 000 step 7: turning on a type whose category is off turns the category on too")
    func step7CategoryOff() async throws {
        let model = try await signedInAndOn()
        await model.setType("article-linked", isOn: true)
        #expect(
            preferenceWrites.first?.changes == [
                .category("article-linked", .optIn),
                .channelInCategory(channel: "ios_push", category: "article-linked", .optIn),
            ])
        #expect(try row(model, .type(category: "article-linked")).isOn == true)
    }

    @Test("seed 000 step 7: a failed write flips the toggle back and shows the error")
    func step7WriteFailed() async throws {
        let model = try await signedInAndOn()
        server.preferences.failures = [500]
        await model.setType("mention", isOn: false)
        #expect(try row(model, .type(category: "mention")).isOn == true)
        #expect(model.alert?.kind == .writeFailed)
    }

    @Test("seed 004 in seed 000's screen: a type the site requires is shown, disabled, with the reason")
    func requiredType() async throws {
        let model = try await signedInAndOn()
        let required = try row(model, .type(category: "login-fail"))
        #expect(!required.isEnabled && required.action == nil)
        #expect(required.detail?.contains(PushSettingsText().notEditable) == true)
        #expect(required.accessibility.hint == PushSettingsText().notEditable)
        await model.setType("login-fail", isOn: false)
        #expect(preferenceWrites.isEmpty)
    }

    @Test("seed 003: provisional at launch asks nothing, registers, and shows delivered quietly")
    func provisionalAtLaunch() async throws {
        let model = model(provisionalAtLaunch: true)
        await model.signIn(user: "ada", tenants: tenants)
        #expect(authorizer.requests == [[.alert, .sound, .badge, .provisional]], "no prompt: provisional only")
        #expect(model.registration.phase == .on)
        #expect(server.registrations.last?.authorization == .provisional)
        let primary = try row(model, .primaryToggle)
        #expect(primary.isOn == true)
        #expect(primary.detail?.hasPrefix("Delivered quietly") == true)
        #expect(primary.accessibility.value == "On, Delivered quietly")
        #expect(kinds(model).prefix(3) == [.primaryToggle, .education, .prominentDelivery])
        let prominent = try row(model, .prominentDelivery)
        #expect(prominent.action == .requestProminentDelivery && prominent.actionTitle == "Allow")
        #expect(prominent.accessibility.hint == PushSettingsText().prominentHint)

        // A second launch: the OS has answered, so nothing is asked again.
        await model.signIn(user: "ada", tenants: tenants)
        #expect(authorizer.requests.count == 1)
    }

    @Test("seed 003: asking for prominent delivery prompts, and the server learns the answer")
    func prominentDelivery() async throws {
        let model = model(provisionalAtLaunch: true)
        await model.signIn(user: "ada", tenants: tenants)
        let device = try #require(model.registration.record?.deviceID)
        await model.perform(.requestProminentDelivery)
        #expect(authorizer.requests.last == [.alert, .sound, .badge], "full authorization: the prompt")
        #expect(model.registration.phase == .on)
        #expect(server.registrations.last?.authorization == .authorized)
        #expect(model.registration.record?.deviceID == device, "the same device, updated")
        #expect(try row(model, .primaryToggle).accessibility.value == "On")
        #expect(!kinds(model).contains(.prominentDelivery))
    }

    @Test("seed 003: provisional is never shown as denied; turning push on asks for full authorization")
    func provisionalTurnedOn() async throws {
        authorizer.set(.provisional)
        let model = model()
        await model.signIn(user: "ada", tenants: tenants)
        #expect(model.registration.phase == .off)
        #expect(kinds(model) == [.primaryToggle, .education], "off, not denied")

        // The user lets the prompt pass: quiet delivery still works, so push is on, quietly.
        authorizer.answer = .provisional
        await model.setPushEnabled(true)
        #expect(authorizer.requests == [[.alert, .sound, .badge]])
        #expect(model.registration.phase == .on && model.alert == nil)
        #expect(server.registrations.last?.authorization == .provisional)
        #expect(kinds(model).contains(.prominentDelivery))

        // Off, then on again with the prompt accepted: full delivery.
        await model.setPushEnabled(false)
        authorizer.answer = .authorized
        await model.setPushEnabled(true)
        #expect(authorizer.requests.count == 2)
        #expect(server.registrations.last?.authorization == .authorized)
        #expect(try row(model, .primaryToggle).accessibility.value == "On")
    }

    @Test("seed 003: refusing the prompt from quiet delivery is a real denial, and the server hears it")
    func prominentRefused() async throws {
        let model = model(provisionalAtLaunch: true)
        await model.signIn(user: "ada", tenants: tenants)
        authorizer.answer = .denied
        await model.perform(.requestProminentDelivery)
        #expect(model.registration.phase == .denied)
        #expect(server.registrations.last?.authorization == .denied, "the server stops sending")
        #expect(kinds(model).contains(.permissionDenied))
    }

    @Test("seed 000 step 13: every row has an accessibility label; toggles have a value and a hint")
    func accessibility() async throws {
        let model = try await signedInAndOn()
        for row in model.rows {
            #expect(!row.accessibility.label.isEmpty, "\(row.id)")
            if row.isOn != nil {
                #expect(row.accessibility.value != nil && row.accessibility.hint != nil, "\(row.id)")
            }
        }
        #expect(Set(model.rows.map(\.id)).count == model.rows.count, "row ids are unique")
    }

    @Test("seed 000: turning push off hides the types and removes the device")
    func turnOff() async throws {
        let model = try await signedInAndOn()
        await model.setPushEnabled(false)
        #expect(kinds(model) == [.primaryToggle, .education])
        #expect(server.devices.isEmpty)
    }
}
