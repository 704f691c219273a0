import AsyncHTTPClient
import BelfryCore
import BelfryHTTP1
import BelfryHTTP2
import BelfryMail
import BelfryWebPush
import Fluent
import Foundation
import NIOSSL
import Vapor

/// What `configure` did that the operator should hear about once.
public struct StartupReport: Sendable {
    /// A development API key created on this start; shown once, stored only as a digest.
    public var createdDevelopmentKey: String?
    /// Whether the API key in use is the stored development key (no `BELFRY_API_KEY` given).
    public var usesDevelopmentKey: Bool
}

/// Why Belfry could not start, in words for the operator.
public struct StartupError: Error, CustomStringConvertible {
    public var description: String

    init(_ description: String) {
        self.description = description
    }
}

/// Options for `configure` that are not configuration values.
public struct ConfigureOptions: Sendable {
    /// Run pending migrations before serving.
    public var migrate: Bool
    /// The server's clock.
    public var now: @Sendable () -> Date
    /// A random number in 0..<1 for backoff jitter.
    public var jitter: @Sendable () -> Double
    /// Run fan-out and delivery workers in the background while the application runs (`belfry serve`).
    public var runWorkers: Bool
    /// Looks up push services' host names (the system's resolver; a table in tests).
    var resolver: HostResolver = .system
    /// How the background services wait: real sleeps, or a test's clock, so that workers run in
    /// process and a test moves their time.
    package var clock: any ServiceClock = ServerClock()
    /// Make (and report) a development API key when none is configured or stored: `belfry
    /// serve` does; the other commands never make a credential.
    public var createsDevelopmentKey = true

    public init(
        migrate: Bool = true, runWorkers: Bool = false, now: @escaping @Sendable () -> Date = { Date() },
        jitter: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }
    ) {
        self.migrate = migrate
        self.runWorkers = runWorkers
        self.now = now
        self.jitter = jitter
    }
}

/// Sets up a Belfry application: database, migrations, secrets, middleware and routes. This is
/// the composition root: each store and service is made once, here, and handed to what uses it.
@discardableResult
public func configure(
    _ app: Application, settings: ServerConfiguration, options: ConfigureOptions = ConfigureOptions()
) async throws -> StartupReport {
    configureHTTP(app, settings)
    let database = try await openDatabase(app, settings, migrate: options.migrate)
    let credentials = try await StartupCredentials.load(
        settings, createsDevelopmentKey: options.createsDevelopmentKey, on: app.silentDatabase, now: options.now)
    let now = options.now
    let context = BelfryContext(
        settings: settings,
        database: database,
        apiKeys: credentials.apiKeys,
        keyStore: KeyStore(storage: database, now: now),
        rateLimiter: RateLimiter(limits: settings.rateLimits, now: now),
        tokens: await UserTokens(secret: credentials.tokenSecret, lifetime: settings.tokenLifetime),
        webSigner: WebSigner(secret: credentials.tokenSecret),
        now: now,
        workspaceFingerprint: try BelfryContext.fingerprint(of: settings.workspace),
        jitter: options.jitter,
        fanoutSignal: WorkSignal(),
        deliverySignal: WorkSignal(),
        inboxHub: InboxHub(now: now),
        metrics: BelfryMetrics(),
        vapidKey: credentials.vapidKey,
        logger: app.logger
    )
    let services = BelfryServices(context)
    app.belfry = context
    app.belfryServices = services
    context.metrics.start(channels: settings.workspace.channels.map(\.id))
    app.lifecycle.use(StreamShutdown(hub: context.inboxHub, flag: context.shutdown))
    if case .postgres(let url) = settings.database {
        let listener = try InboxRelayListener(url: url, context: context, services: services)
        app.inboxRelayListener = listener
        app.lifecycle.use(listener)
    }
    let db: @Sendable () -> any Database = { [unowned app] in app.db }
    let monitor = databaseMonitor(app, database: database, now: now)
    app.databaseMonitor = monitor
    let queue = DeliveryQueue(
        database: db, storage: database, workspace: context.workspace,
        providers: try deliveryProviders(
            app, settings, context: context, services: services, resolver: options.resolver, database: db),
        metrics: context.metrics, now: now,
        jitter: options.jitter, logger: app.logger, lease: TimeInterval(settings.deliveryLease),
        signal: context.deliverySignal, backoff: Backoff(base: TimeInterval(settings.retryBase)),
        onStorageFailure: monitor.noteFailure,
        statusEvents: settings.statusEndpoints.isEmpty ? nil : services.statusEvents, devices: services.devices,
        inbox: services.inboxStore)
    app.deliveryQueue = queue
    if !settings.statusEndpoints.isEmpty {
        app.statusEventSender = StatusEventSender(
            database: db, storage: database, endpoints: settings.statusEndpoints,
            client: try webhookClient(app, settings), now: now, jitter: options.jitter,
            backoff: Backoff(base: TimeInterval(settings.retryBase)), lease: TimeInterval(settings.deliveryLease),
            logger: app.logger, deliveriesBusy: { [queue] in queue.isBusy })
    }
    if options.runWorkers {
        let workers = Workers(
            context: context, services: services, queue: queue, statusSender: app.statusEventSender,
            monitor: monitor, database: db, clock: options.clock, retentionDays: settings.retentionDays,
            logger: app.logger)
        app.lifecycle.use(BackgroundServices(services: workers.all))
    }
    useMiddleware(app, context: context, settings: settings)
    try registerControllers(app, context: context, services: services)
    return StartupReport(
        createdDevelopmentKey: credentials.createdDevelopmentKey, usesDevelopmentKey: settings.apiKeys.isEmpty)
}

