// belfry-device: an app on Linux, built on the BelfryClient SDK, with the OS parts scripted
// (the permission prompt's answer, when the device token comes), to watch seed 000's push
// settings flow against a local `belfry serve`:
//
//   swift run belfry serve                     # another terminal; note the API key it prints
//   swift run belfry-device --api-key belfry_… --user ada --set mention=off --trigger edit-user-talk
//
// Without BELFRY_APNS_* settings on the server the device registers and preferences change,
// but nothing is sent to Apple; the event's status shows why.

import BelfryClient
import BelfryCore
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

struct Options {
    var server = URL(string: "http://127.0.0.1:8080")!
    var apiKey = ProcessInfo.processInfo.environment["BELFRY_API_KEY"]
    var userToken: String?
    var user = "ada"
    var tenants = ["enwiki", "dewiki", "wikidata", "commons"]
    var permission = PushAuthorization.authorized
    var tokenDelay: TimeInterval? = 1
    var settings: [(category: String, on: Bool)] = []
    var trigger: [String] = []
    var revokeAfter = false
    var logout = false
    var state = FileManager.default.temporaryDirectory.appendingPathComponent("belfry-device")
    var pushChannel: String?
    var platform = DevicePlatform.apns
    var app: String?
    var answer: String?
    var backgroundPush = false
    var readElsewhere = false
    var remindEvery: TimeInterval?
    var newToken = false
    var categories = false
    var foreground: String?

    static let usage = """
        usage: belfry-device [options]
          --server URL          Belfry's address (default http://127.0.0.1:8080)
          --api-key KEY         the backend's API key, to create the user and mint tokens (or BELFRY_API_KEY)
          --user-token TOKEN    a user token instead (`belfry token --user ada`)
          --user ID             the user (default ada)
          --tenants A,B,…       the user's sites (default enwiki,dewiki,wikidata,commons)
          --permission allow|deny|provisional   what the user answers at the OS prompt (default allow);
                                                provisional: granted at launch without a prompt
          --token-delay SECONDS when the OS gives the device token (default 1); --no-token: never
          --set CATEGORY=on|off turn a push type on or off (repeatable)
          --trigger CATEGORY    send the user an event of this category afterwards (needs --api-key; repeatable)
          --revoke              then turn notifications off "in Settings" and come back to the app
          --logout              sign out at the end (the device is removed behind the scenes)
          --state DIR           where the app and the OS keep their data between runs (default: a temp folder)
          --platform apns|fcm   an iPhone (APNs device token) or an Android phone (FCM registration token)
          --app ID              the server's app the device belongs to, when it has several
          --push-channel ID     the workspace's push channel (default ios_push, android_push with --platform fcm)
          --answer ACTION       then choose ACTION on the newest notification in Notification Center (offline
                                first: the answer waits, then reaches the server once)
          --background-push     then a background push arrives: counts, badge and preferences are refreshed
          --read-elsewhere      then another device reads the newest notification: it leaves Notification Center
          --remind SECONDS      schedule a local reminder repeating every SECONDS (60 or more), and tap it
          --new-token           the OS hands out a new device token this launch (a restore): it replaces the old
          --categories          register the workspace's notification categories with the "OS" and list them
          --foreground article|bell|elsewhere
                                a notification arrives while the app is open there: how it is shown
        """

