import BelfryCore
import Foundation
import Observation

/// The device's push subscription as the app keeps it. It is written only after the server
/// confirmed the registration, so a record on disk always names a device the server has.
public struct PushSubscriptionRecord: Codable, Sendable, Equatable {
    /// The device token, hex.
    public var token: String
    /// The server's id for this device.
    public var deviceID: UUID
    /// The user the device was registered for.
    public var user: String
    public var topic: String?
    public var environment: APNsEnvironment
    /// The user's sites when the subscription was confirmed; type toggles go to all of them.
    public var tenants: [String]
    /// What the server last heard of the OS permission and settings.
    public var authorization: PushAuthorization
    public var settings: PushSettings
    public var confirmedAt: Date
}

/// A boolean "subscribed" flag an earlier version of the app kept (seed 000's note), read once
/// and cleared after the record replaced it.
public struct LegacySubscriptionFlag: Sendable {
    public let read: @Sendable () -> Bool
    public let clear: @Sendable () -> Void

    public init(read: @escaping @Sendable () -> Bool, clear: @escaping @Sendable () -> Void) {
        self.read = read
        self.clear = clear
    }

    /// A flag stored with `UserDefaults.set(_: Bool, forKey:)`.
    public static func userDefaults(_ key: String, suiteName: String? = nil) -> LegacySubscriptionFlag {
        LegacySubscriptionFlag(
            read: { (UserDefaults(suiteName: suiteName) ?? .standard).bool(forKey: key) },
            clear: { (UserDefaults(suiteName: suiteName) ?? .standard).removeObject(forKey: key) })
    }
}

/// How the app registers for push.
public struct PushRegistrationOptions: Sendable {
    /// The app's bundle id, when it differs from the server's configured topic.
    public var topic: String?
    /// `sandbox` for development builds, `production` for TestFlight and the App Store.
    public var environment: APNsEnvironment
    /// What the primary toggle asks the OS for.
    public var authorizationOptions: AuthorizationOptions
    /// How long to wait for the OS to give a device token after asking for one.
    public var tokenTimeout: TimeInterval
    /// Waits before asking the OS for a token again; when they are used up, subscribing failed.
    public var tokenRetryDelays: [TimeInterval]
    /// Seed 000 step 10 (off by default, as the seed leaves it open): follow the OS permission,
    /// subscribing when it is granted in Settings and removing the device when it is revoked.
    public var followsSystemPermission: Bool
    /// Seed 003: request provisional authorization at sign-in (and at each launch that signs the
    /// user in) while the OS has not asked yet. It shows no prompt; the device registers and
    /// notifications arrive quietly in the Notification Center until the user keeps or turns
    /// them off there, or asks for them prominently (``PushRegistration/requestProminentDelivery()``).
    public var requestsProvisionalAtLaunch: Bool
    /// A flag from an earlier version of the app, migrated to the record on login.
    public var legacyFlag: LegacySubscriptionFlag?
    public var locale: String?
    public var appVersion: String?
    /// Where the device's token comes from: APNs (the token's bytes, sent as hex) or FCM (an
    /// app on Android, whose registration token's UTF-8 the token source gives).
    public var platform: DevicePlatform
    /// Which of the server's apps the device belongs to, when it has several of the platform.
    public var app: String?

    public init(
        topic: String? = nil, environment: APNsEnvironment,
        authorizationOptions: AuthorizationOptions = [
            .alert, .sound, .badge,
        ], tokenTimeout: TimeInterval = 10, tokenRetryDelays: [TimeInterval] = [5, 30],
        followsSystemPermission: Bool = false, requestsProvisionalAtLaunch: Bool = false,
        legacyFlag: LegacySubscriptionFlag? = nil, locale: String? = nil, appVersion: String? = nil,
        platform: DevicePlatform = .apns, app: String? = nil
    ) {
        self.platform = platform
        self.app = app
        self.topic = topic
        self.environment = environment
        self.authorizationOptions = authorizationOptions
        self.tokenTimeout = tokenTimeout
        self.tokenRetryDelays = tokenRetryDelays
        self.followsSystemPermission = followsSystemPermission
        self.requestsProvisionalAtLaunch = requestsProvisionalAtLaunch
        self.legacyFlag = legacyFlag
        self.locale = locale
        self.appVersion = appVersion
    }
}