/// The HTTP server's settings.
private func configureHTTP(_ app: Application, _ settings: ServerConfiguration) {
    app.logger.logLevel = settings.logLevel
    app.http.server.configuration.hostname = settings.hostname
    app.http.server.configuration.port = settings.port
    app.routes.defaultMaxBodySize = ByteCount(value: settings.maxBodySize)
    app.http.server.configuration.idleTimeout = .seconds(Int64(settings.idleTimeout))
    // Belfry compresses no response; Vapor's compressor, in every connection's pipeline all the
    // same, otherwise holds a 1 KiB buffer for each: a tenth of an idle connection's memory.
    app.http.server.configuration.responseCompression = .disabled(initialByteBufferCapacity: 0)
}

/// Registers the database, checks that it answers, and migrates it when asked.
private func openDatabase(
    _ app: Application, _ settings: ServerConfiguration, migrate: Bool
) async throws -> BelfryDatabase {
    let database = BelfryDatabase(location: settings.database)
    try database.register(on: app)
    app.migrations.add(BelfryMigrations.all)
    do {
        try await database.prepare(app.db)
        try await app.db.sql.raw("SELECT 1").run()
    } catch {
        throw StartupError(
            "cannot use the database (\(settings.database)): \(String(reflecting: error))")
    }
    if migrate {
        try await app.autoMigrate()
    }
    return database
}

/// The credentials the server starts with: the API keys, the token secret and the VAPID key,
/// each from the settings when given, else kept in the database (made on first start).
private struct StartupCredentials {
    var apiKeys: APIKeys
    var createdDevelopmentKey: String?
    var tokenSecret: String
    var vapidKey: VAPIDKey

