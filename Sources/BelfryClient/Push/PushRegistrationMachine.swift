import BelfryCore
import Foundation

/// The push subscription's decisions, without any waiting: given where things stand and what
/// just happened, where they stand next and what to do (``PushRegistration`` does it, and tells
/// the machine what came of it).
///
/// An operation (signing in, turning push on or off, a recheck, a new token) runs one step at a
/// time: each step asks for one thing (the OS settings, a prompt, a device token, the server's
/// answer) and waits in ``Step`` for its result. Results from an earlier session (the user signed
/// out meanwhile) end the operation, except a registration the server already made, whose device
/// is removed again. Signing out and a token from the OS act at once, whatever runs.
struct PushRegistrationMachine: Equatable {
    /// What the machine needs to know of the app's options.
    struct Configuration: Equatable {
        var topic: String?
        var environment: APNsEnvironment
        var authorizationOptions: AuthorizationOptions
        /// How many times the machine asks the OS for a token again after the first.
        var tokenRetryDelays: [TimeInterval]
        var followsSystemPermission: Bool
        var requestsProvisionalAtLaunch: Bool
    }

    struct State: Equatable {
        var phase: PushRegistration.Phase = .loggedOut
        var user: String?
        var tenants: [String] = []
        var record: PushSubscriptionRecord?
        var systemSettings: NotificationSettings?
        /// The newest token the OS gave.
        var latestToken: String?
        /// Whether the user wants push on and it is not there yet (a late token completes it).
        var wantsOn = false
        /// Bumped on sign-in and sign-out: results of an earlier session's steps are stale.
        var session = 0
        /// Whether the signed-out user's token was kept to remove their device with.
        var farewell = false
        /// The session the running operation started in.
        var operationSession = 0
        var step: Step = .idle
    }

    /// What the running operation waits for.
    enum Step: Equatable {
        case idle
        /// Sign-in: the settings, to see whether provisional authorization may be asked for.
        case provisionalSettings
        /// Sign-in: the answer to the provisional request.
        case provisionalPrompt
        /// A recheck: the OS settings.
        case reconcileSettings
        /// A recheck found the permission revoked: the device's removal.
        case revoking
        /// A recheck is done: the OS was asked for the token again (it may have changed).
        case askingToken
        /// Subscribing: the settings, and whether to prompt.
        case subscribeSettings(asking: Bool)
        /// Subscribing: the prompt's answer (`full`: asking more than provisional delivery).
        case prompting(full: Bool)
        /// Subscribing: the settings after the prompt.
        case promptSettings
        /// Subscribing: the pause before asking for a token again.
        case pausing(attempt: Int, settings: NotificationSettings)
        /// Subscribing: a token, or the timeout.
        case awaitingToken(attempt: Int, settings: NotificationSettings)
        /// The server's answer to a registration.
        case registering(
            token: String, settings: NotificationSettings, replaced: PushSubscriptionRecord?, then: AfterRegistration)
        /// A new device replaced the old one: the old one's removal.
        case removingReplaced(then: AfterRegistration)
        /// Prominent delivery: the settings, which must say provisional.
        case prominentSettings
        /// Prominent delivery: the prompt's answer.
        case prominentPrompt
        /// Turning push off: the device's removal.
        case disabling
    }

    /// What follows a registration.
    enum AfterRegistration: Equatable {
        /// Nothing: the operation is done.
        case done
        /// A recheck's last part, with the permission it read.
        case recheck(PushAuthorization)
    }

    enum Input: Equatable {
        // At once, whatever runs.
        case login(user: String, tenants: [String], stored: PushSubscriptionRecord?, legacyFlag: Bool)
        case setTenants([String])
        case want(Bool)
        case logout(farewell: Bool)
        case tokenArrived(String)
        // Operations, one at a time.
        case launch
        case recheck
        case subscribe(asking: Bool)
        case prominent
        case disable
        case tokenFollowUp(String)
        case settle
        // Results.
        case settings(NotificationSettings)
        case prompted(granted: Bool)
        case tokenAsked
        case tokenTimedOut(attempt: Int)
        case paused(attempt: Int)
        case registered(deviceID: UUID, at: Date)
        case registrationFailed(BelfryClientError)
        case removed(BelfryClientError?)
    }

