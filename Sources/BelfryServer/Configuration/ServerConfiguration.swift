import BelfryCore
import BelfryFCM
import BelfryHTTP2
import BelfryMail
import BelfryWebPush
import Crypto
import Foundation
import Logging
import NIOSSL

/// Everything `belfry` needs to run, decoded once: flags, then environment, then the
/// config file, then defaults. Every bad or missing value is reported together.
public struct ServerConfiguration: Sendable {
    public var hostname: String
    public var port: Int
    public var database: DatabaseLocation
    public var workspace: WorkspaceConfig
    /// Where the workspace came from: a file path, or the built-in demo.
    public var workspaceSource: String
    /// Server-side API keys. Empty means a development key is created on first start.
    public var apiKeys: [String]
    /// The secret that signs user tokens. `nil` means one is created and kept in the database.
    public var tokenSecret: String?
    /// How long a minted user token is valid, in seconds.
    public var tokenLifetime: Int
    public var logLevel: Logger.Level
    /// `text` lines for people, or one JSON object per line for a log pipeline.
    public var logFormat: LogFormat
    /// Largest request body accepted.
    public var maxBodySize: Int
    /// Seconds a request may take to arrive and be answered before it gets a 408.
    public var requestTimeout: Int
    /// Seconds a connection may go without a byte either way before it is closed. Open
    /// streams send a heartbeat every 15 seconds, so this is at least 20.
    public var idleTimeout: Int
    /// Connections one client address may hold open (0: no cap).
    public var maxConnectionsPerAddress: Int
    /// Seconds a worker holds the deliveries it claimed: those of a worker that died are
    /// claimed again by another once this has passed.
    public var deliveryLease: Int
    /// Seconds before a failed delivery's first retry (the backoff doubles it for each later one).
    public var retryBase: Int
    /// Days after which read or archived inbox notifications are purged.
    public var retentionDays: Int
    public var maxDevicesPerUser: Int
    public var rateLimits: RateLimits
    public var maxStreamsPerUser: Int
    /// Where the webhook channel posts, and the secret that signs its requests; `nil` turns the channel off.
    public var webhook: Webhook?
    /// The APNs provider's token key and ids; `nil` turns APNs off.
    public var apns: APNs?
    /// The Firebase project's service account and FCM's host; `nil` turns Android push off.
    public var fcm: FCM?
    /// The workspace file's apps: more push credentials, each its own app; devices name theirs.
    public var apps: [PushApp]
    /// The workspace file's `webhooks`: where status events go.
    public var statusEndpoints: [StatusEndpoint]
    /// Web Push: the VAPID contact (`mailto:` or `https:`), required for sending; `nil` turns Web Push off.
    public var vapidSubject: String?
    /// The VAPID signing key (PEM); `nil` means one is created and kept in the database.
    public var vapidKeyPEM: String?
    /// Accept `http://` push endpoints on loopback (local test endpoints only).
    public var webPushAllowsLoopback: Bool
    /// Certificates (PEM) trusted for outbound TLS besides the system's, for test servers and corporate proxies.
    public var extraCertificatesPEM: String?
    /// The email channel's relay and sender; `nil` turns email off.
    public var email: Email?
    /// The address users reach this server at, for the links in emails.
    public var publicURL: String?
    /// The bearer token `/metrics` asks for; `nil` leaves it open, for a scraper on a private network.
    public var metricsToken: String?

    public struct Email: Sendable, Hashable {
        public var smtp: SMTPLocation
        /// `Name <address>` or a bare address.
        public var from: String

        public init(smtp: SMTPLocation, from: String) {
            self.smtp = smtp
            self.from = from
        }
    }

    public struct APNs: Sendable, Hashable {
        /// The .p8 signing key, PEM.
        public var keyPEM: String
        public var keyID: String
        public var teamID: String
        /// The app's bundle id, unless a device gives its own.
        public var topic: String?
        /// Replaces Apple's hosts (`api.push.apple.com`, `api.sandbox.push.apple.com`).
        public var url: String?