    static func load(
        _ settings: ServerConfiguration, createsDevelopmentKey: Bool, on db: any Database,
        now: @Sendable () -> Date
    ) async throws -> Self {
        let (apiKeys, createdKey) = try await Self.apiKeys(
            settings, createsDevelopmentKey: createsDevelopmentKey, on: db, now: now)
        let secret =
            if let secret = settings.tokenSecret { secret } else {
                try await ServerSecrets.value(named: ServerSecrets.tokenSecret, on: db, now: now()) {
                    randomToken(bytes: 48)
                }.value
            }
        // Kept in the database unless given, so that restarts (and other instances) keep
        // browsers' subscriptions valid: they are bound to this key.
        let vapidPEM =
            if let pem = settings.vapidKeyPEM { pem } else {
                try await ServerSecrets.value(named: ServerSecrets.vapidPrivateKey, on: db, now: now()) {
                    VAPIDKey().pemRepresentation
                }.value
            }
        let vapidKey: VAPIDKey
        do {
            vapidKey = try VAPIDKey(pemRepresentation: vapidPEM)
        } catch {
            throw StartupError(
                "the stored VAPID key is damaged; delete the row named \"\(ServerSecrets.vapidPrivateKey)\" from "
                    + "server_secrets to create a new one (browsers then subscribe again)")
        }
        return Self(apiKeys: apiKeys, createdDevelopmentKey: createdKey, tokenSecret: secret, vapidKey: vapidKey)
    }

    /// The configured keys; else the stored development key, made first when `createsDevelopmentKey`.
    private static func apiKeys(
        _ settings: ServerConfiguration, createsDevelopmentKey: Bool, on db: any Database,
        now: @Sendable () -> Date
    ) async throws -> (APIKeys, created: String?) {
        guard settings.apiKeys.isEmpty else { return (APIKeys(keys: settings.apiKeys), nil) }
        guard createsDevelopmentKey else {
            let stored = try await ServerSecrets.find(ServerSecrets.developmentKeyDigest, on: db)
            return (APIKeys(digests: stored.flatMap(APIKeys.parseDigest).map { [$0] } ?? []), nil)
        }
        var generated: String?
        let stored = try await ServerSecrets.value(named: ServerSecrets.developmentKeyDigest, on: db, now: now()) {
            let key = APIKeys.generate()
            generated = key
            return APIKeys.digest(key).hexEncoded
        }
        guard let digest = APIKeys.parseDigest(stored.value) else {
            throw StartupError(
                "the stored development API key digest is damaged; delete the row named "
                    + "\"\(ServerSecrets.developmentKeyDigest)\" from server_secrets to create a new key")
        }
        return (APIKeys(digests: [digest]), stored.created ? generated : nil)
    }
}

/// The background services of `belfry serve`: fan-out, batches, delivery, status events, the
/// database monitor, queue samples and retention.
private struct Workers {
    let context: BelfryContext
    let services: BelfryServices
    let queue: DeliveryQueue
    let statusSender: StatusEventSender?
    let monitor: DatabaseMonitor
    let database: @Sendable () -> any Database
    let clock: any ServiceClock
    let retentionDays: Int
    let logger: Logger

    var all: [BackgroundService] {
        fanoutLoops + [monitorLoop, batches, delivery] + (statusSender.map { [statusEvents($0)] } ?? [])
            + [queueSamples, retention]
    }

    private func service(
        _ name: String, interval: TimeInterval, signal: WorkSignal = WorkSignal(), deadline: TimeInterval? = 30,
        beforeStopping: @escaping @Sendable () -> Void = {}, _ work: @escaping @Sendable () async throws -> Bool
    ) -> BackgroundService {
        BackgroundService(
            name: name, interval: interval, signal: signal, clock: clock, logger: logger,
            onFailure: monitor.noteFailure, deadline: deadline, beforeStopping: beforeStopping, step: work)
    }

    /// On PostgreSQL, fan-out runs in several loops: each batch waits on round trips to the
    /// server, and `SKIP LOCKED` gives each loop other events. The first is woken by new
    /// events; the others poll, and keep going while they find work, and leave digests' events
    /// to the first (`Fanout.takesDigests`). SQLite has one writer.
    private var fanoutLoops: [BackgroundService] {
        // Each batch's deliveries due now go straight to this instance's pipeline.
        var offering = services.fanout
        offering.offers = queue
        let (fanout, db) = (offering, database)
        let loops = context.database.kind == .postgres ? Fanout.postgresWorkers : 1
        return (0..<loops).map { index in
            var loop = fanout
            loop.takesDigests = index == 0
            return service(
                index == 0 ? "fan-out" : "fan-out \(index + 1)", interval: 1,
                signal: index == 0 ? context.fanoutSignal : WorkSignal(), deadline: 15
            ) { [loop] in try await loop.processBatch(on: db()) }
        }
    }