/// The device's push subscription as an explicit state machine (seed 000 steps 1, 2, 5, 6, 9
/// and 10): ask permission in context, wait for the device token (which may come before
/// permission, long after, or never), register the device, and keep the server told of the
/// OS's permission and settings, which it shapes payloads to.
///
/// ```
/// loggedOut ──login──▶ off ──enable──▶ requestingPermission ──granted──▶ waitingForToken
///                       ▲                      │ refused                        │ token
///                       │                      ▼                                ▼
///                       └──disable─── on ◀── registering ◀────────────── (token known)
///        denied ◀── permission turned off      │ server refused / no token
///                                              ▼
///                                            failed ──retry──▶ …
/// ```
///
/// Every decision is made by a pure transition function, `PushRegistrationMachine`: given the
/// state and what happened (an operation, the OS settings, a prompt's answer, a token, the
/// server's answer), the next state and what to do. This class only does it (reads the
/// settings, prompts, waits for a token, calls the server, saves the record) and reports back.
@MainActor
@Observable
public final class PushRegistration {
    public enum Phase: Sendable, Equatable {
        /// Nobody is signed in: no push settings at all.
        case loggedOut
        /// Not subscribed, and the OS permission does not stand in the way.
        case off
        /// The OS is asking the user.
        case requestingPermission
        /// Waiting for the OS to give a device token; `attempt` asks so far.
        case waitingForToken(attempt: Int)
        /// Telling the server about the device.
        case registering
        /// Subscribed; the server has the device and its current settings.
        case on
        /// The OS permission is denied: only the system's Settings can change it.
        case denied
        /// Subscribing failed; `retry()` tries again.
        case failed(BelfryClientError)
    }

    /// Where the subscription stands.
    public var phase: Phase { machine.state.phase }
    /// The confirmed subscription, as persisted.
    public var record: PushSubscriptionRecord? { machine.state.record }
    /// The OS's notification settings, as last read.
    public var systemSettings: NotificationSettings? { machine.state.systemSettings }
    /// The signed-in user.
    public var user: String? { machine.state.user }
    /// The user's sites.
    public var tenants: [String] { machine.state.tenants }

    /// Whether a request is under way (the primary toggle is disabled meanwhile).
    public var isBusy: Bool {
        switch phase {
        case .requestingPermission, .waitingForToken, .registering: true
        default: running
        }
    }

    /// Whether the primary toggle shows on.
    public var isOn: Bool {
        switch phase {
        case .on, .requestingPermission, .waitingForToken, .registering: true
        default: false
        }
    }

    /// The decisions; this class performs what they say and reports what came of it.
    private var machine: PushRegistrationMachine
    /// Whether an operation runs (the toggle shows busy).
    private var running = false
    @ObservationIgnored private let api: BelfryAPI
    @ObservationIgnored private let store: any KeyValueStore
    @ObservationIgnored private let authorizer: any NotificationAuthorizing
    @ObservationIgnored private let tokenSource: any DeviceTokenSource
    @ObservationIgnored private let options: PushRegistrationOptions
    /// The newest token the OS gave, hex.
    var latestToken: String? { machine.state.latestToken }
    @ObservationIgnored private var tokens: Task<Void, Never>?
    /// Operations waiting for the one that runs, in order.
    @ObservationIgnored private var queued: [CheckedContinuation<Void, Never>] = []
    /// The running operation's caller, told when the machine says it is finished.
    @ObservationIgnored private var finishing: CheckedContinuation<BelfryClientError?, Never>?
    @ObservationIgnored private var tokenTimer: Task<Void, Never>?
    /// The wait before asking the OS for a token again; logout cuts it short.
    @ObservationIgnored private var retryPause: Task<Void, Never>?
    /// The signed-out session's API, for a subscribe that finishes after logout.
    @ObservationIgnored private var farewell: BelfryAPI?
    /// Removals under way in the background (logout), for tests and the simulator to await.
    @ObservationIgnored private var removals: [Task<Void, Never>] = []
    static let storeKey = "belfry.push.subscription.v1"