        public init(keyPEM: String, keyID: String, teamID: String, topic: String? = nil, url: String? = nil) {
            self.keyPEM = keyPEM
            self.keyID = keyID
            self.teamID = teamID
            self.topic = topic
            self.url = url
        }
    }

    public struct FCM: Sendable, Hashable {
        /// The service account key file's JSON.
        public var serviceAccountJSON: String
        /// FCM's host: Google's, or a stand-in.
        public var url: String

        public static let googleURL = "https://fcm.googleapis.com"

        public init(serviceAccountJSON: String, url: String = googleURL) {
            self.serviceAccountJSON = serviceAccountJSON
            self.url = url
        }
    }

    public struct Webhook: Sendable, Hashable {
        public var url: String
        public var secret: String

        public init(url: String, secret: String) {
            self.url = url
            self.secret = secret
        }
    }

    public init(
        hostname: String = ServerSetting.hostname.defaultText!,
        port: Int = ServerSetting.port.defaultNumber,
        database: DatabaseLocation = .sqlite(path: ServerSetting.database.defaultText!),
        workspace: WorkspaceConfig,
        workspaceSource: String = "built-in demo",
        apiKeys: [String] = [],
        tokenSecret: String? = nil,
        tokenLifetime: Int = ServerSetting.tokenLifetime.defaultNumber,
        logLevel: Logger.Level = Logger.Level(rawValue: ServerSetting.logLevel.defaultText!)!,
        logFormat: LogFormat = LogFormat(rawValue: ServerSetting.logFormat.defaultText!)!,
        maxBodySize: Int = ServerSetting.maxBodySize.defaultNumber,
        requestTimeout: Int = ServerSetting.requestTimeout.defaultNumber,
        idleTimeout: Int = ServerSetting.idleTimeout.defaultNumber,
        maxConnectionsPerAddress: Int = ServerSetting.maxConnectionsPerAddress.defaultNumber,
        deliveryLease: Int = ServerSetting.deliveryLease.defaultNumber,
        retryBase: Int = ServerSetting.retryBase.defaultNumber,
        retentionDays: Int = ServerSetting.retentionDays.defaultNumber,
        maxDevicesPerUser: Int = ServerSetting.maxDevicesPerUser.defaultNumber,
        rateLimits: RateLimits = .defaults,
        maxStreamsPerUser: Int = ServerSetting.maxStreamsPerUser.defaultNumber,
        webhook: Webhook? = nil,
        apns: APNs? = nil,
        fcm: FCM? = nil,
        apps: [PushApp] = [],
        statusEndpoints: [StatusEndpoint] = [],
        extraCertificatesPEM: String? = nil,
        vapidSubject: String? = nil,
        vapidKeyPEM: String? = nil,
        webPushAllowsLoopback: Bool = false,
        email: Email? = nil,
        publicURL: String? = nil,
        metricsToken: String? = nil
    ) {
        self.hostname = hostname
        self.port = port
        self.database = database
        self.workspace = workspace
        self.workspaceSource = workspaceSource
        self.apiKeys = apiKeys
        self.tokenSecret = tokenSecret
        self.tokenLifetime = tokenLifetime
        self.logLevel = logLevel
        self.logFormat = logFormat
        self.maxBodySize = maxBodySize
        self.requestTimeout = requestTimeout
        self.idleTimeout = idleTimeout
        self.maxConnectionsPerAddress = maxConnectionsPerAddress
        self.deliveryLease = deliveryLease
        self.retryBase = retryBase
        self.retentionDays = retentionDays
        self.maxDevicesPerUser = maxDevicesPerUser
        self.rateLimits = rateLimits
        self.maxStreamsPerUser = maxStreamsPerUser
        self.webhook = webhook
        self.apns = apns
        self.fcm = fcm
        self.apps = apps
        self.statusEndpoints = statusEndpoints
        self.extraCertificatesPEM = extraCertificatesPEM
        self.vapidSubject = vapidSubject
        self.vapidKeyPEM = vapidKeyPEM
        self.webPushAllowsLoopback = webPushAllowsLoopback
        self.email = email
        self.publicURL = publicURL
        self.metricsToken = metricsToken
    }