    private var monitorLoop: BackgroundService {
        let (monitor, clock) = (monitor, clock)
        return service("database monitor", interval: 0.25) {
            let pause = await monitor.step()
            try await clock.sleep(for: pause - 0.25)
            return false
        }
    }

    /// Batches (digests) close on their own clock: a window's end, a daily hour.
    private var batches: BackgroundService {
        let (fanout, db) = (services.fanout, database)
        return service("batches", interval: 1) { try await fanout.closeDueBatches(on: db()) }
    }

    /// The pipeline runs until the server stops: claims, sends and group commits overlap.
    private var delivery: BackgroundService {
        let (queue, clock) = (queue, clock)
        return service(
            "delivery", interval: 1, signal: context.deliverySignal, deadline: nil,
            beforeStopping: queue.beginStopping
        ) {
            await queue.run(clock: clock)
            return false
        }
    }

    private func statusEvents(_ sender: StatusEventSender) -> BackgroundService {
        service("status events", interval: 1, signal: context.statusSignal) { try await sender.runOnce() }
    }

    /// The console's queue-depth chart: a sample a minute, whichever instance takes it.
    private var queueSamples: BackgroundService {
        let (consoleData, db) = (services.consoleData, database)
        return service("queue samples", interval: 60) {
            try await consoleData.sampleQueueDepth(on: db())
            return false
        }
    }

    /// Hourly; the first purge runs at start. A purge of a long backlog runs as long as it
    /// needs: its transactions are many and short, and none is abandoned halfway as a lost
    /// query would be.
    private var retention: BackgroundService {
        let (retention, audit, db, days, logger) = (
            services.inboxRetention, services.auditLog, database, retentionDays, logger
        )
        return service("inbox retention", interval: 3600, deadline: nil) {
            let purged = try await retention.purge(on: db())
            if purged > 0 {
                logger.info("purged old inbox notifications", metadata: ["belfry.purged": "\(purged)"])
            }
            try await audit.purge(olderThan: days, on: db())
            return false
        }
    }
}

/// The middleware every request passes through, outermost first.
private func useMiddleware(_ app: Application, context: BelfryContext, settings: ServerConfiguration) {
    app.middleware = Middlewares()
    if ConnectionGuard.isAvailable {
        let connections = ConnectionGuard(
            headDeadline: TimeInterval(settings.requestTimeout), perAddress: settings.maxConnectionsPerAddress,
            logger: app.logger)
        let port: @Sendable () -> Int? = { [weak app] in app?.http.server.shared.localAddress?.port }
        app.middleware.use(ConnectionGuardMiddleware(connections: connections, port: port))
        app.lifecycle.use(ConnectionGuard.Lifecycle(connections: connections, port: port))
    }
    app.middleware.use(MetricsMiddleware(metrics: context.metrics))
    app.middleware.use(RouteLoggingMiddleware(logLevel: .info))
    app.middleware.use(BelfryErrorMiddleware())
    app.middleware.use(RequestDeadlineMiddleware(seconds: settings.requestTimeout))
    // 3 s: a 503 well within the 5 s a client may wait, however busy the machine.
    app.middleware.use(DatabaseDeadlineMiddleware(seconds: 3))
    app.middleware.use(QueryCheckMiddleware())
    app.middleware.use(RateLimitMiddleware(limiter: context.rateLimiter, auth: context.auth))
}

