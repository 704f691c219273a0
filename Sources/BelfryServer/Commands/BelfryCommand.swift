import ArgumentParser
import BelfryCore
import Fluent
import Foundation
import Logging
import Vapor

/// The `belfry` command line.
public struct BelfryCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "belfry",
        abstract: "Belfry, a self-hosted notification platform.",
        version: belfryVersion,
        subcommands: [
            ServeCommand.self, MigrateCommand.self, SendCommand.self, TokenCommand.self, LinkCommand.self,
            ConfigCommand.self, TopicsCommand.self, EventsCommand.self, UsersCommand.self, DevicesCommand.self,
            DeliveriesCommand.self, MessagesCommand.self, KeysCommand.self, AuditCommand.self, TemplatesCommand.self,
        ]
    )

    public init() {}

    /// `belfry` alone: the help, and the usage error's exit status (64), since nothing was done.
    public func run() async throws {
        say(Self.helpMessage())
        throw ExitCode(64)
    }
}

/// The release `belfry --version` prints.
public let belfryVersion = "0.3.0"

/// A command that could not do what it was asked, for a reason other than its arguments (no
/// such user, event or key; a reused idempotency key): one line on standard error and exit
/// status 1, without the usage text a usage error (64) prints.
struct CommandFailure: Error, CustomStringConvertible {
    var description: String

    init(_ description: String) {
        self.description = description
    }
}

/// Options every command that opens the database takes.
struct StorageOptions: ParsableArguments {
    @ArgumentParser.Option(
        help: "The config file (JSON). Default: $\(ServerSetting.config.environment), else the built-in demo workspace."
    )
    var config: String?

    @ArgumentParser.Option(help: "A SQLite file path or a postgres:// URL. Default: $DATABASE_URL, else belfry.sqlite.")
    var database: String?
}

extension ServerConfiguration {
    /// Resolves the configuration for a command, printing every problem and exiting non-zero if there are any.
    static func forCommand(_ flags: Flags) throws -> ServerConfiguration {
        do {
            return try resolve(flags: flags, environment: ProcessInfo.processInfo.environment)
        } catch {
            FileHandle.standardError.write(Data("belfry: \(error)\n".utf8))
            throw ExitCode(1)
        }
    }
}

/// Logging to standard error at the configured level and format, with credentials redacted.
/// Each process runs one command, so this runs once.
private func bootstrapLogging(_ level: Logger.Level, format: LogFormat) {
    LoggingSystem.bootstrap { label -> any LogHandler in
        // The level is set before the handler is wrapped: setting it through the wrapper would
        // copy the handler.
        switch format {
        case .text:
            var base = StreamLogHandler.standardError(label: label)
            base.logLevel = level
            return RedactingLogHandler(base: base)
        case .json:
            var base = JSONLogHandler(label: label)
            base.logLevel = level
            return RedactingLogHandler(base: base)
        }
    }
}

/// Writes a line of the command's own output, unbuffered so that scripts reading it see it at once.
func say(_ text: String) {
    FileHandle.standardOutput.write(Data((text + "\n").utf8))
}

/// How a list command prints: tab-separated lines for people and `cut`, or with `--json` one
/// JSON array of objects whose keys are the columns' names, the same on every run, for scripts.
struct ListOutput: ParsableArguments {
    @ArgumentParser.Flag(help: "Print one JSON array of objects with stable keys instead of lines.")
    var json = false

    /// Prints `rows` (each as many values as `columns`) under a header, in aligned columns, or
    /// `empty` when there is none; `more`, when the list goes on, is the command for the next page.
    func say(_ rows: [[String]], columns: [String], empty: String, more: String? = nil) {
        guard json else {
            guard !rows.isEmpty else { return BelfryServer.say(empty) }
            for line in Self.aligned([columns.map { $0.uppercased() }] + rows) { BelfryServer.say(line) }
            if let more { BelfryServer.say("More: \(more)") }
            return
        }
        let objects = rows.map { Dictionary(uniqueKeysWithValues: zip(columns, $0)) }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        BelfryServer.say(String(decoding: (try? encoder.encode(objects)) ?? Data("[]".utf8), as: UTF8.self))
    }

    /// The lines of a table: each column as wide as its widest value, two spaces between, no
    /// trailing space.
    static func aligned(_ table: [[String]]) -> [String] {
        let widths = (0..<(table.map(\.count).max() ?? 0)).map { column in
            table.map { column < $0.count ? $0[column].count : 0 }.max() ?? 0
        }
        return table.map { row in
            row.enumerated().map { column, value in
                column == row.count - 1 ? value : value.padding(toLength: widths[column], withPad: " ", startingAt: 0)
            }.joined(separator: "  ")
        }
    }
}

/// "1 recipient", "2 recipients".
func counted(_ count: Int, _ noun: String, plural: String? = nil) -> String {
    "\(count) \(count == 1 ? noun : plural ?? noun + "s")"
}

/// What `show` commands take: `--json` for one compact line, for scripts.
struct ShowOutput: ParsableArguments {
    @ArgumentParser.Flag(help: "Print the JSON on one line, for scripts, instead of indented for people.")
    var json = false
}

