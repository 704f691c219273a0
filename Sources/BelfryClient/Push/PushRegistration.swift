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
    public private(set) var phase: Phase = .loggedOut
    /// The confirmed subscription, as persisted.
    public private(set) var record: PushSubscriptionRecord?
    /// The OS's notification settings, as last read.
    public private(set) var systemSettings: NotificationSettings?
    /// The signed-in user.
    public private(set) var user: String?
    /// The user's sites.
    public private(set) var tenants: [String] = []

    /// Whether a request is under way (the primary toggle is disabled meanwhile).
    public var isBusy: Bool {
        switch phase {
        case .requestingPermission, .waitingForToken, .registering: true
        default: operation != nil
        }
    }

    /// Whether the primary toggle shows on.
    public var isOn: Bool {
        switch phase {
        case .on, .requestingPermission, .waitingForToken, .registering: true
        default: false
        }
    }

    @ObservationIgnored private let api: BelfryAPI
    @ObservationIgnored private let store: any KeyValueStore
    @ObservationIgnored private let authorizer: any NotificationAuthorizing
    @ObservationIgnored private let tokenSource: any DeviceTokenSource
    @ObservationIgnored private let options: PushRegistrationOptions
    /// The newest token the OS gave, hex.
    @ObservationIgnored private(set) var latestToken: String?
    @ObservationIgnored private var tokenWaiter:
        (continuation: CheckedContinuation<String?, Never>, timeout: Task<Void, Never>)?
    @ObservationIgnored private var tokens: Task<Void, Never>?
    @ObservationIgnored private var operation: Task<Void, Never>?
    /// The wait before asking the OS for a token again; logout cuts it short.
    @ObservationIgnored private var retryPause: Task<Void, any Error>?
    /// Whether the user wants push on and it is not there yet (a late token then completes it).
    @ObservationIgnored private var wantsOn = false
    /// Bumped on login and logout: work started for an earlier session stops at its next step.
    @ObservationIgnored private var session = 0
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
        tokenWaiter?.timeout.cancel()
    }

    // MARK: What the app and the settings screen call

    /// After sign-in, and at each launch with a signed-in user (seed 000 step 5's first half):
    /// loads the record, migrates an earlier version's flag, requests provisional authorization
    /// when the options ask for it, and reads the OS settings.
    public func login(user: String, tenants: [String]) async {
        session += 1
        self.user = user
        self.tenants = tenants
        record = loadRecord()
        if let record, record.user != user {
            // Registered for someone else: this user's registration will move the device.
            self.record = nil
            saveRecord()
        }
        phase = .off
        if record == nil, let legacy = options.legacyFlag, legacy.read() {
            wantsOn = true
        }
        await run {
            if self.options.requestsProvisionalAtLaunch, self.record == nil { await self.requestProvisional() }
            await self.reconcile()
        }
    }

    /// The user's sites changed; the record keeps them.
    public func setTenants(_ tenants: [String]) {
        self.tenants = tenants
        if record != nil {
            record?.tenants = tenants
            saveRecord()
        }
    }

    /// Seed 000 steps 5 and 6: when the screen appears and whenever the app comes to the
    /// foreground, read the OS settings again; they may have changed in Settings.
    public func recheck() async {
        guard user != nil else { return }
        await run { await self.reconcile() }
    }

    /// The primary toggle turned on (seed 000 step 2): asks permission in context, waits for the
    /// device token and registers the device.
    public func enable() async {
        guard user != nil else { return }
        wantsOn = true
        await run { await self.subscribe(asking: true) }
    }

    /// Seed 003: notifications delivered quietly (provisional authorization) become prominent
    /// only when the user says so. Asks the OS for full authorization, which prompts, and tells
    /// the server the answer; nothing happens unless the authorization is provisional.
    public func requestProminentDelivery() async {
        guard user != nil else { return }
        await run {
            guard await self.authorizer.notificationSettings().authorizationStatus == .provisional else { return }
            await self.requestFullAuthorization()
            await self.reconcile()
        }
    }

    /// After a failure: the same as turning the toggle on again.
    public func retry() async {
        await enable()
    }

    /// The primary toggle turned off: the server forgets the device.
    /// - Throws: when the server cannot be reached; the subscription stays, the toggle flips back.
    public func disable() async throws(BelfryClientError) {
        guard user != nil else { return }
        wantsOn = false
        var failure: BelfryClientError?
        await run {
            do throws(BelfryClientError) {
                if let record = self.record {
                    try await self.remove(record.deviceID, using: self.api)
                    self.record = nil
                    self.saveRecord()
                }
                self.phase = Self.phase(unsubscribedWith: self.systemSettings?.authorizationStatus)
            } catch {
                failure = error
            }
        }
        if let failure { throw failure }
    }

    /// Seed 000 step 9: on sign-out, the device is removed behind the scenes. Call it before
    /// the app forgets the user's credentials: it reads the token once, then returns at once;
    /// the removal goes on in the background with that token.
    public func logout() async {
        guard user != nil else { return }
        let token = try? await api.tokenProvider.token(refresh: false)
        session += 1
        let ending = record
        let farewell = token.map { api.with(token: $0) }
        user = nil
        tenants = []
        record = nil
        wantsOn = false
        saveRecord()
        phase = .loggedOut
        // A subscribe under way stops at its next step; one whose registration already
        // reached the server removes the device itself (see `register`).
        self.farewell = farewell
        retryPause?.cancel()
        resolveTokenWaiter(nil)
        if let ending, let farewell {
            removals.append(Task { try? await self.remove(ending.deviceID, using: farewell) })
        }
    }

    /// Waits for work under way, including background removals (tests, the simulator).
    public func settled() async {
        while let operation { await operation.value }
        while !removals.isEmpty {
            let pending = removals
            removals.removeAll()
            for removal in pending { await removal.value }
        }
    }

    // MARK: The steps

    /// Runs one operation at a time, in order.
    private func run(_ body: @escaping @MainActor () async -> Void) async {
        while let operation { await operation.value }
        let task = Task { @MainActor in
            await body()
            self.operation = nil
        }
        operation = task
        await task.value
    }

    private func reconcile() async {
        let settings = await authorizer.notificationSettings()
        systemSettings = settings
        let status = settings.authorizationStatus
        if let record {
            if !status.allowsDelivery, options.followsSystemPermission {
                // Revoked in Settings: remove the device.
                if (try? await remove(record.deviceID, using: api)) != nil {
                    self.record = nil
                    saveRecord()
                }
                phase = .denied
                return
            }
            if record.authorization != status || record.settings != settings.pushSettings {
                // The server learns every change, so it sends nothing, quietly, or in full.
                await register(token: latestToken ?? record.token, settings: settings)
            }
            if self.record != nil {
                phase = Self.phase(subscribedWith: status)
                // At each launch and foreground, ask the OS for the token again: it may have
                // changed (a restore, a reinstall), and a new one replaces the old on the server
                // when it arrives (`tokenArrived`).
                if status.allowsDelivery { await tokenSource.register() }
            }
            return
        }
        if status == .denied {
            // Nothing to migrate: the permission an earlier version's flag stood for is gone.
            options.legacyFlag?.clear()
            wantsOn = false
            phase = .denied
            return
        }
        if wantsOn || (options.followsSystemPermission && status.allowsDelivery) {
            // Asked for earlier (a failed attempt, an earlier version's flag), or permission
            // granted in Settings: subscribe without asking.
            await subscribe(asking: false)
            return
        }
        if case .failed = phase { return }
        phase = .off
    }

    private func subscribe(asking: Bool) async {
        let session = self.session
        var settings = await authorizer.notificationSettings()
        if asking, settings.authorizationStatus == .notDetermined {
            phase = .requestingPermission
            _ = try? await authorizer.requestAuthorization(options: options.authorizationOptions)
            guard session == self.session else { return }
            settings = await authorizer.notificationSettings()
        } else if asking, settings.authorizationStatus == .provisional {
            // Seed 003: turning push on is the moment to ask for more than quiet delivery. If the
            // user lets the prompt pass, the provisional authorization still delivers quietly.
            await requestFullAuthorization()
            guard session == self.session else { return }
            if record != nil {
                // Already registered quietly: the server learns the answer, whatever it is.
                await reconcile()
                return
            }
            settings = await authorizer.notificationSettings()
        }
        systemSettings = settings
        guard settings.authorizationStatus.allowsDelivery else {
            wantsOn = false
            options.legacyFlag?.clear()
            phase = Self.phase(unsubscribedWith: settings.authorizationStatus)
            return
        }
        guard let token = await waitForToken(session: session) else {
            guard session == self.session else { return }
            phase = .failed(
                BelfryClientError(
                    code: .pushTokenUnavailable,
                    message: "the system gave no device token; check the network connection and try again"))
            return
        }
        await register(token: token, settings: settings)
    }

    /// Registers (or updates) the device, and saves the record once the server confirmed it.
    private func register(token: String, settings: NotificationSettings) async {
        guard let user else { return }
        let session = self.session
        let replaced = record
        phase = .registering
        let apns = options.platform == .apns
        let registration = DeviceRegistration(
            platform: options.platform, token: token, environment: apns ? options.environment : nil,
            topic: apns ? options.topic : nil, authorization: settings.authorizationStatus,
            settings: settings.pushSettings, locale: options.locale, appVersion: options.appVersion, app: options.app)
        let device: DeviceRecord
        do throws(BelfryClientError) {
            device = try await api.send("POST", "v1/me/devices", body: registration, idempotent: true)
                .decode(DeviceRecord.self)
        } catch {
            guard session == self.session else { return }
            if let replaced {
                // An update that failed: the subscription stands; the next recheck tries again.
                phase = Self.phase(subscribedWith: replaced.authorization)
            } else {
                phase = .failed(error)
            }
            return
        }
        guard session == self.session else {
            // Signed out meanwhile: the device must not stay registered for the old user.
            if let farewell {
                removals.append(Task { try? await self.remove(device.id, using: farewell) })
            }
            return
        }
        record = PushSubscriptionRecord(
            token: token, deviceID: device.id, user: user, topic: options.topic, environment: options.environment,
            tenants: tenants, authorization: settings.authorizationStatus, settings: settings.pushSettings,
            confirmedAt: api.clock.now())
        saveRecord()
        options.legacyFlag?.clear()
        wantsOn = false
        phase = Self.phase(subscribedWith: settings.authorizationStatus)
        if let replaced, replaced.deviceID != device.id {
            // A new token is a new device: the old one would only collect failures.
            try? await remove(replaced.deviceID, using: api)
        }
    }

    private func remove(_ device: UUID, using api: BelfryAPI) async throws(BelfryClientError) {
        _ = try await api.send(
            "DELETE", "v1/me/devices/\(device.uuidString)", idempotent: true, accepting: [404])
    }

    // MARK: The device token

    private func tokenArrived(_ token: String) async {
        latestToken = token
        // A subscribe waiting for a token takes it here.
        resolveTokenWaiter(token)
        guard user != nil else { return }
        await run {
            guard self.user != nil, self.latestToken == token else { return }
            if let record = self.record, record.token != token {
                // Seed 000: resubscribe when the OS changes the token.
                await self.register(token: token, settings: self.systemSettings ?? Self.knownSettings(record))
            } else if self.record == nil, self.wantsOn, case .failed = self.phase {
                // The token came late, after subscribing gave up: finish what the user asked for.
                await self.subscribe(asking: false)
            }
        }
    }

    /// Provisional authorization: granted without a prompt, so it can be asked for at launch.
    private func requestProvisional() async {
        guard await authorizer.notificationSettings().authorizationStatus == .notDetermined else { return }
        let options = options.authorizationOptions.union(.provisional)
        if (try? await authorizer.requestAuthorization(options: options)) == true {
            // The trial needs the device at the server, or nothing can arrive quietly.
            wantsOn = true
        }
    }

    /// Asks for the options without `provisional`: the OS prompts for alerts, sounds and badges.
    private func requestFullAuthorization() async {
        phase = .requestingPermission
        _ = try? await authorizer.requestAuthorization(options: options.authorizationOptions.subtracting(.provisional))
    }

    /// Asks the OS for a token and waits, again after each retry delay, until one comes.
    private func waitForToken(session: Int) async -> String? {
        for attempt in 0...options.tokenRetryDelays.count {
            if attempt > 0 {
                let pause = Task { [clock = api.clock, delay = options.tokenRetryDelays[attempt - 1]] in
                    try await clock.sleep(for: delay)
                }
                retryPause = pause
                guard (try? await pause.value) != nil else { return nil }
            }
            guard session == self.session else { return nil }
            if let latestToken { return latestToken }
            phase = .waitingForToken(attempt: attempt + 1)
            await tokenSource.register()
            if let token = await nextToken(within: options.tokenTimeout) { return token }
            guard session == self.session else { return nil }
        }
        return nil
    }

    private func nextToken(within timeout: TimeInterval) async -> String? {
        if let latestToken { return latestToken }
        return await withCheckedContinuation { continuation in
            let clock = api.clock
            let timeout = Task { [weak self] in
                guard (try? await clock.sleep(for: timeout)) != nil else { return }
                self?.resolveTokenWaiter(nil)
            }
            tokenWaiter = (continuation, timeout)
        }
    }

    private func resolveTokenWaiter(_ token: String?) {
        guard let waiter = tokenWaiter else { return }
        tokenWaiter = nil
        waiter.timeout.cancel()
        waiter.continuation.resume(returning: token)
    }

    /// Where a device the server has stands, given the OS permission.
    private static func phase(subscribedWith status: PushAuthorization) -> Phase {
        status.allowsDelivery ? .on : phase(unsubscribedWith: status)
    }

    /// Where the toggle rests without a subscription: denied needs the system's Settings.
    private static func phase(unsubscribedWith status: PushAuthorization?) -> Phase {
        status == .denied ? .denied : .off
    }

    private static func knownSettings(_ record: PushSubscriptionRecord) -> NotificationSettings {
        NotificationSettings(
            authorizationStatus: record.authorization, alertSetting: record.settings.alert,
            soundSetting: record.settings.sound, badgeSetting: record.settings.badge)
    }

    // MARK: The persisted record

    private func loadRecord() -> PushSubscriptionRecord? {
        store.data(forKey: Self.storeKey).flatMap {
            try? BelfryAPI.decoder.decode(PushSubscriptionRecord.self, from: $0)
        }
    }

    private func saveRecord() {
        store.set(record.flatMap { try? BelfryAPI.encoder.encode($0) }, forKey: Self.storeKey)
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