    static func parse(_ arguments: [String]) throws -> Options {
        var options = Options()
        var rest = arguments[...]
        func value(_ flag: String) throws -> String {
            guard let next = rest.popFirst() else { throw UsageError("\(flag) needs a value") }
            return next
        }
        while let flag = rest.popFirst() {
            switch flag {
            case "--server":
                guard let url = URL(string: try value(flag)) else { throw UsageError("--server must be a URL") }
                options.server = url
            case "--api-key": options.apiKey = try value(flag)
            case "--user-token": options.userToken = try value(flag)
            case "--user": options.user = try value(flag)
            case "--tenants": options.tenants = try value(flag).split(separator: ",").map(String.init)
            case "--permission":
                switch try value(flag) {
                case "allow": options.permission = .authorized
                case "deny": options.permission = .denied
                case "provisional": options.permission = .provisional
                case let other: throw UsageError("--permission must be allow, deny or provisional, not \(other)")
                }
            case "--token-delay":
                guard let seconds = TimeInterval(try value(flag)), seconds >= 0 else {
                    throw UsageError("--token-delay must be a number of seconds")
                }
                options.tokenDelay = seconds
            case "--no-token": options.tokenDelay = nil
            case "--set":
                let text = try value(flag)
                let parts = text.split(separator: "=")
                guard parts.count == 2, ["on", "off"].contains(parts[1]) else {
                    throw UsageError("--set takes CATEGORY=on or CATEGORY=off, not \(text)")
                }
                options.settings.append((String(parts[0]), parts[1] == "on"))
            case "--trigger": options.trigger.append(try value(flag))
            case "--revoke": options.revokeAfter = true
            case "--logout": options.logout = true
            case "--state": options.state = URL(fileURLWithPath: try value(flag))
            case "--push-channel": options.pushChannel = try value(flag)
            case "--platform":
                switch try value(flag) {
                case "apns": options.platform = .apns
                case "fcm": options.platform = .fcm
                case let other: throw UsageError("--platform must be apns or fcm, not \(other)")
                }
            case "--app": options.app = try value(flag)
            case "--answer": options.answer = try value(flag)
            case "--background-push": options.backgroundPush = true
            case "--new-token": options.newToken = true
            case "--categories": options.categories = true
            case "--foreground":
                let place = try value(flag)
                guard ["article", "bell", "elsewhere"].contains(place) else {
                    throw UsageError("--foreground must be article, bell or elsewhere, not \(place)")
                }
                options.foreground = place
            case "--read-elsewhere": options.readElsewhere = true
            case "--remind":
                guard let seconds = TimeInterval(try value(flag)), seconds > 0 else {
                    throw UsageError("--remind must be a number of seconds")
                }
                options.remindEvery = seconds
            case "--help", "-h":
                print(usage)
                exit(0)
            default: throw UsageError("unknown option \(flag)")
            }
        }
        if options.apiKey == nil, options.userToken == nil {
            throw UsageError("give --api-key (or BELFRY_API_KEY) or --user-token")
        }
        if !options.trigger.isEmpty, options.apiKey == nil { throw UsageError("--trigger needs --api-key") }
        return options
    }
}

struct UsageError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// The OS permission prompt, answered by the script. The OS remembers the answer between
/// runs, in a file beside the app's data.
final class ScriptedAuthorizer: NotificationAuthorizing, @unchecked Sendable {
    // @unchecked: state under `lock`.
    private let lock = NSLock()
    private var settings: NotificationSettings {
        didSet { try? Data(settings.authorizationStatus.rawValue.utf8).write(to: file) }
    }
    private let answer: PushAuthorization
    private let file: URL

    init(answer: PushAuthorization, file: URL) {
        self.answer = answer
        self.file = file
        let saved = (try? Data(contentsOf: file)).flatMap {
            PushAuthorization(rawValue: String(decoding: $0, as: UTF8.self))
        }
        settings = NotificationSettings(authorizationStatus: saved ?? .notDetermined)
    }

    func requestAuthorization(options: AuthorizationOptions) async throws -> Bool {
        let status = lock.withLock {
            if settings.authorizationStatus == .notDetermined { settings.authorizationStatus = answer }
            return settings.authorizationStatus
        }
        say("  os: \"Allow notifications?\" → the user answers \(status.rawValue)")
        return status.allowsDelivery
    }

    func notificationSettings() async -> NotificationSettings { lock.withLock { settings } }

    func revoke() { lock.withLock { settings.authorizationStatus = .denied } }
}

/// The device token, given after a delay, or never.
final class ScriptedTokenSource: DeviceTokenSource, @unchecked Sendable {
    private let delay: TimeInterval?
    private let token: Data
    private let stream: AsyncStream<Data>
    private let continuation: AsyncStream<Data>.Continuation

    init(delay: TimeInterval?, token: Data) {
        self.delay = delay
        self.token = token
        (stream, continuation) = AsyncStream.makeStream()
    }

    func register() async {
        guard let delay else {
            say("  os: registerForRemoteNotifications → no token will come")
            return
        }
        say("  os: registerForRemoteNotifications → the token comes in \(delay) s")
        Task { [token, continuation] in
            try? await Task.sleep(for: .seconds(delay))
            continuation.yield(token)
        }
    }

    func tokens() -> AsyncStream<Data> { stream }
}

/// The OS's category registry, as the script plays it: it says what it was given.
struct PrintingRegistrar: NotificationCategoryRegistering {
    func setNotificationCategories(_ categories: [NotificationCategoryRegistration]) async {
        say("  os: setNotificationCategories → \(categories.count) categories")
    }
}

