import BelfryCore
import Foundation
import Logging

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
    /// Largest request body accepted.
    public var maxBodySize: Int

    public init(
        hostname: String = "127.0.0.1",
        port: Int = 8080,
        database: DatabaseLocation = .sqlite(path: "belfry.sqlite"),
        workspace: WorkspaceConfig,
        workspaceSource: String = "built-in demo",
        apiKeys: [String] = [],
        tokenSecret: String? = nil,
        tokenLifetime: Int = 3600,
        logLevel: Logger.Level = .info,
        maxBodySize: Int = 256 * 1024
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
        self.maxBodySize = maxBodySize
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
    static let serverKeys: Set<String> = [
        "hostname", "port", "database", "api_keys", "token_secret", "token_ttl_seconds", "log_level",
        "max_body_bytes",
    ]

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
        if let path = flags.config ?? env["BELFRY_CONFIG"] {
            source = path
            do {
                let root = try WorkspaceConfig.parseRoot(try readFile(path))
                let node = ConfigNode(root: root, issues: issues)
                workspace = WorkspaceConfig.read(node, allowing: ["server"]) ?? workspace
                if node["server"].isPresent, node["server"].object(keys: serverKeys) {
                    server = node["server"]
                }
            } catch let error as ConfigError {
                error.issues.forEach { issues.add($0.path, $0.message) }
            } catch {
                issues.add(
                    flags.config != nil ? "--config" : "BELFRY_CONFIG",
                    "cannot read \(path): \(error.localizedDescription)")
            }
        }

        func pick<Value>(
            flag: (name: String, value: Value?)?, env name: String, file key: String,
            parse: (String) -> Result<Value, ConfigurationProblem>, fromFile: (ConfigNode) -> Value?
        ) -> Value? {
            if let flag, let value = flag.value { return value }
            if let text = env[name] {
                switch parse(text) {
                case .success(let value): return value
                case .failure(let problem):
                    issues.add(name, problem.message)
                    return nil
                }
            }
            return fromFile(server[key])
        }

        let hostname =
            pick(
                flag: ("--hostname", flags.hostname), env: "BELFRY_HOSTNAME", file: "hostname",
                parse: { .success($0) }, fromFile: { $0.string() }) ?? "127.0.0.1"
        let port =
            pick(
                flag: ("--port", flags.port), env: "BELFRY_PORT", file: "port",
                parse: { parseInt($0, in: 0...65_535) }, fromFile: { $0.int(in: 0...65_535) }) ?? 8080
        if let flagPort = flags.port, !(0...65_535).contains(flagPort) {
            issues.add("--port", "expected a port from 0 to 65535, got \(flagPort)")
        }
        var database = DatabaseLocation.sqlite(path: "belfry.sqlite")
        if let text = flags.database ?? env["DATABASE_URL"] ?? server["database"].string() {
            switch DatabaseLocation.parse(text) {
            case .success(let location): database = location
            case .failure(let problem):
                let path =
                    flags.database != nil
                    ? "--database" : env["DATABASE_URL"] != nil ? "DATABASE_URL" : "server.database"
                issues.add(path, problem.message)
            }
        }
        let apiKeys =
            pick(
                flag: nil, env: "BELFRY_API_KEY", file: "api_keys",
                parse: { (text: String) -> Result<[String], ConfigurationProblem> in
                    let keys = text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
                    return checkSecrets(keys, what: "each API key")
                },
                fromFile: { (node: ConfigNode) -> [String]? in
                    guard node.isPresent else { return nil }
                    let keys = node.list().compactMap { $0.string(required: true) }
                    if case .failure(let problem) = checkSecrets(keys, what: "each API key") {
                        node.fail(problem.message)
                        return nil
                    }
                    return keys
                }) ?? []
        let tokenSecret = pick(
            flag: nil, env: "BELFRY_TOKEN_SECRET", file: "token_secret",
            parse: { checkSecrets([$0], what: "the token secret").map { $0[0] } },
            fromFile: { node in
                guard let secret = node.string() else { return nil }
                if case .failure(let problem) = checkSecrets([secret], what: "the token secret") {
                    node.fail(problem.message)
                    return nil
                }
                return secret
            })
        let lifetimes = 60...2_592_000
        let tokenLifetime =
            pick(
                flag: nil, env: "BELFRY_TOKEN_TTL", file: "token_ttl_seconds",
                parse: { parseInt($0, in: lifetimes) }, fromFile: { $0.int(in: lifetimes) }) ?? 3600
        let logLevel =
            pick(
                flag: nil, env: "BELFRY_LOG_LEVEL", file: "log_level",
                parse: { text in
                    Logger.Level(rawValue: text.lowercased()).map { .success($0) }
                        ?? .failure(
                            .init(
                                "expected one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", ")), got \"\(text)\""
                            ))
                },
                fromFile: { $0.choice(Logger.Level.self) }) ?? .info
        let bodySizes = 1024...16 * 1024 * 1024
        let maxBodySize =
            pick(
                flag: nil, env: "BELFRY_MAX_BODY_BYTES", file: "max_body_bytes",
                parse: { parseInt($0, in: bodySizes) }, fromFile: { $0.int(in: bodySizes) }) ?? 256 * 1024

        guard issues.issues.isEmpty else { throw ConfigError(issues: issues.issues) }
        return ServerConfiguration(
            hostname: hostname, port: port, database: database, workspace: workspace,
            workspaceSource: source, apiKeys: apiKeys, tokenSecret: tokenSecret,
            tokenLifetime: tokenLifetime, logLevel: logLevel, maxBodySize: maxBodySize)
    }

    private static func parseInt(_ text: String, in range: ClosedRange<Int>) -> Result<Int, ConfigurationProblem> {
        guard let value = Int(text.trimmingCharacters(in: .whitespaces)), range.contains(value) else {
            return .failure(
                .init("expected a whole number from \(range.lowerBound) to \(range.upperBound), got \"\(text)\""))
        }
        return .success(value)
    }

    private static func checkSecrets(_ secrets: [String], what: String) -> Result<[String], ConfigurationProblem> {
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