    /// Values given on the command line; `nil` when a flag was not given.
    public struct Flags: Sendable {
        public var hostname: String?
        public var port: Int?
        public var database: String?
        public var config: String?

        public init(hostname: String? = nil, port: Int? = nil, database: String? = nil, config: String? = nil) {
            self.hostname = hostname
            self.port = port
            self.database = database
            self.config = config
        }
    }

    /// Shortest secret accepted for API keys and the token secret.
    static let minimumSecretLength = 16
    static var serverKeys: Set<String> { ServerSetting.fileKeys }

    /// Resolves the configuration.
    ///
    /// - Throws: `ConfigError` listing every bad value, each with its flag, variable or file path.
    public static func resolve(
        flags: Flags,
        environment: [String: String],
        readFile: (String) throws -> Data = { try Data(contentsOf: URL(fileURLWithPath: $0)) }
    ) throws(ConfigError) -> ServerConfiguration {
        let issues = ConfigIssueCollector()
        let env = environment.filter { !$0.value.isEmpty }

        // The config file: the workspace, and an optional "server" object.
        var workspace = WorkspaceConfig.demo
        var source = "built-in demo"
        var server = ConfigNode(root: .object([:]), issues: issues)["server"]
        var file: ConfigNode?
        if let path = flags.config ?? env[ServerSetting.config.environment] {
            source = path
            do {
                let root = try WorkspaceConfig.parseRoot(try readFile(path))
                let node = ConfigNode(root: root, issues: issues)
                workspace = WorkspaceConfig.read(node, allowing: ["server", "apps", "webhooks"]) ?? workspace
                file = node
                if node["server"].isPresent, node["server"].object(keys: serverKeys) {
                    server = node["server"]
                }
            } catch let error as ConfigError {
                error.issues.forEach { issues.add($0.path, $0.message) }
            } catch {
                issues.add(
                    flags.config != nil ? "--config" : ServerSetting.config.environment,
                    "cannot read \(path): \(error.localizedDescription)")
            }
        }

        let read = SettingReader(environment: env, server: server, issues: issues)
        var config = ServerConfiguration(workspace: workspace, workspaceSource: source)
        config.readListening(read, flags: flags)
        config.readCredentials(read)
        config.readLogging(read)
        config.readHTTP(read)
        config.readDelivery(read)
        config.readLimits(read)
        config.readWebhook(read)
        config.readPush(read, file: file, readFile: readFile)
        config.readStatusEndpoints(read, file: file, readFile: readFile)
        config.readCertificates(read, readFile: readFile)
        config.readWebPush(read, readFile: readFile)
        config.readEmail(read)
        config.readMetrics(read)
        for (index, category) in workspace.categories.enumerated() {
            for problem in EmailTemplates.problems(in: category) {
                read.issues.add("categories[\(index)].email.\(problem.path)", problem.message)
            }
            for problem in ContentRendering.problems(in: category) {
                read.issues.add("categories[\(index)].\(problem.path)", problem.message)
            }
        }

        guard issues.issues.isEmpty else { throw ConfigError(issues: issues.issues) }
        return config
    }

    /// A push service's host instead of the provider's own (a stand-in, a proxy): an https URL
    /// without a query, kept without a trailing slash.
    static func pushServiceURL(_ text: String) -> Result<String, ConfigurationProblem> {
        guard (try? HTTP2Client.Origin(text)) != nil else {
            return .failure(.init("expected an https URL without a query, such as https://host:port, got \"\(text)\""))
        }
        return .success(text.hasSuffix("/") ? String(text.dropLast()) : text)
    }

    /// Reads an APNs token signing key (a `.p8` file).
    static func readAPNsKey(_ path: String, readFile: (String) throws -> Data) -> Result<String, ConfigurationProblem> {
        readPEM(path, readFile: readFile) { pem in
            guard (try? P256.Signing.PrivateKey(pemRepresentation: pem)) != nil else {
                throw ConfigurationProblem("it is not a P-256 (ES256) private key in PEM")
            }
        }.mapError { .init("expected an APNs token signing key (.p8, PEM), but \($0.message)") }
    }