/// The routes: each controller is given the services it calls.
private func registerControllers(
    _ app: Application, context: BelfryContext, services: BelfryServices
) throws {
    try app.register(collection: OperationsController(context: context, auditLog: services.auditLog))
    try app.register(collection: UsersController(context: context, auditLog: services.auditLog))
    try app.register(
        collection: PreferencesController(
            context: context, preferenceChanges: services.preferenceChanges, preferenceStore: services.preferenceStore))
    try app.register(
        collection: EventsController(
            auth: context.auth, eventIntake: services.eventIntake, eventStatuses: services.eventStatuses))
    try app.register(collection: MessagesController(auth: context.auth, messageLog: services.messageLog))
    try app.register(collection: TopicsController(context: context, topics: services.topics))
    try app.register(collection: QuietHoursController(context: context))
    try app.register(
        collection: InboxController(
            context: context, inboxChanges: services.inboxChanges, inboxStore: services.inboxStore))
    try app.register(
        collection: DevicesController(context: context, auditLog: services.auditLog, devices: services.devices))
    try app.register(
        collection: WebController(
            context: context, inboxChanges: services.inboxChanges, inboxStore: services.inboxStore,
            preferenceChanges: services.preferenceChanges, preferenceStore: services.preferenceStore))
    try app.register(collection: UnsubscribeController(context: context, preferenceChanges: services.preferenceChanges))
    try app.register(
        collection: ConsoleController(
            context: context, auditLog: services.auditLog, consoleData: services.consoleData,
            deadLetters: services.deadLetters,
            devices: services.devices, eventIntake: services.eventIntake, eventStatuses: services.eventStatuses,
            preferenceStore: services.preferenceStore))
}

/// The providers configured for each channel kind. A kind without one fails its deliveries with a clear error.
private func deliveryProviders(
    _ app: Application, _ settings: ServerConfiguration, context: BelfryContext, services: BelfryServices,
    resolver: HostResolver, database: @escaping @Sendable () -> any Database
) throws -> [ChannelKind: any DeliveryProvider] {
    var providers: [ChannelKind: any DeliveryProvider] = [
        .inbox: InboxProvider { event, user in
            // The item is stored already: telling the streams is worth a few seconds, no more.
            _ = try? await withDeadline(5, "telling the streams") {
                await services.inboxEvents.becameAvailable(event: event, user: user, on: database())
            }
        }
    ]
    if let email = settings.email {
        providers[.email] = try emailChannel(app, settings, email, context: context)
    }
    guard
        settings.webhook != nil || settings.apns != nil || settings.fcm != nil || settings.vapidSubject != nil
            || !settings.apps.isEmpty
    else { return providers }
    let client = try outboundClient(app, settings)
    if let webhook = settings.webhook {
        providers[.webhook] = try WebhookChannel(
            url: webhook.url, secret: webhook.secret, client: try webhookClient(app, settings), now: context.now)
    }
    // Each app its own HTTP/2 client (its connections, its token), all of a platform on one loop.
    func http2Clients(unindexed: [String] = []) -> () throws -> HTTP2Client {
        var loop: (any EventLoop)?
        return {
            let http2 = try HTTP2Client(
                group: loop ?? app.eventLoopGroup,
                tls: try .outbound(extraCertificatesPEM: settings.extraCertificatesPEM), unindexed: unindexed)
            loop = http2.eventLoop
            app.lifecycle.use(HTTP2ClientShutdown(client: http2))
            return http2
        }
    }
    let apnsClient = http2Clients(unindexed: APNsProvider.unindexed)
    let apns = try settings.byApp(settings.apns) { (credentials: PushApp.Credentials) in
        guard case .apns(let apns, _) = credentials else { return nil }
        return apns
    }.map { try APNsProvider(configuration: $0, client: try apnsClient(), now: context.now) }
    if !apns.isEmpty { providers[.apns] = APNsChannel(providers: apns) }
    let fcmClient = http2Clients()
    let fcm = try settings.byApp(settings.fcm) { (credentials: PushApp.Credentials) in
        guard case .fcm(let fcm) = credentials else { return nil }
        return fcm
    }.map { try FCMProvider(configuration: $0, client: try fcmClient(), grants: client, now: context.now) }
    if !fcm.isEmpty { providers[.fcm] = FCMChannel(providers: fcm, now: context.now) }
    let vapid = try settings.byApp(settings.vapidSubject.map { (context.vapidKey, subject: $0) }) {
        (credentials: PushApp.Credentials) -> (VAPIDKey, subject: String)? in
        guard case .webPush(let subject, let pem) = credentials else { return nil }
        return (try VAPIDKey(pemRepresentation: pem), subject: subject)
    }
    if !vapid.isEmpty {
        let clients = PinnedClients(
            shared: client, allowingLoopback: settings.webPushAllowsLoopback, resolver: resolver,
            now: context.now
        ) { [eventLoopGroup = app.eventLoopGroup, pem = settings.extraCertificatesPEM] dnsOverride in
            try HTTPClient.outbound(eventLoopGroup: eventLoopGroup, extraCertificatesPEM: pem, dnsOverride: dnsOverride)
        }
        app.lifecycle.use(PinnedClientsShutdown(clients: clients))
        providers[.webPush] = WebPushChannel(clients: clients, keys: vapid, now: context.now)
    }
    return providers
}

