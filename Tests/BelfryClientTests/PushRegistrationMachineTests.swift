import BelfryCore
import Foundation
import Testing

@testable import BelfryClient

/// The push subscription's transition function, as a table: each step with each answer it
/// waits for, each operation and each sign-in or sign-out, and every answer a step does not wait
/// for (ignored), for every step there is.
@Suite("BelfryClient push registration: the transition table")
struct PushRegistrationMachineTests {
    typealias Machine = PushRegistrationMachine
    typealias Step = Machine.Step
    typealias Input = Machine.Input
    typealias Effect = Machine.Effect

    static let configuration = Machine.Configuration(
        topic: "org.example.app", environment: .sandbox, authorizationOptions: [.alert, .sound, .badge],
        tokenRetryDelays: [5, 30], followsSystemPermission: false, requestsProvisionalAtLaunch: false)
    static let follows = {
        var changed = PushRegistrationMachineTests.configuration
        changed.followsSystemPermission = true
        return changed
    }()
    static let provisionalAtLaunch = {
        var changed = PushRegistrationMachineTests.configuration
        changed.requestsProvisionalAtLaunch = true
        return changed
    }()

    static func settings(_ status: PushAuthorization, alert: PushSetting = .enabled) -> NotificationSettings {
        NotificationSettings(
            authorizationStatus: status, alertSetting: alert, soundSetting: .enabled, badgeSetting: .enabled)
    }

    static let granted = settings(.authorized)
    static let deviceID = UUID(uuidString: "00000000-0000-0000-0000-0000000000d1")!
    static let newDeviceID = UUID(uuidString: "00000000-0000-0000-0000-0000000000d2")!
    static let confirmed = Date(timeIntervalSince1970: 1_800_000_000)
    static let refused = BelfryClientError(code: .network, message: "offline")
    static let noToken = BelfryClientError(
        code: .pushTokenUnavailable,
        message: "the system gave no device token; check the network connection and try again")

    static func record(
        token: String = "aa", device: UUID = deviceID, settings: NotificationSettings = granted
    )
        -> PushSubscriptionRecord
    {
        PushSubscriptionRecord(
            token: token, deviceID: device, user: "ada", topic: "org.example.app", environment: .sandbox,
            tenants: ["enwiki"], authorization: settings.authorizationStatus, settings: settings.pushSettings,
            confirmedAt: confirmed)
    }

    /// Signed in as ada, an operation of this session at `step`.
    static func state(
        _ step: Step = .idle, phase: PushRegistration.Phase = .off, record: PushSubscriptionRecord? = nil,
        token: String? = nil, wantsOn: Bool = false, system: NotificationSettings? = nil
    ) -> Machine.State {
        var state = Machine.State()
        state.user = "ada"
        state.tenants = ["enwiki"]
        state.session = 1
        state.operationSession = 1
        state.phase = phase
        state.record = record
        state.latestToken = token
        state.wantsOn = wantsOn
        state.systemSettings = system
        state.step = step
        return state
    }

    struct Row: CustomTestStringConvertible, Sendable {
        var name: String
        var state: Machine.State
        var input: Input
        var configuration = PushRegistrationMachineTests.configuration
        var phase: PushRegistration.Phase
        var step: Step
        var effects: [Effect]
        /// Anything else the row checks of the next state.
        var also: @Sendable (Machine.State) -> Bool = { _ in true }
        var testDescription: String { name }
    }

    static let registering = Step.registering(token: "aa", settings: granted, replaced: nil, then: .done)
    static let newRecord = record(device: newDeviceID)