/// Writes a value as the API writes it (`events show`, `users show`): indented for people, or
/// `compact` on one line.
func sayJSON(_ value: some Encodable, compact: Bool = false) throws {
    let encoder = JSONEncoder()
    encoder.outputFormatting =
        compact ? [.sortedKeys, .withoutEscapingSlashes] : [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    encoder.dateEncodingStrategy = .iso8601
    say(String(decoding: try encoder.encode(value), as: UTF8.self))
}

extension UserID {
    /// A command-line user id, checked before anything runs.
    static func check(_ id: String) throws {
        guard isValid(id) else { throw ValidationError("\"\(id)\" is not a valid user id (\(rule))") }
    }
}

/// Builds and configures an application for a command, then runs `body` and shuts down.
/// Only `serve` (`serving`) makes a development API key, and only `serve` and `migrate`
/// (`createsDatabase`) open a SQLite file that is not there yet: another command run in the wrong
/// folder says so instead of starting an empty database.
func withConfiguredApp<T>(
    _ settings: ServerConfiguration,
    arguments: [String],
    migrate: Bool = true,
    runWorkers: Bool = false,
    serving: Bool = false,
    createsDatabase: Bool = false,
    _ body: (CommandScope, StartupReport) async throws -> T
) async throws -> T {
    if !createsDatabase && !serving, case .sqlite(let path) = settings.database,
        !FileManager.default.fileExists(atPath: path)
    {
        FileHandle.standardError.write(
            Data(
                ("belfry: there is no database at \(path): give --database (or DATABASE_URL) the server's, "
                    + "or create one with belfry migrate\n").utf8))
        throw ExitCode(1)
    }
    bootstrapLogging(settings.logLevel, format: settings.logFormat)
    var options = ConfigureOptions(migrate: migrate, runWorkers: runWorkers)
    options.createsDevelopmentKey = serving
    return try await withBelfryApplication(
        Environment(name: "production", arguments: arguments), settings: settings, options: options
    ) { app, report in
        announceDevelopmentKey(report)
        return try await body(CommandScope(app), report)
    }
}

/// What a command works with: the configured application's context, services and database.
/// Built once, here, from what `configure` made.
struct CommandScope {
    let app: Application
    let context: BelfryContext
    let services: BelfryServices

    init(_ app: Application) {
        self.app = app
        self.context = app.belfry
        self.services = app.belfryServices
    }

    var db: any Database { app.db }
}

/// Runs `body` on the configured database; a refusal with one of `failures` is reported as a
/// command failure (exit 1), worded as the API words it.
func withStorage<T>(
    _ storage: StorageOptions, failures: Set<ErrorCode>, _ body: @escaping (CommandScope) async throws -> T
) async throws -> T {
    let settings = try ServerConfiguration.forCommand(.init(database: storage.database, config: storage.config))
    return try await withConfiguredApp(settings, arguments: ["belfry"]) { belfry, _ in
        do {
            return try await body(belfry)
        } catch let error as BelfryError where failures.contains(error.code) {
            throw CommandFailure(error.message)
        }
    }
}

/// Shown on standard error, so that a command's own output (a token, say) stays clean for scripts.
private func announceDevelopmentKey(_ report: StartupReport) {
    guard let key = report.createdDevelopmentKey else { return }
    FileHandle.standardError.write(
        Data(
            """
            Created a development API key. It is shown only this once and stored as a digest:
                \(key)
            Set \(ServerSetting.apiKeys.environment) to use keys of your own instead.

            """.utf8))
}

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "serve", abstract: "Run the Belfry server.")

    @ArgumentParser.Option(
        help: "The address to listen on. Default: $\(ServerSetting.hostname.environment), else 127.0.0.1.")
    var hostname: String?

    @ArgumentParser.Option(
        help: "The port to listen on (0 picks a free one). Default: $\(ServerSetting.port.environment), else 8080.")
    var port: Int?

    @OptionGroup var storage: StorageOptions

    @ArgumentParser.Flag(help: "Do not run pending migrations at start (run `belfry migrate` once instead).")
    var skipMigrations = false

    @ArgumentParser.Flag(
        help:
            "Serve the API and streams only; fan-out and delivery run in other instances on the same PostgreSQL database."
    )
    var noWorkers = false

    func run() async throws {
        let settings = try ServerConfiguration.forCommand(
            .init(hostname: hostname, port: port, database: storage.database, config: storage.config))
        try await withConfiguredApp(
            settings, arguments: ["belfry", "serve"], migrate: !skipMigrations, runWorkers: !noWorkers, serving: true
        ) { belfry, report in
            let app = belfry.app
            let workspace = settings.workspace
            say(
                """
                Belfry
                  config:   \(settings.workspaceSource) (\(workspace.channels.count) channels, \(workspace.categories.count) categories, \(workspace.tenants.count) tenants)
                  database: \(settings.database)
                  API keys: \(report.usesDevelopmentKey ? "the development key stored in the database" : "\(settings.apiKeys.count) configured")
                  workers:  \(noWorkers ? "off (--no-workers)" : "fan-out and delivery")
                  apns:     \(settings.apns.map { "key \($0.keyID), team \($0.teamID), \($0.url.map(origin) ?? "Apple's hosts")" } ?? "off (set \(ServerSetting.apnsKey.environment), \(ServerSetting.apnsKeyID.environment) and \(ServerSetting.apnsTeamID.environment))")
                  fcm:      \(settings.fcm.map { "on (\(origin(of: $0.url)))" } ?? "off (set \(ServerSetting.fcmServiceAccount.environment))")
                  web push: \(settings.vapidSubject.map { "on (VAPID subject \($0))" } ?? "off (set \(ServerSetting.vapidSubject.environment))")
                  apps:     \(settings.apps.isEmpty ? "none in the config file" : settings.apps.map { "\($0.id) (\($0.platform.rawValue))" }.joined(separator: ", "))
                  webhook:  \(settings.webhook.map { "\(origin(of: $0.url)) (signed)" } ?? "off (set \(ServerSetting.webhookURL.environment) and \(ServerSetting.webhookSecret.environment))")
                  email:    \(settings.email.map { "\($0.smtp), from \($0.from), links to \(settings.publicURL ?? "http://\(settings.hostname):\(settings.port)")" } ?? "off (set \(ServerSetting.smtpURL.environment) and \(ServerSetting.emailFrom.environment))")
                """)
            try await app.startup()
            let port = app.http.server.shared.localAddress?.port ?? settings.port
            let workspaceFingerprint = belfry.context.workspaceFingerprint
            let fingerprint = settings.fingerprint(workspace: workspaceFingerprint)
            try await belfry.services.auditLog.record(
                .serverStarted, by: "server", subject: "\(settings.hostname):\(port)",
                detail: "configuration \(fingerprint), workspace \(workspaceFingerprint)"
                    + ", workers \(noWorkers ? "off" : "on")", on: belfry.db)
            say("Belfry listening on http://\(settings.hostname):\(port)")
            try await app.running?.onStop.get()
        }
    }
}