func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// The settings screen as text.
@MainActor
func show(_ model: PushSettingsModel, _ title: String) {
    say("\n── \(title) — phase: \(model.registration.phase)")
    if model.rows.isEmpty { say("   (no push settings: signed out)") }
    for row in model.rows {
        let toggle = row.isOn.map { $0 ? "[on] " : "[off]" } ?? "     "
        let disabled = row.isEnabled ? "" : " (disabled)"
        let action = row.actionTitle.map { " ‹\($0)›" } ?? ""
        say("   \(toggle) \(row.title)\(disabled)\(action)")
        if let detail = row.detail { say("          \(detail)") }
        say(
            "          a11y: \(row.accessibility.label); \(row.accessibility.value ?? "-"); \(row.accessibility.hint ?? "-")"
        )
    }
    if let alert = model.alert {
        say("   ALERT: \(alert.title): \(alert.message)\(alert.canRetry ? " ‹Try again›" : "")")
    }
}

/// A backend request with the API key.
func backend(_ options: Options, _ method: String, _ path: String, _ json: String? = nil) async throws -> Data {
    var request = URLRequest(url: options.server.appendingPathComponent(path))
    request.httpMethod = method
    request.setValue("Bearer \(options.apiKey ?? "")", forHTTPHeaderField: "Authorization")
    if let json {
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data(json.utf8)
    }
    let (data, response) = try await URLSession.shared.data(for: request)
    let status = (response as? HTTPURLResponse)?.statusCode ?? 0
    guard (200..<300).contains(status) else {
        throw UsageError("\(method) \(path) answered \(status): \(String(decoding: data, as: UTF8.self))")
    }
    return data
}

/// The simulated app: its client, the scripted OS and the settings screen's model.
@MainActor
struct Device {
    let belfry: BelfryClient
    let tokens: ClosureTokenProvider
    let authorizer: ScriptedAuthorizer
    let registration: PushRegistration
    let model: PushSettingsModel
    /// What the OS gave on the earlier runs, which the server has.
    let tokenAtLaunch: String
}