    /// Reads a VAPID signing key.
    static func readVAPIDKey(_ path: String, readFile: (String) throws -> Data) -> Result<String, ConfigurationProblem>
    {
        readPEM(path, readFile: readFile) { pem in
            _ = try VAPIDKey(pemRepresentation: pem)
        }.mapError { .init("expected a P-256 private key (PEM), but \($0.message)") }
    }

    /// Reads an FCM service account key file; its JSON text.
    static func readServiceAccount(
        _ path: String, readFile: (String) throws -> Data
    ) -> Result<String, ConfigurationProblem> {
        let json: Data
        do {
            json = try readFile(path)
        } catch {
            return .failure(.init("\(path) cannot be read: \(error.localizedDescription)"))
        }
        do {
            _ = try FCMServiceAccount(json: json)
        } catch {
            return .failure(.init("\(path): \(error)"))
        }
        return .success(String(decoding: json, as: UTF8.self))
    }

    /// Reads a PEM file and checks it with `parse`.
    private static func readPEM(
        _ path: String, readFile: (String) throws -> Data, parse: (String) throws -> Void
    ) -> Result<String, ConfigurationProblem> {
        let pem: String
        do {
            pem = String(decoding: try readFile(path), as: UTF8.self)
        } catch {
            return .failure(.init("\(path) cannot be read: \(error.localizedDescription)"))
        }
        do {
            try parse(pem)
            return .success(pem)
        } catch let problem as ConfigurationProblem {
            return .failure(.init("\(path): \(problem.message)"))
        } catch {
            return .failure(.init("\(path) does not parse"))
        }
    }

    /// Apple's 10-character key and team ids.
    static func identifier(_ text: String, length: Int) -> Result<String, ConfigurationProblem> {
        text.count == length && text.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber) }
            ? .success(text) : .failure(.init("expected \(length) letters and digits, got \"\(text)\""))
    }

    /// A file value as the text an environment variable would hold: strings as they are,
    /// booleans as true or false, whole numbers in decimal, lists of strings joined with commas.
    fileprivate static func text(of node: ConfigNode) -> String? {
        switch node.value {
        case .none, .some(.null): return nil
        case .some(.string(let text)): return text
        case .some(.bool(let value)): return value ? "true" : "false"
        case .some(.number(let number)) where number.rounded() == number && abs(number) < 1e15:
            return String(Int(number))
        case .some(.array(let elements)):
            let strings = elements.compactMap { element -> String? in
                if case .string(let text) = element { return text }
                return nil
            }
            if strings.count == elements.count { return strings.joined(separator: ",") }
            node.fail("expected a list of strings")
            return nil
        case .some:
            node.fail("expected a string or a number")
            return nil
        }
    }

    fileprivate static func parseInt(_ text: String, in range: ClosedRange<Int>) -> Result<Int, ConfigurationProblem> {
        guard let value = Int(text.trimmingCharacters(in: .whitespaces)), range.contains(value) else {
            return .failure(
                .init("expected a whole number from \(range.lowerBound) to \(range.upperBound), got \"\(text)\""))
        }
        return .success(value)
    }

    private static func checkSecrets(_ secrets: [String], _ what: String) -> Result<[String], ConfigurationProblem> {
        if secrets.isEmpty || secrets.contains(where: { $0.count < minimumSecretLength }) {
            return .failure(.init("\(what) must be at least \(minimumSecretLength) characters long"))
        }
        return .success(secrets)
    }
}

extension WorkspaceConfig {
    /// The demo workspace that ships with Belfry, modelled on a reader/editor app's notification types.
    public static let demo: WorkspaceConfig = {
        guard
            let url = Bundle.module.url(
                forResource: "demo-workspace", withExtension: "json", subdirectory: "Resources"),
            let data = try? Data(contentsOf: url)
        else {
            fatalError("the demo workspace resource is missing from the BelfryServer bundle")
        }
        do {
            return try WorkspaceConfig.decodeFile(data)
        } catch {
            // The file ships with Belfry and is checked by its tests, so this is a packaging bug.
            fatalError("the built-in demo workspace is invalid: \(error)")
        }
    }()
}