/// The monitor of `belfry serve`'s database: a `SELECT 1` on the pool, which it replaces with a
/// new one (Fluent builds it again on the next use) when checks keep failing.
private func databaseMonitor(
    _ app: Application, database: BelfryDatabase, now: @escaping @Sendable () -> Date
) -> DatabaseMonitor {
    DatabaseMonitor(
        check: { [unowned app] in try await app.db.sql.raw("SELECT 1").run() },
        replacePool: { [unowned app] in
            guard database.kind == .postgres else { return }
            // Closing the old pool waits for its idle connections to close: off the task pool.
            await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                DispatchQueue.global().async {
                    app.databases.reinitialize(database.id)
                    done.resume()
                }
            }
        },
        now: now, logger: app.logger)
}

/// Email through the configured relay, over a pool of SMTP connections closed at shutdown.
private func emailChannel(
    _ app: Application, _ settings: ServerConfiguration, _ email: ServerConfiguration.Email,
    context: BelfryContext
) throws -> EmailChannel {
    let tls = try TLSConfiguration.outbound(extraCertificatesPEM: settings.extraCertificatesPEM)
    let publicURL = settings.publicURL ?? "http://\(settings.hostname):\(settings.port)"
    // EHLO names this host: the public address's, as an address literal when it is an IP.
    let host = (URLComponents(string: publicURL)?.host ?? "localhost").trimmingCharacters(in: ["[", "]"])
    let clientName =
        host.contains(":") ? "[IPv6:\(host)]" : host.allSatisfy({ $0.isNumber || $0 == "." }) ? "[\(host)]" : host
    let client = try SMTPClient(
        configuration: .init(
            host: email.smtp.host, port: email.smtp.port, security: email.smtp.security,
            credentials: email.smtp.credentials, clientName: clientName,
            timeouts: SMTPTimeouts.rfc5321.capped(at: .seconds(max(settings.deliveryLease / 2, 1))), tls: tls),
        group: app.eventLoopGroup)
    // An attempt starts within half the lease of its claim (the queue sees to that) and takes at
    // most the other half: no other worker claims it while it is being sent.
    app.lifecycle.use(SMTPClientShutdown(client: client))
    return EmailChannel(
        client: client,
        composer: try EmailComposer(
            from: try MailAddress(parsing: email.from), publicURL: publicURL, signer: context.webSigner,
            workspace: settings.workspace, now: context.now),
        timeout: .seconds(max(settings.deliveryLease / 2, 1)))
}

/// Closes the SMTP connections with the application.
private struct SMTPClientShutdown: LifecycleHandler {
    let client: SMTPClient

    func shutdownAsync(_ application: Application) async {
        await client.shutdown()
    }
}

/// The providers' shared client, shut down with the application.
private func outboundClient(_ app: Application, _ settings: ServerConfiguration) throws -> HTTPClient {
    let client = try HTTPClient.outbound(
        eventLoopGroup: app.eventLoopGroup, extraCertificatesPEM: settings.extraCertificatesPEM)
    app.lifecycle.use(HTTPClientShutdown(client: client))
    return client
}

