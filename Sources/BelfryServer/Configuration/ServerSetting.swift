import BelfryCore

/// One server setting: where it is read from, its default, and what the configuration guide
/// says of it. `ServerSetting.all` is the one list of settings: `ServerConfiguration.resolve`
/// reads settings through it only, the file's `server` object accepts its keys only, and
/// `belfry config table` prints docs/configuration.md's table from it (a test compares the two).
public struct ServerSetting: Sendable {
    /// What the setting is, for the guide's first column.
    public var summary: String
    /// The command-line flag with its placeholder, such as `--port P`.
    public var flag: String?
    public var environment: String
    /// The key in the config file's `server` object.
    public var file: String?
    /// The default, as the guide shows it (Markdown).
    public var defaultValue: String
    /// For a whole-number setting: its default and the values it takes, written once here for
    /// the reader and the guide alike.
    var number: WholeNumber?
    /// A default the reader reads with the setting's own parser, as if it were given (the guide
    /// shows it as code): written once, here.
    public var defaultText: String?

    init(
        summary: String, flag: String? = nil, environment: String, file: String?, defaultValue: String,
        number: WholeNumber? = nil, defaultText: String? = nil
    ) {
        self.summary = summary
        self.flag = flag
        self.environment = environment
        self.file = file
        self.defaultValue = defaultValue
        self.number = number
        self.defaultText = defaultText
    }

    /// The default of a whole-number setting.
    public var defaultNumber: Int {
        guard let number else { preconditionFailure("\(environment) is not a whole-number setting") }
        return number.defaultValue
    }

    struct WholeNumber: Sendable {
        var defaultValue: Int
        var range: ClosedRange<Int>
    }

    /// A whole-number setting: the guide shows its default from the same value the reader uses.
    static func wholeNumber(
        summary: String, flag: String? = nil, environment: String, file: String?, default value: Int,
        in range: ClosedRange<Int>
    ) -> Self {
        Self(
            summary: summary, flag: flag, environment: environment, file: file, defaultValue: "`\(value)`",
            number: WholeNumber(defaultValue: value, range: range))
    }

    /// A setting whose default is read like a given value: the guide shows `text`.
    static func withDefault(
        summary: String, flag: String? = nil, environment: String, file: String?, default text: String
    ) -> Self {
        Self(
            summary: summary, flag: flag, environment: environment, file: file, defaultValue: "`\(text)`",
            defaultText: text)
    }

    /// Whether the environment or the file's `server` object gives this setting at all (a bad
    /// value is reported where it is read; this tells a missing one from a bad one).
    func isGiven(environment: [String: String], file server: ConfigNode) -> Bool {
        environment[self.environment] != nil || (file.map { server[$0].isPresent } ?? false)
    }

    /// The flag's name alone: `--port`.
    var flagName: String? { flag.map { String($0.prefix { $0 != " " }) } }

    /// The guide's table: a row per setting.
    public static var markdownTable: String {
        var lines = [
            "| setting | flag | environment | file (`server.`) | default |",
            "|---|---|---|---|---|",
        ]
        for setting in all {
            let cells = [
                setting.summary, setting.flag.map { "`\($0)`" } ?? "", "`\(setting.environment)`",
                setting.file.map { "`\($0)`" } ?? "", setting.defaultValue,
            ]
            lines.append("| " + cells.joined(separator: " | ") + " |")
        }
        return lines.joined(separator: "\n") + "\n"
    }