    static let rows: [Row] = [
        // Operations, from idle.
        Row(
            name: "launch without provisional: a recheck reads the settings", state: state(), input: .launch,
            phase: .off, step: .reconcileSettings, effects: [.readSettings]),
        Row(
            name: "launch with provisional and no record: the settings first", state: state(), input: .launch,
            configuration: provisionalAtLaunch, phase: .off, step: .provisionalSettings, effects: [.readSettings]),
        Row(
            name: "enable: the settings, to see whether to ask", state: state(wantsOn: true),
            input: .subscribe(asking: true), phase: .off, step: .subscribeSettings(asking: true),
            effects: [.readSettings]),
        Row(
            name: "disable without a record: nothing to remove", state: state(system: settings(.denied)),
            input: .disable, phase: .denied, step: .idle, effects: [.finished(nil)]),
        Row(
            name: "disable with a record: the device's removal", state: state(phase: .on, record: record()),
            input: .disable, phase: .on, step: .disabling, effects: [.remove(deviceID)]),
        Row(
            name: "prominent delivery: the settings", state: state(phase: .on), input: .prominent, phase: .on,
            step: .prominentSettings, effects: [.readSettings]),
        Row(
            name: "a changed token re-registers the device",
            state: state(phase: .on, record: record(), token: "bb", system: granted), input: .tokenFollowUp("bb"),
            phase: .registering, step: .registering(token: "bb", settings: granted, replaced: record(), then: .done),
            effects: [.register(token: "bb", settings: granted)]),
        Row(
            name: "a late token completes a subscribe that gave up",
            state: state(phase: .failed(noToken), token: "bb", wantsOn: true), input: .tokenFollowUp("bb"),
            phase: .failed(noToken), step: .subscribeSettings(asking: false), effects: [.readSettings]),
        Row(
            name: "the same token again: nothing", state: state(phase: .on, record: record(), token: "aa"),
            input: .tokenFollowUp("aa"), phase: .on, step: .idle, effects: [.finished(nil)]),
        Row(
            name: "a token superseded by a newer one: nothing", state: state(phase: .on, record: record(), token: "cc"),
            input: .tokenFollowUp("bb"), phase: .on, step: .idle, effects: [.finished(nil)]),
        Row(
            name: "an operation while another runs waits its turn (the driver queues it)",
            state: state(.reconcileSettings), input: .disable, phase: .off, step: .reconcileSettings, effects: []),

        // Sign-in at launch, provisional.
        Row(
            name: "provisional: not asked yet, so asked quietly", state: state(.provisionalSettings),
            input: .settings(settings(.notDetermined)), configuration: provisionalAtLaunch, phase: .off,
            step: .provisionalPrompt, effects: [.requestAuthorization([.alert, .sound, .badge, .provisional])]),
        Row(
            name: "provisional: already decided, so a recheck", state: state(.provisionalSettings),
            input: .settings(granted), configuration: provisionalAtLaunch, phase: .off, step: .reconcileSettings,
            effects: [.readSettings]),
        Row(
            name: "provisional granted: the device is wanted at the server", state: state(.provisionalPrompt),
            input: .prompted(granted: true), phase: .off, step: .reconcileSettings, effects: [.readSettings],
            also: { $0.wantsOn }),

        // A recheck.
        Row(
            name: "recheck, unchanged: on, and the token asked for again",
            state: state(.reconcileSettings, phase: .on, record: record()), input: .settings(granted), phase: .on,
            step: .askingToken, effects: [.askForToken]),
        Row(
            name: "recheck, settings changed: the server learns them",
            state: state(.reconcileSettings, phase: .on, record: record()),
            input: .settings(settings(.authorized, alert: .disabled)), phase: .registering,
            step: .registering(
                token: "aa", settings: settings(.authorized, alert: .disabled), replaced: record(),
                then: .recheck(.authorized)),
            effects: [.register(token: "aa", settings: settings(.authorized, alert: .disabled))]),
        Row(
            name: "recheck, revoked, following the OS: the device's removal",
            state: state(.reconcileSettings, phase: .on, record: record()), input: .settings(settings(.denied)),
            configuration: follows, phase: .on, step: .revoking, effects: [.remove(deviceID)]),
        Row(
            name: "recheck, no record, denied: the earlier version's flag goes",
            state: state(.reconcileSettings, wantsOn: true), input: .settings(settings(.denied)), phase: .denied,
            step: .idle, effects: [.clearLegacyFlag, .finished(nil)], also: { !$0.wantsOn }),
        Row(
            name: "recheck, no record, wanted: subscribe without asking",
            state: state(.reconcileSettings, wantsOn: true), input: .settings(granted), phase: .off,
            step: .subscribeSettings(asking: false), effects: [.readSettings]),
        Row(
            name: "recheck, no record, granted in Settings and following the OS: subscribe",
            state: state(.reconcileSettings), input: .settings(granted), configuration: follows, phase: .off,
            step: .subscribeSettings(asking: false), effects: [.readSettings]),
        Row(
            name: "recheck after a failure: the failure stays shown",
            state: state(.reconcileSettings, phase: .failed(refused)), input: .settings(granted),
            phase: .failed(refused), step: .idle, effects: [.finished(nil)]),
        Row(
            name: "recheck, nothing wanted: off", state: state(.reconcileSettings), input: .settings(granted),
            phase: .off, step: .idle, effects: [.finished(nil)]),
        Row(
            name: "revoked device removed: denied, no record", state: state(.revoking, phase: .on, record: record()),
            input: .removed(nil), phase: .denied, step: .idle, effects: [.save(nil), .finished(nil)],
            also: { $0.record == nil }),
        Row(
            name: "revoked device not removed: denied, the record kept for the next try",
            state: state(.revoking, phase: .on, record: record()), input: .removed(refused), phase: .denied,
            step: .idle, effects: [.finished(nil)], also: { $0.record != nil }),
        Row(
            name: "the token asked for: done", state: state(.askingToken, phase: .on, record: record()),
            input: .tokenAsked, phase: .on, step: .idle, effects: [.finished(nil)]),

        // Subscribing.
        Row(
            name: "enable, not asked yet: the prompt", state: state(.subscribeSettings(asking: true)),
            input: .settings(settings(.notDetermined)), phase: .requestingPermission,
            step: .prompting(full: false), effects: [.requestAuthorization([.alert, .sound, .badge])]),
        Row(
            name: "enable, provisional: asks for prominent delivery", state: state(.subscribeSettings(asking: true)),
            input: .settings(settings(.provisional)), phase: .requestingPermission, step: .prompting(full: true),
            effects: [.requestAuthorization([.alert, .sound, .badge])]),
        Row(
            name: "enable, denied: stays denied, nothing wanted",
            state: state(.subscribeSettings(asking: true), wantsOn: true),
            input: .settings(settings(.denied)), phase: .denied, step: .idle,
            effects: [.clearLegacyFlag, .finished(nil)], also: { !$0.wantsOn }),
        Row(
            name: "granted, no token yet: asks and waits", state: state(.subscribeSettings(asking: false)),
            input: .settings(granted), phase: .waitingForToken(attempt: 1),
            step: .awaitingToken(attempt: 0, settings: granted), effects: [.waitForToken(attempt: 0)],
            also: { $0.systemSettings == granted }),
        Row(
            name: "granted, the token known: registers at once",
            state: state(.subscribeSettings(asking: false), token: "aa"), input: .settings(granted),
            phase: .registering, step: registering, effects: [.register(token: "aa", settings: granted)]),
        Row(
            name: "the prompt answered: the settings again", state: state(.prompting(full: false)),
            input: .prompted(granted: true), phase: .off, step: .promptSettings, effects: [.readSettings]),
        Row(
            name: "prominent asked for while registered quietly: a recheck tells the server",
            state: state(.prompting(full: true), record: record(settings: settings(.provisional))),
            input: .prompted(granted: false), phase: .off, step: .reconcileSettings, effects: [.readSettings]),
        Row(
            name: "prominent asked for, no record yet: the settings again", state: state(.prompting(full: true)),
            input: .prompted(granted: true), phase: .off, step: .promptSettings, effects: [.readSettings]),
        Row(
            name: "after the prompt, refused: denied", state: state(.promptSettings, wantsOn: true),
            input: .settings(settings(.denied)), phase: .denied, step: .idle,
            effects: [.clearLegacyFlag, .finished(nil)]),
        Row(
            name: "after the prompt, granted: asks for the token", state: state(.promptSettings),
            input: .settings(granted), phase: .waitingForToken(attempt: 1),
            step: .awaitingToken(attempt: 0, settings: granted), effects: [.waitForToken(attempt: 0)]),
        Row(
            name: "the token comes while waiting: registers",
            state: state(.awaitingToken(attempt: 0, settings: granted)),
            input: .tokenArrived("aa"), phase: .registering, step: registering,
            effects: [.stopWaitingForToken, .register(token: "aa", settings: granted)]),
        Row(
            name: "no token in time: a pause, then again",
            state: state(.awaitingToken(attempt: 0, settings: granted)), input: .tokenTimedOut(attempt: 0),
            phase: .off, step: .pausing(attempt: 1, settings: granted), effects: [.pause(attempt: 1, seconds: 5)]),
        Row(
            name: "no token after the last retry: a failure to retry",
            state: state(.awaitingToken(attempt: 2, settings: granted)), input: .tokenTimedOut(attempt: 2),
            phase: .failed(noToken), step: .idle, effects: [.finished(nil)]),
        Row(
            name: "the pause over: asks again", state: state(.pausing(attempt: 1, settings: granted)),
            input: .paused(attempt: 1), phase: .waitingForToken(attempt: 2),
            step: .awaitingToken(attempt: 1, settings: granted), effects: [.waitForToken(attempt: 1)]),
        Row(
            name: "the pause over, a token came meanwhile: registers",
            state: state(.pausing(attempt: 1, settings: granted), token: "aa"), input: .paused(attempt: 1),
            phase: .registering, step: registering, effects: [.register(token: "aa", settings: granted)]),

        // Registering.
        Row(
            name: "registered: the record is saved only now, and the flag goes",
            state: state(registering, phase: .registering, wantsOn: true),
            input: .registered(deviceID: deviceID, at: confirmed), phase: .on, step: .idle,
            effects: [.save(record()), .clearLegacyFlag, .finished(nil)],
            also: { $0.record == record() && !$0.wantsOn }),
        Row(
            name: "registered as a new device: the old one is removed",
            state: state(
                .registering(token: "aa", settings: granted, replaced: record(token: "zz"), then: .done),
                phase: .registering, record: record(token: "zz")),
            input: .registered(deviceID: newDeviceID, at: confirmed), phase: .on,
            step: .removingReplaced(then: .done),
            effects: [.save(newRecord), .clearLegacyFlag, .remove(deviceID)]),
        Row(
            name: "registered during a recheck: the recheck's last part",
            state: state(
                .registering(token: "aa", settings: granted, replaced: record(), then: .recheck(.authorized)),
                phase: .registering, record: record()),
            input: .registered(deviceID: deviceID, at: confirmed), phase: .on, step: .askingToken,
            effects: [.save(record()), .clearLegacyFlag, .askForToken]),
        Row(
            name: "refused, first registration: a failure to retry", state: state(registering, phase: .registering),
            input: .registrationFailed(refused), phase: .failed(refused), step: .idle, effects: [.finished(nil)]),
        Row(
            name: "refused update: the subscription stands",
            state: state(
                .registering(token: "aa", settings: granted, replaced: record(), then: .done), phase: .registering,
                record: record()),
            input: .registrationFailed(refused), phase: .on, step: .idle, effects: [.finished(nil)]),
        Row(
            name: "the old device removed (or not): done", state: state(.removingReplaced(then: .done), phase: .on),
            input: .removed(refused), phase: .on, step: .idle, effects: [.finished(nil)]),

        // Prominent delivery.
        Row(
            name: "prominent: provisional, so the prompt", state: state(.prominentSettings, phase: .on),
            input: .settings(settings(.provisional)), phase: .requestingPermission, step: .prominentPrompt,
            effects: [.requestAuthorization([.alert, .sound, .badge])]),
        Row(
            name: "prominent: not provisional, nothing to do", state: state(.prominentSettings, phase: .on),
            input: .settings(granted), phase: .on, step: .idle, effects: [.finished(nil)]),
        Row(
            name: "prominent answered: a recheck tells the server", state: state(.prominentPrompt),
            input: .prompted(granted: true), phase: .off, step: .reconcileSettings, effects: [.readSettings]),

        // Turning push off.
        Row(
            name: "off: removed, no record", state: state(.disabling, phase: .on, record: record(), system: granted),
            input: .removed(nil), phase: .off, step: .idle, effects: [.save(nil), .finished(nil)],
            also: { $0.record == nil }),
        Row(
            name: "off, not removed: stays on and says why",
            state: state(.disabling, phase: .on, record: record()), input: .removed(refused), phase: .on,
            step: .idle, effects: [.finished(refused)], also: { $0.record != nil }),

        // At once: sign-in, sign-out, tokens, sites.
        Row(
            name: "sign-in over another user's record: it is dropped",
            state: Machine.State(),
            input: .login(
                user: "ada", tenants: [],
                stored: {
                    var other = record()
                    other.user = "bob"
                    return other
                }(), legacyFlag: false), phase: .off, step: .idle, effects: [.save(nil)],
            also: { $0.record == nil && $0.session == 1 }),
        Row(
            name: "sign-in with an earlier version's flag: push is wanted", state: Machine.State(),
            input: .login(user: "ada", tenants: [], stored: nil, legacyFlag: true), phase: .off, step: .idle,
            effects: [], also: { $0.wantsOn }),
        Row(
            name: "sign-in with a record: the flag is not needed", state: Machine.State(),
            input: .login(user: "ada", tenants: [], stored: record(), legacyFlag: true), phase: .off, step: .idle,
            effects: [], also: { !$0.wantsOn && $0.record == record() }),
        Row(
            name: "sign-out: the device removed in the background with the kept token",
            state: state(phase: .on, record: record()), input: .logout(farewell: true), phase: .loggedOut,
            step: .idle, effects: [.save(nil), .removeInBackground(deviceID)],
            also: { $0.user == nil && $0.record == nil && $0.session == 2 }),
        Row(
            name: "sign-out while waiting for a token: the wait ends, nothing registers",
            state: state(.awaitingToken(attempt: 0, settings: granted), phase: .waitingForToken(attempt: 1)),
            input: .logout(farewell: true), phase: .loggedOut, step: .idle,
            effects: [.save(nil), .stopWaitingForToken, .finished(nil)]),
        Row(
            name: "sign-out during a pause: the pause ends",
            state: state(.pausing(attempt: 1, settings: granted)), input: .logout(farewell: false),
            phase: .loggedOut, step: .idle, effects: [.save(nil), .stopPausing, .finished(nil)]),
        Row(
            name: "sign-out while registering: the answer is awaited",
            state: state(registering, phase: .registering), input: .logout(farewell: true), phase: .loggedOut,
            step: registering, effects: [.save(nil)]),
        Row(
            name: "a token when nothing waits for one: kept", state: state(phase: .on, record: record()),
            input: .tokenArrived("bb"), phase: .on, step: .idle, effects: [], also: { $0.latestToken == "bb" }),
        Row(
            name: "new sites: the record keeps them", state: state(phase: .on, record: record()),
            input: .setTenants(["enwiki", "dewiki"]), phase: .on, step: .idle,
            effects: [
                .save(
                    {
                        var sites = record()
                        sites.tenants = ["enwiki", "dewiki"]
                        return sites
                    }())
            ]),
    ]