/// A client for webhooks, shut down with the application: the channel has one, the status
/// events' sender another, so that neither takes the other's connections.
private func webhookClient(_ app: Application, _ settings: ServerConfiguration) throws -> HTTP1Client {
    let client = try HTTP1Client(
        group: app.eventLoopGroup, tls: try .outbound(extraCertificatesPEM: settings.extraCertificatesPEM),
        connectionsPerOrigin: WebhookChannel.inFlight)
    app.lifecycle.use(HTTP1ClientShutdown(client: client))
    return client
}

/// Shuts the webhooks' client down with the application.
private struct HTTP1ClientShutdown: LifecycleHandler {
    let client: HTTP1Client

    func shutdownAsync(_ application: Application) async {
        await client.shutdown()
    }
}

/// Ends the open inbox streams and console feeds at shutdown, so that their responses finish.
private struct StreamShutdown: LifecycleHandler {
    let hub: InboxHub
    let flag: ShutdownFlag

    func shutdownAsync(_ application: Application) async {
        flag.set()
        hub.finishAll()
    }
}

/// Shuts an HTTP client down with the application.
private struct HTTPClientShutdown: LifecycleHandler {
    let client: HTTPClient

    func shutdownAsync(_ application: Application) async {
        try? await client.shutdown()
    }
}

/// Shuts the Web Push clients down with the application.
private struct PinnedClientsShutdown: LifecycleHandler {
    let clients: PinnedClients

    func shutdownAsync(_ application: Application) async {
        await clients.shutdown()
    }
}

/// Closes the APNs connections with the application.
private struct HTTP2ClientShutdown: LifecycleHandler {
    let client: HTTP2Client

    func shutdownAsync(_ application: Application) async {
        await client.shutdown()
    }
}

/// Starts the background services once the server has booted, and drains them at shutdown.
private struct BackgroundServices: LifecycleHandler {
    let services: [BackgroundService]

    func didBootAsync(_ application: Application) async throws {
        services.forEach { $0.start() }
    }

    func shutdownAsync(_ application: Application) async {
        await withTaskGroup(of: Void.self) { group in
            for service in services { group.addTask { await service.stop() } }
        }
    }
}

extension Application {
    private struct QueueKey: StorageKey {
        typealias Value = DeliveryQueue
    }

    private struct RelayListenerKey: StorageKey {
        typealias Value = InboxRelayListener
    }

    private struct MonitorKey: StorageKey {
        typealias Value = DatabaseMonitor
    }

    /// Under `belfry serve`, what watches the database for `/readyz` and heals its pool.
    var databaseMonitor: DatabaseMonitor? {
        get { storage[MonitorKey.self] }
        set { storage[MonitorKey.self] = newValue }
    }

    /// On PostgreSQL, what listens for other instances' inbox changes.
    var inboxRelayListener: InboxRelayListener? {
        get { storage[RelayListenerKey.self] }
        set { storage[RelayListenerKey.self] = newValue }
    }

    /// The delivery queue; run in the background only under `belfry serve`, driven by hand in tests.
    var deliveryQueue: DeliveryQueue? {
        get { storage[QueueKey.self] }
        set { storage[QueueKey.self] = newValue }
    }

    private struct StatusSenderKey: StorageKey {
        typealias Value = StatusEventSender
    }

    /// The status event sender, when the workspace has `webhooks`; driven by hand in tests.
    var statusEventSender: StatusEventSender? {
        get { storage[StatusSenderKey.self] }
        set { storage[StatusSenderKey.self] = newValue }
    }
}

/// Makes an application, configures it, runs `body`, and shuts the application down
/// whether `body` succeeds or throws.
public func withBelfryApplication<T>(
    _ environment: Environment,
    settings: ServerConfiguration,
    options: ConfigureOptions = ConfigureOptions(),
    _ body: (Application, StartupReport) async throws -> T
) async throws -> T {
    let app = try await Application.make(environment)
    do {
        let report = try await configure(app, settings: settings, options: options)
        let result = try await body(app, report)
        try await app.asyncShutdown()
        return result
    } catch {
        try? await app.asyncShutdown()
        throw error
    }
}