    enum Effect: Equatable {
        case readSettings
        case requestAuthorization(AuthorizationOptions)
        /// Asks the OS for a token and reports ``Input/tokenAsked``.
        case askForToken
        /// Asks the OS for a token and reports ``Input/tokenTimedOut(attempt:)`` unless a token
        /// comes first.
        case waitForToken(attempt: Int)
        case stopWaitingForToken
        /// Waits the retry delay before `attempt`, then reports ``Input/paused(attempt:)``.
        case pause(attempt: Int, seconds: TimeInterval)
        case stopPausing
        case register(token: String, settings: NotificationSettings)
        case remove(UUID)
        /// Removes a device with the signed-out user's token, without waiting.
        case removeInBackground(UUID)
        case save(PushSubscriptionRecord?)
        case clearLegacyFlag
        /// The operation is done; `disable` reports its error.
        case finished(BelfryClientError?)
    }

    let configuration: Configuration
    private(set) var state = State()

    init(configuration: Configuration, state: State = State()) {
        self.configuration = configuration
        self.state = state
    }

    /// The transition: where things stand after `input`, and what to do.
    static func transition(
        _ state: State, _ input: Input, configuration: Configuration
    ) -> (State, [Effect]) {
        var machine = PushRegistrationMachine(configuration: configuration, state: state)
        let effects = machine.handle(input)
        return (machine.state, effects)
    }

    mutating func handle(_ input: Input) -> [Effect] {
        switch input {
        case .login(let user, let tenants, let stored, let legacyFlag):
            state.session += 1
            state.user = user
            state.tenants = tenants
            state.record = stored
            state.phase = .off
            var effects: [Effect] = []
            if let stored, stored.user != user {
                // Registered for someone else: this user's registration will move the device.
                state.record = nil
                effects.append(.save(nil))
            }
            if state.record == nil, legacyFlag { state.wantsOn = true }
            return effects
        case .setTenants(let tenants):
            state.tenants = tenants
            guard state.record != nil else { return [] }
            state.record?.tenants = tenants
            return [.save(state.record)]
        case .want(let on):
            state.wantsOn = on
            return []
        case .logout(let farewell):
            return logout(farewell: farewell)
        case .tokenArrived(let token):
            state.latestToken = token
            // A subscribe waiting for a token takes it here.
            guard case .awaitingToken(_, let settings) = state.step, isCurrent else { return [] }
            return [.stopWaitingForToken] + register(token: token, settings: settings, then: .done)
        case .launch, .recheck, .subscribe, .prominent, .disable, .tokenFollowUp, .settle:
            guard state.step == .idle else { return [] }
            state.operationSession = state.session
            return start(input)
        case .settings, .prompted, .tokenAsked, .tokenTimedOut, .paused, .registered, .registrationFailed, .removed:
            return result(input)
        }
    }

    // MARK: Operations

    private var isCurrent: Bool { state.operationSession == state.session }

    private mutating func start(_ operation: Input) -> [Effect] {
        switch operation {
        case .launch:
            if configuration.requestsProvisionalAtLaunch, state.record == nil {
                state.step = .provisionalSettings
                return [.readSettings]
            }
            return recheck()
        case .recheck:
            return recheck()
        case .subscribe(let asking):
            state.step = .subscribeSettings(asking: asking)
            return [.readSettings]
        case .prominent:
            state.step = .prominentSettings
            return [.readSettings]
        case .disable:
            if let record = state.record {
                state.step = .disabling
                return [.remove(record.deviceID)]
            }
            state.phase = Self.phase(unsubscribedWith: state.systemSettings?.authorizationStatus)
            return finish()
        case .tokenFollowUp(let token):
            guard state.user != nil, state.latestToken == token else { return finish() }
            if let record = state.record, record.token != token {
                // Seed 000: resubscribe when the OS changes the token.
                return register(
                    token: token, settings: state.systemSettings ?? Self.knownSettings(record), then: .done)
            }
            if state.record == nil, state.wantsOn, case .failed = state.phase {
                // The token came late, after subscribing gave up: finish what the user asked for.
                state.step = .subscribeSettings(asking: false)
                return [.readSettings]
            }
            return finish()
        default:
            return finish()
        }
    }