    public init(
        client: BelfryClient, authorizer: any NotificationAuthorizing, tokenSource: any DeviceTokenSource,
        options: PushRegistrationOptions
    ) {
        api = client.api
        store = client.store
        self.authorizer = authorizer
        self.tokenSource = tokenSource
        self.options = options
        machine = PushRegistrationMachine(
            configuration: .init(
                topic: options.topic, environment: options.environment,
                authorizationOptions: options.authorizationOptions, tokenRetryDelays: options.tokenRetryDelays,
                followsSystemPermission: options.followsSystemPermission,
                requestsProvisionalAtLaunch: options.requestsProvisionalAtLaunch))
        let stream = tokenSource.tokens()
        tokens = Task { [weak self] in
            for await token in stream {
                await self?.tokenArrived(
                    options.platform == .fcm ? String(decoding: token, as: UTF8.self) : token.hexToken)
            }
        }
    }

    isolated deinit {
        tokens?.cancel()
        retryPause?.cancel()
        tokenTimer?.cancel()
    }

    // MARK: What the app and the settings screen call

    /// After sign-in, and at each launch with a signed-in user (seed 000 step 5's first half):
    /// loads the record, migrates an earlier version's flag, requests provisional authorization
    /// when the options ask for it, and reads the OS settings.
    public func login(user: String, tenants: [String]) async {
        feed(
            .login(
                user: user, tenants: tenants, stored: loadRecord(), legacyFlag: options.legacyFlag?.read() ?? false))
        await run(.launch)
    }

    /// The user's sites changed; the record keeps them.
    public func setTenants(_ tenants: [String]) {
        feed(.setTenants(tenants))
    }

    /// Seed 000 steps 5 and 6: when the screen appears and whenever the app comes to the
    /// foreground, read the OS settings again; they may have changed in Settings.
    public func recheck() async {
        guard user != nil else { return }
        await run(.recheck)
    }

    /// The primary toggle turned on (seed 000 step 2): asks permission in context, waits for the
    /// device token and registers the device.
    public func enable() async {
        guard user != nil else { return }
        feed(.want(true))
        await run(.subscribe(asking: true))
    }

    /// Seed 003: notifications delivered quietly (provisional authorization) become prominent
    /// only when the user says so. Asks the OS for full authorization, which prompts, and tells
    /// the server the answer; nothing happens unless the authorization is provisional.
    public func requestProminentDelivery() async {
        guard user != nil else { return }
        await run(.prominent)
    }

    /// After a failure: the same as turning the toggle on again.
    public func retry() async {
        await enable()
    }

    /// The primary toggle turned off: the server forgets the device.
    /// - Throws: when the server cannot be reached; the subscription stays, the toggle flips back.
    public func disable() async throws(BelfryClientError) {
        guard user != nil else { return }
        feed(.want(false))
        if let failure = await run(.disable) { throw failure }
    }

    /// Seed 000 step 9: on sign-out, the device is removed behind the scenes. Call it before
    /// the app forgets the user's credentials: it reads the token once, then returns at once;
    /// the removal goes on in the background with that token.
    public func logout() async {
        guard user != nil else { return }
        let token = try? await api.tokenProvider.token(refresh: false)
        // A subscribe under way stops at its next step; one whose registration already reached
        // the server removes the device itself.
        farewell = token.map { api.with(token: $0) }
        feed(.logout(farewell: farewell != nil))
    }

    /// Waits for work under way, including background removals (tests, the simulator).
    public func settled() async {
        await run(.settle)
        while !removals.isEmpty {
            let pending = removals
            removals.removeAll()
            for removal in pending { await removal.value }
        }
    }

    // MARK: Driving the machine

    /// Runs one operation at a time, in order, until the machine says it is finished.
    @discardableResult
    private func run(_ operation: PushRegistrationMachine.Input) async -> BelfryClientError? {
        if running { await withCheckedContinuation { queued.append($0) } }
        running = true
        let failure = await withCheckedContinuation { continuation in
            finishing = continuation
            feed(operation)
        }
        // The next operation takes over the turn, or nothing runs.
        if queued.isEmpty { running = false } else { queued.removeFirst().resume() }
        return failure
    }