extension ServerConfiguration {
    /// A short digest of what a start runs with: every setting and the workspace, secrets
    /// counted only through their own digests. The audit log records it at each start, so a
    /// changed configuration shows as a new fingerprint.
    func fingerprint(workspace workspaceFingerprint: String) -> String {
        func secret(_ text: String?) -> String { text.map { APIKeys.fingerprint($0) } ?? "-" }
        let lines: [String] = [
            "hostname=\(hostname)", "port=\(port)", "database=\(database)", "workspace=\(workspaceFingerprint)",
            "api_keys=\(apiKeys.map { secret($0) }.sorted())", "token_secret=\(secret(tokenSecret))",
            "token_ttl=\(tokenLifetime)", "log=\(logLevel) \(logFormat)", "max_body=\(maxBodySize)",
            "timeouts=\(requestTimeout) \(idleTimeout) \(deliveryLease)",
            "max_connections_per_address=\(maxConnectionsPerAddress)", "retention=\(retentionDays)",
            "retry_base=\(retryBase)",
            "max_devices=\(maxDevicesPerUser)", "rate_limits=\(rateLimits)", "max_streams=\(maxStreamsPerUser)",
            "webhook=\(webhook.map { "\($0.url) \(secret($0.secret))" } ?? "-")",
            "apns=\(apns.map { "\($0.keyID) \($0.teamID) \($0.topic ?? "-") \($0.url ?? "-") \(secret($0.keyPEM))" } ?? "-")",
            "fcm=\(fcm.map { "\($0.url) \(secret($0.serviceAccountJSON))" } ?? "-")",
            "apps=\(apps.map { "\($0.id) \($0.platform.rawValue) \(secret("\($0.credentials)"))" })",
            "webhooks=\(statusEndpoints.map { "\($0.id) \($0.url) \($0.events.map(\.rawValue).sorted())" })",
            "vapid=\(vapidSubject ?? "-") \(secret(vapidKeyPEM)) \(webPushAllowsLoopback)",
            "extra_ca=\(secret(extraCertificatesPEM))", "email=\(email.map { "\($0.smtp) \($0.from)" } ?? "-")",
            "public_url=\(publicURL ?? "-")", "metrics_token=\(secret(metricsToken))",
        ]
        return APIKeys.fingerprint(lines.joined(separator: "\n"))
    }
}

extension ServerConfiguration {
    /// Reads the listen address, the port and the database.
    fileprivate mutating func readListening(_ read: SettingReader, flags: Flags) {
        let hostname = read.valueOrDefault(.hostname, flag: flags.hostname) { text in
            text.isEmpty ? .failure(.init("must not be empty")) : .success(text)
        }
        self.port = read.number(.port, flag: flags.port.map(String.init))
        self.database = read.valueOrDefault(.database, flag: flags.database, parse: DatabaseLocation.parse)
        self.hostname = hostname
    }