    static let config = Self(
        summary: "config file", flag: "--config FILE", environment: "BELFRY_CONFIG", file: nil,
        defaultValue: "the built-in demo workspace")
    public static let hostname = withDefault(
        summary: "listen address", flag: "--hostname H", environment: "BELFRY_HOSTNAME", file: "hostname",
        default: "127.0.0.1")
    public static let port = wholeNumber(
        summary: "port (0 picks a free one)", flag: "--port P", environment: "BELFRY_PORT", file: "port",
        default: 8080, in: 0...65_535)
    public static let database = withDefault(
        summary: "database: file path, `sqlite://PATH` or `postgres://user:pass@host:port/db`", flag: "--database",
        environment: "DATABASE_URL", file: "database", default: "belfry.sqlite")
    static let apiKeys = Self(
        summary: "API keys (comma-separated in the environment; 16+ characters each)", environment: "BELFRY_API_KEY",
        file: "api_keys", defaultValue: "a development key, created and printed once")
    static let tokenSecret = Self(
        summary: "user-token signing secret (16+ characters)", environment: "BELFRY_TOKEN_SECRET", file: "token_secret",
        defaultValue: "created once and kept in the database")
    public static let tokenLifetime = wholeNumber(
        summary: "user-token lifetime, seconds (60 to 2592000)", environment: "BELFRY_TOKEN_TTL",
        file: "token_ttl_seconds", default: 3600, in: 60...2_592_000)
    public static let logLevel = withDefault(
        summary: "log level (`trace` … `critical`)", environment: "BELFRY_LOG_LEVEL", file: "log_level",
        default: "info")
    public static let logFormat = withDefault(
        summary:
            "log format: `text` lines, or `json` (one object a line: time, level, label, message, request id, metadata)",
        environment: "BELFRY_LOG_FORMAT", file: "log_format", default: "text")
    public static let maxBodySize = wholeNumber(
        summary: "largest request body, bytes (`POST /v1/events` takes up to 2 MB)",
        environment: "BELFRY_MAX_BODY_BYTES",
        file: "max_body_bytes", default: 262144, in: 1024...16 * 1024 * 1024)
    public static let requestTimeout = wholeNumber(
        summary: "seconds for a request to arrive and be answered, else 408 (1 to 3600)",
        environment: "BELFRY_REQUEST_TIMEOUT", file: "request_timeout_seconds", default: 30, in: 1...3600)
    public static let idleTimeout = wholeNumber(
        summary: "seconds a connection may stay silent before it is closed (20 to 86400)",
        environment: "BELFRY_IDLE_TIMEOUT", file: "idle_timeout_seconds", default: 60, in: 20...86_400)
    public static let maxConnectionsPerAddress = wholeNumber(
        summary:
            "connections one client address may hold open; beyond it the newest idle ones are closed "
            + "(0: no cap, up to 100000; Linux)",
        environment: "BELFRY_MAX_CONNECTIONS_PER_ADDRESS", file: "max_connections_per_address", default: 256,
        in: 0...100_000)
    public static let deliveryLease = wholeNumber(
        summary:
            "seconds a worker holds claimed deliveries; a dead worker's are claimed again after it (2 to 3600)",
        environment: "BELFRY_DELIVERY_LEASE", file: "delivery_lease_seconds", default: 120, in: 2...3600)
    public static let retryBase = wholeNumber(
        summary:
            "seconds before a failed delivery's first retry, doubling for each later one up to an hour, "
            + "jittered; a provider's shorter `Retry-After` waits as long (1 to 3600)",
        environment: "BELFRY_RETRY_BASE", file: "retry_base_seconds", default: 5, in: 1...3600)
    public static let retentionDays = wholeNumber(
        summary: "days after which read or archived inbox notifications are purged (1 to 3650)",
        environment: "BELFRY_RETENTION_DAYS", file: "retention_days", default: 90, in: 1...3650)
    public static let maxDevicesPerUser = wholeNumber(
        summary: "devices (apps and browsers) one user may register; more get 422 (1 to 1000)",
        environment: "BELFRY_MAX_DEVICES_PER_USER", file: "max_devices_per_user", default: 20, in: 1...1000)
    static let rateLimits = Self(
        summary:
            "requests allowed per API key, per user, and per address for console sign-ins and link pages "
            + "(`CLASS=N/s`, `N/min` or `N/h`, or `CLASS=off`, comma-separated; the classes given replace the defaults)",
        environment: "BELFRY_RATE_LIMITS", file: "rate_limits",
        defaultValue: "`api=10000/s,user=600/min,signin=10/min,public=120/min`")
    public static let maxStreamsPerUser = wholeNumber(
        summary: "inbox streams one user may hold open on one instance; more get 429 (1 to 1000)",
        environment: "BELFRY_MAX_STREAMS_PER_USER", file: "max_streams_per_user", default: 10, in: 1...1000)
    static let webhookURL = Self(
        summary: "webhook channel URL (http or https)", environment: "BELFRY_WEBHOOK_URL", file: "webhook_url",
        defaultValue: "off")
    static let webhookSecret = Self(
        summary: "webhook signing secret (16+ characters)", environment: "BELFRY_WEBHOOK_SECRET",
        file: "webhook_secret", defaultValue: "off")
    static let apnsKey = Self(
        summary: "APNs token signing key (`.p8`, PEM)", environment: "BELFRY_APNS_KEY_PATH", file: "apns_key_path",
        defaultValue: "off")
    static let apnsKeyID = Self(
        summary: "APNs key id (10 characters)", environment: "BELFRY_APNS_KEY_ID", file: "apns_key_id",
        defaultValue: "off")
    static let apnsTeamID = Self(
        summary: "APNs team id (10 characters)", environment: "BELFRY_APNS_TEAM_ID", file: "apns_team_id",
        defaultValue: "off")
    static let apnsTopic = Self(
        summary: "APNs topic (the app's bundle id; a device may give its own)", environment: "BELFRY_APNS_TOPIC",
        file: "apns_topic", defaultValue: "none")
    static let fcmServiceAccount = Self(
        summary: "FCM service account key file (JSON, from the Firebase console); turns Android push on",
        environment: "BELFRY_FCM_SERVICE_ACCOUNT_PATH", file: "fcm_service_account_path", defaultValue: "off")
    static let fcmURL = Self(
        summary: "FCM host instead of Google's (`https://…`)", environment: "BELFRY_FCM_URL", file: "fcm_url",
        defaultValue: "`https://fcm.googleapis.com`")
    static let apnsURL = Self(
        summary: "APNs host instead of Apple's (`https://…`)", environment: "BELFRY_APNS_URL", file: "apns_url",
        defaultValue: "`api.push.apple.com` / `api.sandbox.push.apple.com` by device")
    static let extraCertificates = Self(
        summary: "extra trusted certificates for outbound TLS (PEM file)", environment: "BELFRY_EXTRA_CA_FILE",
        file: "extra_ca_file", defaultValue: "none")
    static let vapidSubject = Self(
        summary: "Web Push contact (`mailto:` or `https:`); turns Web Push on", environment: "BELFRY_VAPID_SUBJECT",
        file: "vapid_subject", defaultValue: "off")
    static let vapidKey = Self(
        summary: "VAPID private key (PEM)", environment: "BELFRY_VAPID_PRIVATE_KEY_PATH",
        file: "vapid_private_key_path",
        defaultValue: "created once and kept in the database")
    static let webPushLoopbackHTTP = Self(
        summary: "accept push endpoints at loopback IP addresses, over `http://` too (for tests only)",
        environment: "BELFRY_WEBPUSH_ALLOW_HTTP_LOOPBACK",
        file: "webpush_allow_http_loopback", defaultValue: "`false`")
    static let smtpURL = Self(
        summary:
            "SMTP relay for email (`smtp://user:password@host:port`, `smtps://…`, `smtp://127.0.0.1:port?tls=none`)",
        environment: "BELFRY_SMTP_URL", file: "smtp_url", defaultValue: "off")
    static let emailFrom = Self(
        summary: "email sender (`Name <address>`)", environment: "BELFRY_EMAIL_FROM", file: "email_from",
        defaultValue: "off")
    static let publicURL = Self(
        summary: "the address users reach Belfry at, for links in emails", environment: "BELFRY_PUBLIC_URL",
        file: "public_url", defaultValue: "`http://HOST:PORT` when listening on loopback")
    static let metricsToken = Self(
        summary: "bearer token `GET /metrics` asks for (16+ characters)", environment: "BELFRY_METRICS_TOKEN",
        file: "metrics_token", defaultValue: "none: `/metrics` is open")

    /// Every setting, in the guide's order.
    public static let all: [ServerSetting] = [
        config, hostname, port, database, apiKeys, tokenSecret, tokenLifetime, logLevel, logFormat, maxBodySize,
        requestTimeout, idleTimeout, maxConnectionsPerAddress, deliveryLease, retryBase, retentionDays,
        maxDevicesPerUser, rateLimits,
        maxStreamsPerUser, webhookURL, webhookSecret,
        apnsKey, apnsKeyID,
        apnsTeamID, apnsTopic, apnsURL, fcmServiceAccount, fcmURL, extraCertificates, vapidSubject, vapidKey,
        webPushLoopbackHTTP, smtpURL,
        emailFrom, publicURL, metricsToken,
    ]

    /// The keys the config file's `server` object may hold.
    static let fileKeys = Set(all.compactMap(\.file))
}