    private mutating func recheck() -> [Effect] {
        state.step = .reconcileSettings
        return [.readSettings]
    }

    private mutating func logout(farewell: Bool) -> [Effect] {
        state.session += 1
        let ending = state.record
        state.user = nil
        state.tenants = []
        state.record = nil
        state.wantsOn = false
        state.phase = .loggedOut
        state.farewell = farewell
        var effects: [Effect] = [.save(nil)]
        if let ending, farewell { effects.append(.removeInBackground(ending.deviceID)) }
        // A step waiting on a timer ends now; one waiting on the OS or the server ends when
        // its answer comes (a registration that reached the server removes its device then).
        switch state.step {
        case .awaitingToken:
            effects.append(.stopWaitingForToken)
            effects += finish()
        case .pausing:
            effects.append(.stopPausing)
            effects += finish()
        default:
            break
        }
        return effects
    }

    // MARK: Results

    private mutating func result(_ input: Input) -> [Effect] {
        switch (state.step, input) {
        case (.registering(_, _, _, _), .registered(let deviceID, _)) where !isCurrent:
            // Signed out meanwhile: the device must not stay registered for the old user.
            return (state.farewell ? [.removeInBackground(deviceID)] : []) + finish()
        case (.idle, _):
            return []
        case (_, _) where !isCurrent:
            guard Self.answers(state.step, input) else { return [] }
            return finish()
        default:
            // Not the answer this step waits for (a timer that fired late, say) gives nil: no effects.
            return permissionResult(input) ?? tokenResult(input) ?? registrationResult(input) ?? []
        }
    }

    /// The answers of the permission steps: the system's settings and its prompt.
    private mutating func permissionResult(_ input: Input) -> [Effect]? {
        switch (state.step, input) {
        case (.provisionalSettings, .settings(let settings)):
            guard settings.authorizationStatus == .notDetermined else { return recheck() }
            state.step = .provisionalPrompt
            return [.requestAuthorization(configuration.authorizationOptions.union(.provisional))]
        case (.provisionalPrompt, .prompted(let granted)):
            // The trial needs the device at the server, or nothing can arrive quietly.
            if granted { state.wantsOn = true }
            return recheck()
        case (.reconcileSettings, .settings(let settings)):
            state.systemSettings = settings
            return reconcile(settings)
        case (.subscribeSettings(let asking), .settings(let settings)):
            if asking, settings.authorizationStatus == .notDetermined {
                state.phase = .requestingPermission
                state.step = .prompting(full: false)
                return [.requestAuthorization(configuration.authorizationOptions)]
            }
            if asking, settings.authorizationStatus == .provisional {
                // Seed 003: turning push on is the moment to ask for more than quiet delivery.
                // If the user lets the prompt pass, provisional authorization still delivers quietly.
                state.phase = .requestingPermission
                state.step = .prompting(full: true)
                return [.requestAuthorization(configuration.authorizationOptions.subtracting(.provisional))]
            }
            return subscribe(with: settings)
        case (.prompting(let full), .prompted):
            if full, state.record != nil {
                // Already registered quietly: the server learns the answer, whatever it is.
                return recheck()
            }
            state.step = .promptSettings
            return [.readSettings]
        case (.promptSettings, .settings(let settings)):
            return subscribe(with: settings)
        case (.prominentSettings, .settings(let settings)):
            guard settings.authorizationStatus == .provisional else { return finish() }
            state.phase = .requestingPermission
            state.step = .prominentPrompt
            return [.requestAuthorization(configuration.authorizationOptions.subtracting(.provisional))]
        case (.prominentPrompt, .prompted):
            return recheck()
        default:
            return nil
        }
    }