    @Test("each step and its answers, each operation, sign-in and sign-out", arguments: rows)
    func row(_ row: Row) {
        let (next, effects) = Machine.transition(row.state, row.input, configuration: row.configuration)
        #expect(next.phase == row.phase)
        #expect(next.step == row.step)
        #expect(effects == row.effects)
        #expect(row.also(next))
    }

    /// One value of every step; the switch fails to compile when a step is added without one.
    static let everyStep: [Step] = {
        let samples: [Step] = [
            .idle, .provisionalSettings, .provisionalPrompt, .reconcileSettings, .revoking, .askingToken,
            .subscribeSettings(asking: true), .prompting(full: false), .promptSettings,
            .pausing(attempt: 1, settings: granted), .awaitingToken(attempt: 0, settings: granted), registering,
            .removingReplaced(then: .done), .prominentSettings, .prominentPrompt, .disabling,
        ]
        for step in samples {
            switch step {
            case .idle, .provisionalSettings, .provisionalPrompt, .reconcileSettings, .revoking, .askingToken,
                .subscribeSettings, .prompting, .promptSettings, .pausing, .awaitingToken, .registering,
                .removingReplaced, .prominentSettings, .prominentPrompt, .disabling:
                break
            }
        }
        return samples
    }()

    /// One value of every answer a step can wait for.
    static let everyAnswer: [Input] = [
        .settings(granted), .prompted(granted: true), .tokenAsked, .tokenTimedOut(attempt: 0), .paused(attempt: 1),
        .registered(deviceID: deviceID, at: confirmed), .registrationFailed(refused), .removed(nil),
    ]