    /// Reads the API keys, the user tokens' secret and lifetime.
    fileprivate mutating func readCredentials(_ read: SettingReader) {
        let apiKeys =
            read.value(.apiKeys) { text in
                Self.checkSecrets(
                    text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }, "each API key")
            } ?? []
        let tokenSecret = read.value(.tokenSecret) { text in
            Self.checkSecrets([text], "the token secret").map { $0[0] }
        }
        self.tokenLifetime = read.number(.tokenLifetime)
        self.apiKeys = apiKeys
        self.tokenSecret = tokenSecret
    }

    /// Reads the log level and format.
    fileprivate mutating func readLogging(_ read: SettingReader) {
        let logLevel =
            read.valueOrDefault(.logLevel) { text in
                Logger.Level(rawValue: text.lowercased()).map { .success($0) }
                    ?? .failure(
                        .init(
                            "expected one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", ")), got \"\(text)\""
                        ))
            }
        let logFormat = read.valueOrDefault(.logFormat) { text in
            LogFormat(rawValue: text.lowercased()).map { .success($0) }
                ?? .failure(.init("expected text or json, got \"\(text)\""))
        }
        self.logLevel = logLevel
        self.logFormat = logFormat
    }

    /// Reads the HTTP limits: body size, request and idle timeouts, connections per address.
    fileprivate mutating func readHTTP(_ read: SettingReader) {
        self.maxBodySize = read.number(.maxBodySize)
        self.requestTimeout = read.number(.requestTimeout)
        self.idleTimeout = read.number(.idleTimeout)
        self.maxConnectionsPerAddress = read.number(.maxConnectionsPerAddress)
    }

    /// Reads the delivery lease, the retry backoff's base and the inbox retention.
    fileprivate mutating func readDelivery(_ read: SettingReader) {
        self.deliveryLease = read.number(.deliveryLease)
        self.retryBase = read.number(.retryBase)
        self.retentionDays = read.number(.retentionDays)
    }

    /// Reads the per-user caps and the rate limits.
    fileprivate mutating func readLimits(_ read: SettingReader) {
        self.maxDevicesPerUser = read.number(.maxDevicesPerUser)
        let rateLimits = read.value(.rateLimits) { RateLimits.parse($0) } ?? .defaults
        self.maxStreamsPerUser = read.number(.maxStreamsPerUser)
        self.rateLimits = rateLimits
    }

    /// Reads the app webhook channel.
    fileprivate mutating func readWebhook(_ read: SettingReader) {
        let webhookURL = read.value(.webhookURL) {
            text -> Result<String, ConfigurationProblem> in
            guard let url = URL(string: text), ["http", "https"].contains(url.scheme ?? ""), url.host != nil else {
                return .failure(.init("expected an http or https URL, got \"\(text)\""))
            }
            return .success(text)
        }
        let webhookSecret = read.value(.webhookSecret) { text in
            Self.checkSecrets([text], "the webhook secret").map { $0[0] }
        }
        var webhook: Webhook?
        switch (webhookURL, webhookSecret) {
        case (let url?, let secret?): webhook = Webhook(url: url, secret: secret)
        case (.some, nil):
            read.issues.add(
                ServerSetting.webhookSecret.environment, "a webhook URL needs a secret to sign its requests")
        case (nil, .some):
            read.issues.add(ServerSetting.webhookURL.environment, "a webhook secret is set but no webhook URL")
        case (nil, nil): break
        }

        self.webhook = webhook
    }

    /// Reads APNs, FCM and the apps.
    fileprivate mutating func readPush(_ read: SettingReader, file: ConfigNode?, readFile: (String) throws -> Data) {
        let apnsKey = read.value(.apnsKey) { Self.readAPNsKey($0, readFile: readFile) }
        let apnsKeyID = read.value(.apnsKeyID) { Self.identifier($0, length: 10) }
        let apnsTeamID = read.value(.apnsTeamID) { Self.identifier($0, length: 10) }
        let apnsTopic = read.value(.apnsTopic) {
            text -> Result<String, ConfigurationProblem> in
            text.isEmpty || text.count > 255
                ? .failure(.init("expected a bundle id such as org.example.app")) : .success(text)
        }
        let apnsURL = read.value(.apnsURL, parse: Self.pushServiceURL)
        var apns: APNs?
        switch (apnsKey, apnsKeyID, apnsTeamID) {
        case (let key?, let keyID?, let teamID?):
            apns = APNs(keyPEM: key, keyID: keyID, teamID: teamID, topic: apnsTopic, url: apnsURL)
        case (nil, nil, nil):
            if apnsTopic != nil || apnsURL != nil {
                read.issues.add(
                    ServerSetting.apnsKey.environment, "APNs settings are given but no signing key, key id and team id")
            }
        default:
            // A value given but bad is reported where it was read; only the missing ones here.
            for (present, setting) in [
                (apnsKey != nil, ServerSetting.apnsKey), (apnsKeyID != nil, .apnsKeyID),
                (apnsTeamID != nil, .apnsTeamID),
            ]
            where !present && !setting.isGiven(environment: read.environment, file: read.server) {
                read.issues.add(setting.environment, "APNs needs a signing key, its key id and the team id together")
            }
        }
        let fcmServiceAccount = read.value(.fcmServiceAccount) { Self.readServiceAccount($0, readFile: readFile) }
        let fcmURL = read.value(.fcmURL, parse: Self.pushServiceURL)
        var fcm: FCM?
        if let fcmServiceAccount {
            fcm = FCM(serviceAccountJSON: fcmServiceAccount, url: fcmURL ?? FCM.googleURL)
        } else if fcmURL != nil
            && !ServerSetting.fcmServiceAccount.isGiven(environment: read.environment, file: read.server)
        {
            read.issues.add(ServerSetting.fcmServiceAccount.environment, "an FCM URL is set but no service account")
        }
        let apps = file.map { PushApp.read($0["apps"], readFile: readFile, apnsURL: apnsURL, fcmURL: fcmURL) } ?? []
        if let file { PushApp.checkTenants(file["tenants"], apps: apps) }
        self.apns = apns
        self.fcm = fcm
        self.apps = apps
    }

    /// Reads the status events' endpoints.
    fileprivate mutating func readStatusEndpoints(
        _ read: SettingReader, file: ConfigNode?, readFile: (String) throws -> Data
    ) {
        let statusEndpoints = file.map { StatusEndpoint.read($0["webhooks"], readFile: readFile) } ?? []
        self.statusEndpoints = statusEndpoints
    }

    /// Reads extra certificate authorities for outbound TLS.
    fileprivate mutating func readCertificates(_ read: SettingReader, readFile: (String) throws -> Data) {
        let extraCertificates = read.value(.extraCertificates) { path in
            Self.readPEM(path, readFile: readFile) { pem in
                guard !(try NIOSSLCertificate.fromPEMBytes(Array(pem.utf8))).isEmpty else {
                    throw ConfigurationProblem("it holds no certificate")
                }
            }.mapError { .init("expected PEM certificates, but \($0.message)") }
        }

        self.extraCertificatesPEM = extraCertificates
    }

    /// Reads Web Push: the VAPID subject and key, loopback endpoints.
    fileprivate mutating func readWebPush(_ read: SettingReader, readFile: (String) throws -> Data) {
        let vapidSubject = read.value(.vapidSubject) {
            text -> Result<String, ConfigurationProblem> in
            VAPIDKey.isValidSubject(text)
                ? .success(text)
                : .failure(.init("expected a mailto: address or an https: URL to reach the operator, got \"\(text)\""))
        }
        let vapidKey = read.value(.vapidKey) { Self.readVAPIDKey($0, readFile: readFile) }
        let allowLoopbackHTTP =
            read.value(.webPushLoopbackHTTP) {
                text -> Result<Bool, ConfigurationProblem> in
                switch text.lowercased() {
                case "true", "1", "yes": .success(true)
                case "false", "0", "no": .success(false)
                default: .failure(.init("expected true or false, got \"\(text)\""))
                }
            } ?? false

        self.vapidSubject = vapidSubject
        self.vapidKeyPEM = vapidKey
        self.webPushAllowsLoopback = allowLoopbackHTTP
    }

    /// Reads email: the SMTP server, the sender and the public address.
    fileprivate mutating func readEmail(_ read: SettingReader) {
        let smtp = read.value(.smtpURL, parse: SMTPLocation.parse)
        let emailFrom = read.value(.emailFrom) {
            text -> Result<String, ConfigurationProblem> in
            do {
                _ = try MailAddress(parsing: text)
                return .success(text)
            } catch {
                return .failure(.init("expected a sender such as \"Belfry <notify@example.org>\": \(error)"))
            }
        }
        let publicURL = read.value(.publicURL) {
            text -> Result<String, ConfigurationProblem> in
            guard let url = URLComponents(string: text), ["http", "https"].contains(url.scheme ?? ""),
                let host = url.host, !host.isEmpty, url.query == nil, url.fragment == nil,
                // The host names this server in EHLO too: letters, digits, dots, hyphens, or an IP.
                host.unicodeScalars.allSatisfy({
                    $0.isASCII
                        && ($0.properties.isAlphabetic || $0.properties.numericType != nil
                            || ".-:[]".unicodeScalars.contains($0))
                })
            else {
                return .failure(.init("expected the http or https address users reach Belfry at, got \"\(text)\""))
            }
            return .success(text.hasSuffix("/") ? String(text.dropLast()) : text)
        }
        var email: Email?
        switch (smtp, emailFrom) {
        case (let smtp?, let from?):
            email = Email(smtp: smtp, from: from)
            if publicURL == nil && !SMTPLocation.isLoopback(self.hostname) {
                read.issues.add(
                    ServerSetting.publicURL.environment,
                    "email needs the address users reach Belfry at, for its links (unsubscribe, preferences)")
            }
        // A value given but bad is reported above already; only a missing one is reported here.
        case (.some, nil) where !ServerSetting.emailFrom.isGiven(environment: read.environment, file: read.server):
            read.issues.add(ServerSetting.emailFrom.environment, "email needs a sender address")
        case (nil, .some) where !ServerSetting.smtpURL.isGiven(environment: read.environment, file: read.server):
            read.issues.add(ServerSetting.smtpURL.environment, "a sender address is set but no SMTP server")
        default: break
        }
        self.email = email
        self.publicURL = publicURL
    }

    /// Reads the metrics token.
    fileprivate mutating func readMetrics(_ read: SettingReader) {
        let metricsToken = read.value(.metricsToken) { text in
            Self.checkSecrets([text], "the metrics token").map { $0[0] }
        }
        self.metricsToken = metricsToken
    }
}