    /// The answers of the token steps: a pause between asks, the ask, and its timeout.
    private mutating func tokenResult(_ input: Input) -> [Effect]? {
        switch (state.step, input) {
        case (.askingToken, .tokenAsked):
            return finish()
        case (.pausing(let attempt, let settings), .paused(let paused)) where paused == attempt:
            return askForToken(attempt: attempt, settings: settings)
        case (.awaitingToken(let attempt, let settings), .tokenTimedOut(let timedOut)) where timedOut == attempt:
            guard attempt < configuration.tokenRetryDelays.count else {
                state.phase = .failed(
                    BelfryClientError(
                        code: .pushTokenUnavailable,
                        message: "the system gave no device token; check the network connection and try again"))
                return finish()
            }
            state.step = .pausing(attempt: attempt + 1, settings: settings)
            return [.pause(attempt: attempt + 1, seconds: configuration.tokenRetryDelays[attempt])]
        default:
            return nil
        }
    }

    /// The server's answers: a registration, a removal.
    private mutating func registrationResult(_ input: Input) -> [Effect]? {
        switch (state.step, input) {
        case (.revoking, .removed(let error)):
            var effects: [Effect] = []
            if error == nil {
                state.record = nil
                effects.append(.save(nil))
            }
            state.phase = .denied
            return effects + finish()
        case (.registering(let token, let settings, let replaced, let then), .registered(let deviceID, let now)):
            guard let user = state.user else { return finish() }
            let record = PushSubscriptionRecord(
                token: token, deviceID: deviceID, user: user, topic: configuration.topic,
                environment: configuration.environment, tenants: state.tenants,
                authorization: settings.authorizationStatus, settings: settings.pushSettings, confirmedAt: now)
            state.record = record
            state.wantsOn = false
            state.phase = Self.phase(subscribedWith: settings.authorizationStatus)
            let effects: [Effect] = [.save(record), .clearLegacyFlag]
            if let replaced, replaced.deviceID != deviceID {
                // A new token is a new device: the old one would only collect failures.
                state.step = .removingReplaced(then: then)
                return effects + [.remove(replaced.deviceID)]
            }
            return effects + after(then)
        case (.registering(_, _, let replaced, let then), .registrationFailed(let error)):
            if let replaced {
                // An update that failed: the subscription stands; the next recheck tries again.
                state.phase = Self.phase(subscribedWith: replaced.authorization)
            } else {
                state.phase = .failed(error)
            }
            return after(then)
        case (.removingReplaced(let then), .removed):
            return after(then)
        case (.disabling, .removed(let error)):
            // A failed removal keeps the subscription; the toggle flips back.
            if let error { return finish(error) }
            state.record = nil
            state.phase = Self.phase(unsubscribedWith: state.systemSettings?.authorizationStatus)
            return [.save(nil)] + finish()
        default:
            return nil
        }
    }

    /// Whether `input` is the kind of answer `step` waits for.
    private static func answers(_ step: Step, _ input: Input) -> Bool {
        switch (step, input) {
        case (.provisionalSettings, .settings), (.reconcileSettings, .settings), (.subscribeSettings, .settings),
            (.promptSettings, .settings), (.prominentSettings, .settings):
            true
        case (.provisionalPrompt, .prompted), (.prompting, .prompted), (.prominentPrompt, .prompted):
            true
        case (.revoking, .removed), (.removingReplaced, .removed), (.disabling, .removed):
            true
        case (.askingToken, .tokenAsked):
            true
        case (.pausing(let attempt, _), .paused(let paused)):
            attempt == paused
        case (.awaitingToken(let attempt, _), .tokenTimedOut(let timedOut)):
            attempt == timedOut
        case (.registering, .registered), (.registering, .registrationFailed):
            true
        default:
            false
        }
    }