@MainActor
func makeDevice(_ options: Options) async throws -> Device {
    if options.userToken == nil {
        let tenants = options.tenants.map { "\"\($0)\"" }.joined(separator: ",")
        _ = try await backend(options, "PUT", "v1/users/\(options.user)", #"{"tenants": [\#(tenants)]}"#)
    }
    let tokens = ClosureTokenProvider { _ in
        if let token = options.userToken { return token }
        let data = try await backend(options, "POST", "v1/users/\(options.user)/tokens")
        let object = try JSONSerialization.jsonObject(with: data) as? [String: Any]
        guard let token = object?["token"] as? String else { throw UsageError("no token in the answer") }
        return token
    }
    // The app's data and the OS's memory of the permission, kept between runs like on a phone.
    let directory = options.state.appendingPathComponent(options.user)
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let belfry = BelfryClient(
        baseURL: options.server, tokenProvider: tokens, store: FileKeyValueStore(directory: directory))
    let authorizer = ScriptedAuthorizer(
        answer: options.permission, file: directory.appendingPathComponent("os-permission"))
    // A token of this simulated device, the same every run for this user.
    let userSeed = options.user.utf8.reduce(7) { $0 &* 31 &+ Int($1) }
    func deviceToken(_ seed: Int) -> Data {
        options.platform == .fcm
            ? Data(
                "belfry-device-\(options.user):APA91b\(String(seed, radix: 36))-\(String(repeating: "x", count: 100))"
                    .utf8)
            : Data((0..<32).map { UInt8(truncatingIfNeeded: seed &+ $0 &* 97) })
    }
    let token = deviceToken(userSeed &+ (options.newToken ? 1 : 0))
    // What the OS gave on the earlier runs, which the server has.
    let tokenAtLaunch =
        options.platform == .fcm
        ? String(decoding: deviceToken(userSeed), as: UTF8.self)
        : deviceToken(userSeed).hexToken
    let registration = PushRegistration(
        client: belfry, authorizer: authorizer,
        tokenSource: ScriptedTokenSource(delay: options.tokenDelay, token: token),
        options: PushRegistrationOptions(
            environment: .sandbox, tokenTimeout: 5, tokenRetryDelays: [2],
            requestsProvisionalAtLaunch: options.permission == .provisional, appVersion: "belfry-device",
            platform: options.platform, app: options.app))
    let model = PushSettingsModel(
        client: belfry, registration: registration, sync: TenantPreferenceSync(client: belfry),
        pushChannel: options.pushChannel ?? (options.platform == .fcm ? "android_push" : "ios_push"),
        openSystemSettings: { say("  os: opening Settings") })
    return Device(
        belfry: belfry, tokens: tokens, authorizer: authorizer, registration: registration, model: model,
        tokenAtLaunch: tokenAtLaunch)
}

@MainActor
func run(_ options: Options) async throws {
    let device = try await makeDevice(options)
    let (belfry, tokens, authorizer, registration, model) = (
        device.belfry, device.tokens, device.authorizer, device.registration, device.model
    )
    await model.signIn(user: options.user, tenants: options.tenants)
    show(model, "Settings > Push Notifications, signed in as \(options.user)")

    if !registration.isOn {
        say("\n▶ the user turns on the primary toggle")
        await model.setPushEnabled(true)
        show(model, "after turning push on")
    }
    if let record = registration.record {
        say("   device \(record.deviceID) registered for \(record.user), token \(record.token.prefix(16))…")
    }
    for setting in options.settings {
        say("\n▶ the user turns \(setting.category) \(setting.on ? "on" : "off")")
        await model.setType(setting.category, isOn: setting.on)
        show(model, "after the type toggle (written to \(options.tenants.joined(separator: ", ")))")
    }
    try await triggerEvents(options)
    if options.newToken {
        try await replaceToken(options, device)
    }
    if options.categories {
        try await showCategories(belfry)
    }
    if let place = options.foreground {
        await arrive(in: place, authorizer: authorizer)
    }
    try await deliveredFlows(options, belfry: belfry, tokens: tokens)
    if options.revokeAfter {
        say("\n▶ the user turns notifications off in Settings, then comes back to the app")
        authorizer.revoke()
        await model.foregrounded()
        show(model, "after coming back to the foreground")
    }
    if options.logout {
        say("\n▶ the user signs out")
        await model.signOut()
        show(model, "signed out")
        await registration.settled()
        say("   the device was removed behind the scenes")
    }
}

/// The backend sends the user an event of each category in `--trigger`, and reads its status.
func triggerEvents(_ options: Options) async throws {
    for category in options.trigger {
        say("\n▶ the backend sends \(options.user) a \(category) event")
        let data = try await backend(
            options, "POST", "v1/events",
            #"{"category": "\#(category)", "recipients": ["\#(options.user)"], "content": {"title": "A \#(category) notification", "body": "from belfry-device"}}"#
        )
        let object = try JSONSerialization.jsonObject(with: data) as? [String: Any]
        if let id = object?["event_id"] as? String {
            try await Task.sleep(for: .seconds(2))
            let status = try await backend(options, "GET", "v1/events/\(id)")
            say("   event \(id): \(String(decoding: status, as: UTF8.self))")
        }
    }
}

/// The OS gives this launch a new token: the registration replaces the old one on the server.
@MainActor
func replaceToken(_ options: Options, _ device: Device) async throws {
    let old = device.tokenAtLaunch
    say("\n▶ the OS gives this launch a new device token")
    // The launch's recheck asked for the token; it arrives after the token delay.
    try await Task.sleep(for: .seconds((options.tokenDelay ?? 0) + 1))
    await device.registration.settled()
    let now = device.registration.record?.token ?? old
    say("   token \(old.prefix(16))… → \(now.prefix(16))…: \(now == old ? "unchanged" : "replaced on the server")")
}

/// The app registers the workspace's notification categories with the OS.
func showCategories(_ belfry: BelfryClient) async throws {
    say("\n▶ the app registers the workspace's notification categories with the OS")
    for category in try await belfry.registerNotificationCategories(with: PrintingRegistrar()) {
        let actions = category.actions.map { "\($0.title) (\($0.foreground ? "opens the app" : "background"))" }
        say("   \(category.identifier): \(actions.isEmpty ? "no actions" : actions.joined(separator: ", "))")
    }
}

/// A notification arrives while the user is at `place`: shown, or not, as the SDK decides.
@MainActor
func arrive(in place: String, authorizer: ScriptedAuthorizer) async {
    let navigation = NavigationState(isBellVisible: place == "bell", isReadingArticle: place == "article")
    let settings = await authorizer.notificationSettings()
    let shown = ForegroundPresentation.decide(
        settings: settings.authorizationStatus.allowsDelivery ? settings.pushSettings : nil,
        authorization: settings.authorizationStatus, navigation: navigation)
    say(
        "\n▶ a notification arrives while the user is \(place == "elsewhere" ? "elsewhere in the app" : "on the \(place)")"
    )
    say("   shown as: \(shown)")
}

/// Issue 37's flows on the simulated device: an action chosen on a delivered notification, a
/// background push, a read on another device, and a repeating local reminder.
@MainActor
func deliveredFlows(_ options: Options, belfry: BelfryClient, tokens: ClosureTokenProvider) async throws {
    let center = InMemoryNotificationScheduler()
    let newest = try await belfry.inbox.list(limit: 1).notifications.first
    if let item = newest {
        // What the push put in Notification Center.
        await center.deliver(
            ScheduledNotification(
                identifier: "push-\(item.id.uuidString.prefix(8))", title: item.title, body: item.body,
                fireDate: Date(),
                showing: [.alert], userInfo: ["belfry": .object(["notification_id": .string(item.id.uuidString)])]))
    }
    if let action = options.answer {
        guard let item = newest else { throw UsageError("--answer needs a notification: add --trigger") }
        _ = try await belfry.notificationCategories()
        say("\n▶ the user chooses \"\(action)\" on the notification \"\(item.title)\"")
        let request = belfry.opened.opened(
            DeliveredNotification(id: item.id, category: item.category, url: item.url.flatMap(URL.init(string:))),
            actionIdentifier: action)
        let plan = NotificationRouter.plan(for: request, activity: .background, navigation: NavigationState())
        say("   route: \(request) → \(plan.steps.isEmpty ? "nothing opens" : "\(plan.steps)")")
        await belfry.opened.flush()
        say("   waiting for the server: \(belfry.opened.waiting.count)")
        let answered = try await belfry.inbox.list(limit: 1).notifications.first
        say("   the server has it read: \(answered?.readAt != nil)")
    }
    if options.backgroundPush {
        say("\n▶ a background push arrives")
        let result = await belfry.handleBackgroundPush(
            userInfo: ["aps": ["content-available": 1], "belfry": ["notification_id": newest?.id.uuidString ?? ""]],
            badge: center)
        say("   fetch result: \(result.rawValue); badge \(await center.badge.map(String.init) ?? "unset")")
    }
    if options.readElsewhere, let item = newest {
        say("\n▶ the user reads \"\(item.title)\" on another device")
        let reconciler = DeliveredReconciler(scheduler: center)
        var updates = belfry.inbox.updates().makeAsyncIterator()
        while let update = await updates.next(), update != .connected {}
        _ = await updates.next()  // the counts sent on connecting
        let other = BelfryClient(baseURL: options.server, tokenProvider: tokens, store: InMemoryKeyValueStore())
        _ = try await other.inbox.markRead(item.id)
        while let update = await updates.next() {
            let removed = await reconciler.apply(update)
            if case .counts = update { break }
            if !removed.isEmpty { say("   removed from Notification Center: \(removed.joined(separator: ", "))") }
        }
        say("   Notification Center now lists \(await center.delivered().count); badge \(await center.badge ?? 0)")
    }
    if let every = options.remindEvery {
        say("\n▶ the app schedules a reminder every \(Int(every)) s")
        let authorizer = ScriptedAuthorizer(
            answer: .authorized, file: options.state.appendingPathComponent("reminder-permission"))
        _ = try await authorizer.requestAuthorization(options: [.alert, .sound])
        let local = LocalNotifications(scheduler: center, authorization: authorizer)
        let plan = try await local.schedule(
            LocalNotificationRequest(
                identifier: "reading-reminder", title: "Saved articles", body: "You have articles to read",
                trigger: .interval(every, repeats: true), threadIdentifier: "reading",
                url: URL(string: "https://en.wikipedia.org/wiki/Special:ReadingLists")))
        say("   planned: \(plan)")
        let fired = await center.fire(until: Date().addingTimeInterval(every * 3 + 1))
        say(
            "   fired \(fired.filter { $0.identifier == "reading-reminder" }.count) times in \(Int(every * 3)) s; still pending: \(await center.pending().map(\.identifier))"
        )
        if let shown = fired.last, let request = LocalNotifications.routeRequest(userInfo: shown.systemUserInfo) {
            let steps = NotificationRouter.plan(for: request, activity: .foreground, navigation: NavigationState())
                .steps
            say("   the user taps it: \(steps)")
        }
    }
}

do {
    let options = try Options.parse(Array(CommandLine.arguments.dropFirst()))
    try await run(options)
} catch let error as UsageError {
    FileHandle.standardError.write(Data("belfry-device: \(error)\n\n\(Options.usage)\n".utf8))
    exit(2)
} catch {
    FileHandle.standardError.write(Data("belfry-device: \(error)\n".utf8))
    exit(1)
}