/// Reads server settings: the flag, else the environment variable, else the config file's
/// `server` object, each given value checked (a bad one is reported where it was given).
fileprivate struct SettingReader {
    let environment: [String: String]
    let server: ConfigNode
    let issues: ConfigIssueCollector

    /// A setting's value: the flag, else the environment variable, else the file. The file's
    /// value is checked even when overridden, so that every bad value is reported.
    func value<Value>(
        _ setting: ServerSetting, flag: String? = nil, parse: (String) -> Result<Value, ConfigurationProblem>
    ) -> Value? {
        let name = setting.environment
        var fromFile: Value?
        if let key = setting.file, let text = ServerConfiguration.text(of: server[key]) {
            switch parse(text) {
            case .success(let value): fromFile = value
            case .failure(let problem): server[key].fail(problem.message)
            }
        }
        var fromEnvironment: Value?
        if let text = environment[name] {
            switch parse(text) {
            case .success(let value): fromEnvironment = value
            case .failure(let problem): issues.add(name, problem.message)
            }
        }
        if let text = flag {
            switch parse(text) {
            case .success(let value): return value
            case .failure(let problem):
                issues.add(setting.flagName ?? name, problem.message)
                return nil
            }
        }
        return environment[name] != nil ? fromEnvironment : fromFile
    }

    /// A setting with a default text: the value given, else the default read by the same parser.
    func valueOrDefault<Value>(
        _ setting: ServerSetting, flag: String? = nil, parse: (String) -> Result<Value, ConfigurationProblem>
    ) -> Value {
        if let value = value(setting, flag: flag, parse: parse) { return value }
        guard let text = setting.defaultText, case .success(let value) = parse(text) else {
            preconditionFailure("\(setting.environment)'s default does not read")
        }
        return value
    }

    /// A whole-number setting, read against its range, else its default.
    func number(_ setting: ServerSetting, flag: String? = nil) -> Int {
        guard let rule = setting.number else {
            preconditionFailure("\(setting.environment) is not a whole-number setting")
        }
        return value(setting, flag: flag) { ServerConfiguration.parseInt($0, in: rule.range) } ?? rule.defaultValue
    }
}