    /// The answers `step` waits for.
    static func waitsFor(_ step: Step, _ answer: Input) -> Bool {
        switch (step, answer) {
        case (.provisionalSettings, .settings), (.reconcileSettings, .settings), (.subscribeSettings, .settings),
            (.promptSettings, .settings), (.prominentSettings, .settings), (.provisionalPrompt, .prompted),
            (.prompting, .prompted), (.prominentPrompt, .prompted), (.revoking, .removed),
            (.removingReplaced, .removed), (.disabling, .removed), (.askingToken, .tokenAsked),
            (.pausing, .paused), (.awaitingToken, .tokenTimedOut), (.registering, .registered),
            (.registering, .registrationFailed):
            true
        default:
            false
        }
    }

    @Test("every step ignores every answer it does not wait for, and ends on a stale one")
    func everyStepEveryAnswer() {
        var waited = 0
        for step in Self.everyStep {
            for answer in Self.everyAnswer {
                let current = Self.state(step, phase: .on, record: Self.record())
                let (next, effects) = Machine.transition(current, answer, configuration: Self.configuration)
                guard Self.waitsFor(step, answer) else {
                    #expect(next == current && effects.isEmpty, "\(step) ignores \(answer)")
                    continue
                }
                waited += 1
                #expect(next.step != step || effects.isEmpty == false, "\(step) moves on \(answer)")

                // The same answer after a sign-out (a new session) ends the operation and
                // changes nothing else; a device the server registered meanwhile is removed.
                var signedOut = current
                signedOut.session += 1
                signedOut.farewell = true
                let (stale, staleEffects) = Machine.transition(signedOut, answer, configuration: Self.configuration)
                var expected = signedOut
                expected.step = .idle
                #expect(stale == expected, "\(step) ends on a stale \(answer)")
                if case .registered(let device, _) = answer {
                    #expect(staleEffects == [.removeInBackground(device), .finished(nil)])
                } else {
                    #expect(staleEffects == [.finished(nil)])
                }
            }
        }
        #expect(waited == 16, "each step's answers are all in the table")
    }

    @Test("a timer of another attempt is not the step's answer")
    func otherAttempts() {
        for (step, answer) in [
            (Step.awaitingToken(attempt: 1, settings: Self.granted), Input.tokenTimedOut(attempt: 0)),
            (Step.pausing(attempt: 2, settings: Self.granted), Input.paused(attempt: 1)),
        ] {
            let current = Self.state(step)
            let (next, effects) = Machine.transition(current, answer, configuration: Self.configuration)
            #expect(next == current && effects.isEmpty)
        }
    }
}