    /// Hands the machine an input and performs what it says.
    private func feed(_ input: PushRegistrationMachine.Input) {
        for effect in machine.handle(input) { perform(effect) }
    }

    private func perform(_ effect: PushRegistrationMachine.Effect) {
        switch effect {
        case .readSettings:
            Task { feed(.settings(await authorizer.notificationSettings())) }
        case .requestAuthorization(let options):
            Task { feed(.prompted(granted: (try? await authorizer.requestAuthorization(options: options)) == true)) }
        case .askForToken:
            Task {
                await tokenSource.register()
                feed(.tokenAsked)
            }
        case .waitForToken(let attempt):
            tokenTimer?.cancel()
            tokenTimer = Task { [clock = api.clock, timeout = options.tokenTimeout] in
                await tokenSource.register()
                guard (try? await clock.sleep(for: timeout)) != nil else { return }
                feed(.tokenTimedOut(attempt: attempt))
            }
        case .stopWaitingForToken:
            tokenTimer?.cancel()
            tokenTimer = nil
        case .pause(let attempt, let seconds):
            retryPause?.cancel()
            retryPause = Task { [clock = api.clock] in
                guard (try? await clock.sleep(for: seconds)) != nil else { return }
                feed(.paused(attempt: attempt))
            }
        case .stopPausing:
            retryPause?.cancel()
            retryPause = nil
        case .register(let token, let settings):
            let apns = options.platform == .apns
            let registration = DeviceRegistration(
                platform: options.platform, token: token, environment: apns ? options.environment : nil,
                topic: apns ? options.topic : nil, authorization: settings.authorizationStatus,
                settings: settings.pushSettings, locale: options.locale, appVersion: options.appVersion,
                app: options.app)
            Task {
                do throws(BelfryClientError) {
                    let device = try await api.send("POST", "v1/me/devices", body: registration, idempotent: true)
                        .decode(DeviceRecord.self)
                    feed(.registered(deviceID: device.id, at: api.clock.now()))
                } catch {
                    feed(.registrationFailed(error))
                }
            }
        case .remove(let device):
            Task {
                do throws(BelfryClientError) {
                    try await remove(device, using: api)
                    feed(.removed(nil))
                } catch {
                    feed(.removed(error))
                }
            }
        case .removeInBackground(let device):
            guard let farewell else { return }
            removals.append(Task { try? await self.remove(device, using: farewell) })
        case .save(let record):
            store.set(record.flatMap { try? BelfryAPI.encoder.encode($0) }, forKey: Self.storeKey)
        case .clearLegacyFlag:
            options.legacyFlag?.clear()
        case .finished(let failure):
            let caller = finishing
            finishing = nil
            caller?.resume(returning: failure)
        }
    }

    private func remove(_ device: UUID, using api: BelfryAPI) async throws(BelfryClientError) {
        _ = try await api.send(
            "DELETE", "v1/me/devices/\(device.uuidString)", idempotent: true, accepting: [404])
    }

    /// A token from the OS: a subscribe waiting for one takes it at once; then, in turn, a
    /// changed token replaces the device's, and a late one completes a subscribe that gave up.
    private func tokenArrived(_ token: String) async {
        feed(.tokenArrived(token))
        guard user != nil else { return }
        await run(.tokenFollowUp(token))
    }

    private func loadRecord() -> PushSubscriptionRecord? {
        store.data(forKey: Self.storeKey).flatMap {
            try? BelfryAPI.decoder.decode(PushSubscriptionRecord.self, from: $0)
        }
    }
}

extension BelfryAPI {
    /// The same API with a fixed token: work that must finish for a user who signed out.
    func with(token: String) -> BelfryAPI {
        BelfryAPI(
            baseURL: baseURL, tokenProvider: ClosureTokenProvider { _ in token }, transport: transport, clock: clock,
            retryDelays: retryDelays)
    }
}