    // MARK: The steps

    private mutating func reconcile(_ settings: NotificationSettings) -> [Effect] {
        let status = settings.authorizationStatus
        if let record = state.record {
            if !status.allowsDelivery, configuration.followsSystemPermission {
                // Revoked in Settings: remove the device.
                state.step = .revoking
                return [.remove(record.deviceID)]
            }
            if record.authorization != status || record.settings != settings.pushSettings {
                // The server learns every change, so it sends nothing, quietly, or in full.
                return register(
                    token: state.latestToken ?? record.token, settings: settings, then: .recheck(status))
            }
            return after(.recheck(status))
        }
        if status == .denied {
            // Nothing to migrate: the permission an earlier version's flag stood for is gone.
            state.wantsOn = false
            state.phase = .denied
            return [.clearLegacyFlag] + finish()
        }
        if state.wantsOn || (configuration.followsSystemPermission && status.allowsDelivery) {
            // Asked for earlier (a failed attempt, an earlier version's flag), or permission
            // granted in Settings: subscribe without asking.
            state.step = .subscribeSettings(asking: false)
            return [.readSettings]
        }
        if case .failed = state.phase { return finish() }
        state.phase = .off
        return finish()
    }

    private mutating func subscribe(with settings: NotificationSettings) -> [Effect] {
        state.systemSettings = settings
        guard settings.authorizationStatus.allowsDelivery else {
            state.wantsOn = false
            state.phase = Self.phase(unsubscribedWith: settings.authorizationStatus)
            return [.clearLegacyFlag] + finish()
        }
        return askForToken(attempt: 0, settings: settings)
    }

    /// Uses the token the OS gave, or asks for one and waits (`attempt` 0, then after each delay).
    private mutating func askForToken(attempt: Int, settings: NotificationSettings) -> [Effect] {
        if let token = state.latestToken { return register(token: token, settings: settings, then: .done) }
        state.phase = .waitingForToken(attempt: attempt + 1)
        state.step = .awaitingToken(attempt: attempt, settings: settings)
        return [.waitForToken(attempt: attempt)]
    }

    /// Registers (or updates) the device; the record is saved once the server confirmed it.
    private mutating func register(
        token: String, settings: NotificationSettings, then: AfterRegistration
    ) -> [Effect] {
        guard state.user != nil else { return finish() }
        state.phase = .registering
        state.step = .registering(token: token, settings: settings, replaced: state.record, then: then)
        return [.register(token: token, settings: settings)]
    }

    private mutating func after(_ then: AfterRegistration) -> [Effect] {
        switch then {
        case .done:
            return finish()
        case .recheck(let status):
            guard state.record != nil else { return finish() }
            state.phase = Self.phase(subscribedWith: status)
            guard status.allowsDelivery else { return finish() }
            // At each launch and foreground, ask the OS for the token again: it may have changed
            // (a restore, a reinstall), and a new one replaces the old on the server when it
            // arrives (a token follow-up).
            state.step = .askingToken
            return [.askForToken]
        }
    }

    private mutating func finish(_ error: BelfryClientError? = nil) -> [Effect] {
        state.step = .idle
        return [.finished(error)]
    }

    /// Where a device the server has stands, given the OS permission.
    static func phase(subscribedWith status: PushAuthorization) -> PushRegistration.Phase {
        status.allowsDelivery ? .on : phase(unsubscribedWith: status)
    }

    /// Where the toggle rests without a subscription: denied needs the system's Settings.
    static func phase(unsubscribedWith status: PushAuthorization?) -> PushRegistration.Phase {
        status == .denied ? .denied : .off
    }

    static func knownSettings(_ record: PushSubscriptionRecord) -> NotificationSettings {
        NotificationSettings(
            authorizationStatus: record.authorization, alertSetting: record.settings.alert,
            soundSetting: record.settings.sound, badgeSetting: record.settings.badge)
    }
}