struct MigrateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate", abstract: "Create or update the database tables, then exit.")

    @OptionGroup var storage: StorageOptions

    func run() async throws {
        let settings = try ServerConfiguration.forCommand(.init(database: storage.database, config: storage.config))
        try await withConfiguredApp(settings, arguments: ["belfry"], createsDatabase: true) { _, _ in
            say("The database is up to date: \(settings.database)")
        }
    }
}

struct TokenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token", abstract: "Print a user token for a user, for trying the client API.")

    @ArgumentParser.Option(help: "The user's external id.")
    var user: String

    @ArgumentParser.Option(help: "Lifetime in seconds. Default: the configured token lifetime.")
    var ttl: Int?

    @ArgumentParser.Flag(help: "Create the user if there is none with this id.")
    var create = false

    @OptionGroup var storage: StorageOptions

    func run() async throws {
        let settings = try ServerConfiguration.forCommand(.init(database: storage.database, config: storage.config))
        if let ttl, !(60...settings.tokenLifetime).contains(ttl) {
            throw ValidationError("--ttl must be from 60 to \(settings.tokenLifetime) seconds")
        }
        let token = try await withConfiguredApp(settings, arguments: ["belfry"]) { belfry, _ in
            let context = belfry.context
            var model = try await UserModel.query(on: belfry.db).filter(\.$externalID == user).first()
            if model == nil && create {
                let created = UserModel(externalID: user, now: context.now())
                try await context.database.write(belfry.db) { db in try await created.create(on: db) }
                model = created
            }
            guard let model else {
                throw CommandFailure("no user \"\(user)\"; create it with PUT /v1/users/\(user) or pass --create")
            }
            return try await context.tokens.mint(
                userID: try model.requireID(), externalID: model.externalID, now: context.now(), lifetime: ttl)
        }
        say(token.token)
    }
}

struct ConfigCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "config", abstract: "Work with the configuration.", subcommands: [Check.self, Table.self])

    struct Table: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print every server setting as the Markdown table of docs/configuration.md.")

        func run() {
            say(String(ServerSetting.markdownTable.dropLast()))
        }
    }

    struct Check: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Validate the configuration and report every problem, without starting anything.")

        @OptionGroup var storage: StorageOptions

        func run() async throws {
            let settings = try ServerConfiguration.forCommand(.init(database: storage.database, config: storage.config))
            let workspace = settings.workspace
            say(
                "OK: \(settings.workspaceSource): \(workspace.channels.count) channels, \(workspace.sections.count) sections, "
                    + "\(workspace.categories.count) categories, \(workspace.tenants.count) tenants; "
                    + "database \(settings.database)")
        }
    }
}

/// The scheme, host and port of a URL: its path and query may carry a token, so start-up shows only this.
private func origin(of url: String) -> String {
    guard let components = URLComponents(string: url), let scheme = components.scheme, let host = components.host
    else { return "(not shown)" }
    return "\(scheme)://\(host)\(components.port.map { ":\($0)" } ?? "")/…"
}
