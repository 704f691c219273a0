import BelfryCore
import BelfryMail
import BelfryTestServers
import Crypto
import Foundation
import Testing

@testable import BelfryServer

@Suite("Server configuration: flags > environment > file > defaults")
struct ServerConfigurationTests {
    static let workspaceFile = """
        {
          "server": { "port": 9000, "hostname": "0.0.0.0", "database": "/var/lib/belfry/file.sqlite",
                      "api_keys": ["file-key-0123456789abcdef"], "token_ttl_seconds": 600, "log_level": "debug" },
          "channels": [{ "id": "inbox", "kind": "inbox" }],
          "categories": [{ "id": "hello", "name": "Hello", "channels": ["inbox"] }],
          "tenants": [{ "id": "main" }]
        }
        """

    static func resolve(
        flags: ServerConfiguration.Flags = .init(), env: [String: String] = [:], file: String? = nil
    ) throws(ConfigError) -> ServerConfiguration {
        try ServerConfiguration.resolve(flags: flags, environment: env) { path in
            guard let file, path == "belfry.json" else { throw CocoaError(.fileReadNoSuchFile) }
            return Data(file.utf8)
        }
    }

    @Test("with nothing given: the demo workspace on SQLite, loopback port 8080, no keys")
    func defaults() throws {
        let settings = try Self.resolve()
        #expect(settings.hostname == "127.0.0.1")
        #expect(settings.port == 8080)
        #expect(settings.database == .sqlite(path: "belfry.sqlite"))
        #expect(settings.workspaceSource == "built-in demo")
        #expect(settings.workspace == .demo)
        #expect(settings.apiKeys.isEmpty)
        #expect(settings.tokenSecret == nil)
        #expect(settings.tokenLifetime == 3600)
        #expect(settings.logLevel == .info)
    }

    @Test("each default is written once: nothing given reads as the plain configuration's defaults")
    func defaultsWrittenOnce() throws {
        let resolved = try Self.resolve()
        // The public initializer's defaults come from the same settings the reader parses.
        let plain = ServerConfiguration(workspace: .demo)
        // The fingerprint covers every setting.
        #expect(resolved.fingerprint(workspace: "demo") == plain.fingerprint(workspace: "demo"))
        #expect(plain.hostname == "127.0.0.1" && plain.logLevel == .info && plain.logFormat == .text)
    }

    @Test("each value comes from the flag, else the environment, else the file")
    func precedence() throws {
        let fileOnly = try Self.resolve(env: ["BELFRY_CONFIG": "belfry.json"], file: Self.workspaceFile)
        #expect(fileOnly.port == 9000)
        #expect(fileOnly.hostname == "0.0.0.0")
        #expect(fileOnly.database == .sqlite(path: "/var/lib/belfry/file.sqlite"))
        #expect(fileOnly.apiKeys == ["file-key-0123456789abcdef"])
        #expect(fileOnly.tokenLifetime == 600)
        #expect(fileOnly.logLevel == .debug)
        #expect(fileOnly.workspace.categories.map(\.id) == ["hello"])
        #expect(fileOnly.workspace.defaultTenant == "main")
        #expect(fileOnly.workspaceSource == "belfry.json")

        let env = [
            "BELFRY_CONFIG": "belfry.json", "BELFRY_PORT": "9100", "DATABASE_URL": "postgres://u:secret@db:5432/belfry",
            "BELFRY_API_KEY": "env-key-0123456789abcdef, env-key-2-0123456789abcdef", "BELFRY_HOSTNAME": "::1",
        ]
        let fromEnv = try Self.resolve(env: env, file: Self.workspaceFile)
        #expect(fromEnv.port == 9100)
        #expect(fromEnv.hostname == "::1")
        #expect(fromEnv.database == .postgres(url: "postgres://u:secret@db:5432/belfry"))
        #expect(fromEnv.database.description == "PostgreSQL at postgres://u:redacted@db:5432/belfry")
        #expect(fromEnv.apiKeys == ["env-key-0123456789abcdef", "env-key-2-0123456789abcdef"])

        let fromFlags = try Self.resolve(
            flags: .init(
                hostname: "127.0.0.2", port: 9200, database: "sqlite:///tmp/flag.sqlite", config: "belfry.json"),
            env: env.merging(["BELFRY_CONFIG": "elsewhere.json"]) { _, new in new }, file: Self.workspaceFile)
        #expect(fromFlags.port == 9200)
        #expect(fromFlags.hostname == "127.0.0.2")
        #expect(fromFlags.database == .sqlite(path: "/tmp/flag.sqlite"))
        #expect(fromFlags.workspaceSource == "belfry.json")
    }

    @Test("docs/configuration.md's table is the one list of settings, printed")
    func guideTable() throws {
        let guide = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/configuration.md")
        let text = try String(contentsOf: guide, encoding: .utf8)
        let table = try #require(
            text.firstMatch(of: /<!-- settings:begin -->\n(?<table>[\s\S]*?)<!-- settings:end -->/)?.table)
        #expect(
            String(table) == ServerSetting.markdownTable,
            "docs/configuration.md is out of date: put the output of `belfry config table` between its markers")
        let variables = ServerSetting.all.map(\.environment)
        #expect(Set(variables).count == variables.count, "each variable names one setting")
    }

    @Test("every setting's key is accepted in the file's server object")
    func fileKeys() throws {
        let values = ServerSetting.all.compactMap(\.file).map { "\"\($0)\": \"?\"" }.joined(separator: ", ")
        let file =
            #"{"server": {"# + values
            + #", "colour": "red"}, "channels": [{"id": "inbox", "kind": "inbox"}], "categories": [{"id": "a", "name": "A", "channels": ["inbox"]}], "tenants": [{"id": "t"}]}"#
        let error = try #require(throws: ConfigError.self) {
            try Self.resolve(env: ["BELFRY_CONFIG": "belfry.json"], file: file)
        }
        #expect(error.issues.map(\.path).contains("server.colour"), "\(error)")
        #expect(!error.issues.contains { $0.message.contains("unknown") && $0.path != "server.colour" }, "\(error)")
        let token = try Self.resolve(
            env: ["BELFRY_CONFIG": "belfry.json"],
            file:
                #"{"server": {"metrics_token": "scrape-0123456789abcdef"}, "channels": [{"id": "inbox", "kind": "inbox"}], "categories": [{"id": "a", "name": "A", "channels": ["inbox"]}], "tenants": [{"id": "t"}]}"#
        )
        #expect(token.metricsToken == "scrape-0123456789abcdef")
    }

    @Test("every bad value is reported at once, with where it came from")
    func everyProblem() throws {
        let file = """
            {
              "server": { "port": 70000, "api_keys": ["short"], "colour": "blue" },
              "channels": [{ "id": "inbox", "kind": "pigeon" }],
              "categories": [],
              "tenants": [{ "id": "main" }]
            }
            """
        let env = [
            "BELFRY_CONFIG": "belfry.json", "DATABASE_URL": "mysql://db/belfry", "BELFRY_TOKEN_TTL": "forever",
            "BELFRY_LOG_LEVEL": "loud", "BELFRY_TOKEN_SECRET": "tiny", "BELFRY_LOG_FORMAT": "xml",
            "BELFRY_METRICS_TOKEN": "short",
        ]
        let error = try #require(throws: ConfigError.self) { try Self.resolve(env: env, file: file) }
        let paths = error.issues.map(\.path)
        #expect(
            Set(paths) == [
                "server.colour", "server.port", "server.api_keys", "channels[0].kind", "categories", "DATABASE_URL",
                "BELFRY_TOKEN_TTL", "BELFRY_LOG_LEVEL", "BELFRY_TOKEN_SECRET", "BELFRY_LOG_FORMAT",
                "BELFRY_METRICS_TOKEN",
            ], "\(error)")
        #expect(paths.count == 11, "\(error)")
        #expect(
            error.issues.first { $0.path == "DATABASE_URL" }?.message.contains("unsupported database \"mysql://\"")
                == true)
        #expect(error.issues.first { $0.path == "BELFRY_LOG_LEVEL" }?.message.contains(#"got "loud""#) == true)
        #expect(error.issues.first { $0.path == "BELFRY_LOG_FORMAT" }?.message == #"expected text or json, got "xml""#)
        #expect(
            error.issues.first { $0.path == "BELFRY_METRICS_TOKEN" }?.message
                == "the metrics token must be at least 16 characters long")
    }

    @Test("a bad file value is reported even when the environment overrides it")
    func overriddenFileValues() throws {
        let file =
            #"{"server": {"port": "eighty"}, "channels": [{"id": "inbox", "kind": "inbox"}], "categories": [{"id": "a", "name": "A", "channels": ["inbox"]}], "tenants": [{"id": "t"}]}"#
        let error = try #require(throws: ConfigError.self) {
            try Self.resolve(env: ["BELFRY_CONFIG": "belfry.json", "BELFRY_PORT": "9000"], file: file)
        }
        #expect(error.issues.map(\.path) == ["server.port"])
    }

    @Test("a config file that cannot be read is a clear problem")
    func unreadableFile() throws {
        let error = try #require(throws: ConfigError.self) {
            try Self.resolve(flags: .init(config: "missing.json"))
        }
        #expect(error.issues.count == 1)
        #expect(error.issues[0].path == "--config")
        #expect(error.issues[0].message.hasPrefix("cannot read missing.json"))
        let bad = try #require(throws: ConfigError.self) {
            try Self.resolve(flags: .init(port: -1, database: "postgres://ada:pass word@/nowhere"))
        }
        #expect(bad.issues.map(\.path) == ["--port", "--database"])
        #expect(!bad.description.contains("pass word"), "the password is never shown: \(bad)")
    }

    @Test("the shipped demo workspace has what the seeds describe")
    func demo() throws {
        let demo = WorkspaceConfig.demo
        #expect(demo.channels.map(\.id) == ["inbox", "ios_push", "android_push", "web_push", "webhook", "email"])
        #expect(demo.tenants.map(\.id) == ["enwiki", "dewiki", "wikidata", "commons"])
        #expect(demo.defaultTenant == "enwiki")
        let seedTypes = [
            "edit-user-talk", "mention", "reverted", "edit-thank", "article-linked", "thank-you-edit", "emailuser",
            "user-rights", "login-success", "login-fail",
        ]
        for id in seedTypes {
            let category = try #require(demo.category(id), "\(id)")
            #expect(!category.name.isEmpty && (category.description ?? "").count > 10, "\(id)")
        }
        #expect(demo.category("login-fail")?.isEditable == false)
        #expect(demo.categories.filter { !$0.isEditable }.map(\.id) == ["login-fail"])
        #expect(demo.sections.compactMap(\.name) == ["Talk and mentions", "Your edits", "Account"])
    }

    @Test("APNs settings come together, and the key and extra certificates are read and checked at start")
    func apnsSettings() throws {
        let key = P256.Signing.PrivateKey().pemRepresentation
        let authority = try TestCertificateAuthority()
        let files = ["key.p8": key, "bad.p8": "not a key", "ca.pem": authority.certificatePEM, "empty.pem": ""]
        func resolve(_ env: [String: String]) throws(ConfigError) -> ServerConfiguration {
            try ServerConfiguration.resolve(flags: .init(), environment: env) { path in
                guard let text = files[path] else { throw CocoaError(.fileReadNoSuchFile) }
                return Data(text.utf8)
            }
        }
        let good = try resolve([
            "BELFRY_APNS_KEY_PATH": "key.p8", "BELFRY_APNS_KEY_ID": "ABCDE12345", "BELFRY_APNS_TEAM_ID": "TEAM123456",
            "BELFRY_APNS_TOPIC": "org.example.reader", "BELFRY_APNS_URL": "https://127.0.0.1:8443/",
            "BELFRY_EXTRA_CA_FILE": "ca.pem",
        ])
        #expect(
            good.apns
                == .init(
                    keyPEM: key, keyID: "ABCDE12345", teamID: "TEAM123456", topic: "org.example.reader",
                    url: "https://127.0.0.1:8443"))
        #expect(good.extraCertificatesPEM == authority.certificatePEM)
        #expect(try resolve([:]).apns == nil)

        let error = try #require(throws: ConfigError.self) {
            try resolve([
                "BELFRY_APNS_KEY_PATH": "bad.p8", "BELFRY_APNS_KEY_ID": "short", "BELFRY_APNS_URL": "http://apns",
                "BELFRY_EXTRA_CA_FILE": "empty.pem",
            ])
        }
        let text = "\(error)"
        #expect(text.contains("BELFRY_APNS_KEY_PATH") && text.contains("bad.p8"))
        #expect(text.contains("BELFRY_APNS_KEY_ID") && text.contains("10 letters and digits"))
        #expect(text.contains("BELFRY_APNS_URL") && text.contains("expected an https URL without a query"))
        #expect(text.contains("BELFRY_EXTRA_CA_FILE"))
        let partial = try #require(throws: ConfigError.self) {
            try resolve(["BELFRY_APNS_KEY_PATH": "key.p8", "BELFRY_APNS_KEY_ID": "ABCDE12345"])
        }
        #expect("\(partial)".contains("BELFRY_APNS_TEAM_ID"))
    }

    @Test(
        "Web Push settings: the VAPID subject is a mailto: or https: contact, the key a P-256 PEM, the loopback switch a boolean"
    )
    func webPushSettings() throws {
        let key = P256.Signing.PrivateKey().pemRepresentation
        let file = """
            { "server": { "vapid_subject": "mailto:ops@example.org", "webpush_allow_http_loopback": true },
              "channels": [{ "id": "inbox", "kind": "inbox" }],
              "categories": [{ "id": "hello", "name": "Hello", "channels": ["inbox"] }],
              "tenants": [{ "id": "main" }] }
            """
        let files = [
            "belfry.json": file, "vapid.pem": key,
            "bad.pem": "-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----",
        ]
        func resolve(_ env: [String: String]) throws(ConfigError) -> ServerConfiguration {
            try ServerConfiguration.resolve(flags: .init(), environment: env) { path in
                guard let text = files[path] else { throw CocoaError(.fileReadNoSuchFile) }
                return Data(text.utf8)
            }
        }
        let fromFile = try resolve(["BELFRY_CONFIG": "belfry.json", "BELFRY_VAPID_PRIVATE_KEY_PATH": "vapid.pem"])
        #expect(fromFile.vapidSubject == "mailto:ops@example.org")
        #expect(fromFile.webPushAllowsLoopback)
        #expect(fromFile.vapidKeyPEM == key)
        let off = try resolve([:])
        #expect(off.vapidSubject == nil && !off.webPushAllowsLoopback && off.vapidKeyPEM == nil)

        let error = try #require(throws: ConfigError.self) {
            try resolve([
                "BELFRY_VAPID_SUBJECT": "ops@example.org", "BELFRY_VAPID_PRIVATE_KEY_PATH": "bad.pem",
                "BELFRY_WEBPUSH_ALLOW_HTTP_LOOPBACK": "sometimes",
            ])
        }
        let text = "\(error)"
        #expect(text.contains("BELFRY_VAPID_SUBJECT") && text.contains("mailto:"))
        #expect(text.contains("BELFRY_VAPID_PRIVATE_KEY_PATH") && text.contains("bad.pem"))
        #expect(text.contains("BELFRY_WEBPUSH_ALLOW_HTTP_LOOPBACK") && text.contains("true or false"))
    }

    @Test(
        "email settings: SMTP URLs with STARTTLS, smtps or loopback without TLS; a sender; links need a public address")
    func emailSettings() throws {
        let relay = try Self.resolve(env: [
            "BELFRY_SMTP_URL": "smtp://apikey:p%40ss%3Aword@smtp.example.org",
            "BELFRY_EMAIL_FROM": "Belfry <n@example.org>",
        ])
        #expect(
            relay.email?.smtp
                == SMTPLocation(
                    host: "smtp.example.org", port: 587, security: .startTLS,
                    credentials: SMTPCredentials(user: "apikey", password: "p@ss:word")))
        #expect(relay.email?.smtp.description == "smtp://apikey@smtp.example.org:587", "no password shown")
        #expect(relay.publicURL == nil, "on loopback the links may use the listening address")
        let implicit = try Self.resolve(env: [
            "BELFRY_SMTP_URL": "smtps://u:p@mail.example.org", "BELFRY_EMAIL_FROM": "n@example.org",
            "BELFRY_HOSTNAME": "0.0.0.0", "BELFRY_PUBLIC_URL": "https://notify.example.org/",
        ])
        #expect(implicit.email?.smtp.security == .implicitTLS)
        #expect(implicit.email?.smtp.port == 465)
        #expect(implicit.publicURL == "https://notify.example.org")
        let local = try Self.resolve(env: [
            "BELFRY_SMTP_URL": "smtp://127.0.0.1:1025?tls=none", "BELFRY_EMAIL_FROM": "n@example.org",
        ])
        #expect(local.email?.smtp == SMTPLocation(host: "127.0.0.1", port: 1025, security: .none))
        #expect(try Self.resolve().email == nil)

        let cases: [([String: String], String, String)] = [
            (
                ["BELFRY_SMTP_URL": "smtp://mail.example.org?tls=none", "BELFRY_EMAIL_FROM": "n@example.org"],
                "BELFRY_SMTP_URL", "only for a relay on loopback"
            ),
            (
                ["BELFRY_SMTP_URL": "http://mail.example.org", "BELFRY_EMAIL_FROM": "n@example.org"],
                "BELFRY_SMTP_URL", "smtp://user:password@host:port"
            ),
            (
                ["BELFRY_SMTP_URL": "smtp://user@mail.example.org", "BELFRY_EMAIL_FROM": "n@example.org"],
                "BELFRY_SMTP_URL", "both a user name and a password"
            ),
            (["BELFRY_SMTP_URL": "smtp://mail.example.org"], "BELFRY_EMAIL_FROM", "needs a sender"),
            (["BELFRY_EMAIL_FROM": "n@example.org"], "BELFRY_SMTP_URL", "no SMTP server"),
            (
                ["BELFRY_SMTP_URL": "smtp://mail.example.org", "BELFRY_EMAIL_FROM": "Belfry <not an address>"],
                "BELFRY_EMAIL_FROM", "expected a sender"
            ),
            (
                [
                    "BELFRY_SMTP_URL": "smtp://mail.example.org", "BELFRY_EMAIL_FROM": "n@example.org",
                    "BELFRY_HOSTNAME": "0.0.0.0",
                ],
                "BELFRY_PUBLIC_URL", "the address users reach Belfry at"
            ),
            (["BELFRY_PUBLIC_URL": "notify.example.org"], "BELFRY_PUBLIC_URL", "expected the http or https address"),
        ]
        for (env, path, message) in cases {
            let error = try #require(throws: ConfigError.self, "\(env)") { try Self.resolve(env: env) }
            #expect(error.issues.map(\.path) == [path], "\(error)")
            #expect(error.issues.first?.message.contains(message) == true, "\(error)")
            #expect(!error.description.contains("p%40ss"))
        }
    }

    @Test("a category's content templates are checked with their paths: syntax, plurals, tags, data_schema")
    func contentTemplates() throws {
        let file = """
            {
              "channels": [{ "id": "inbox", "kind": "inbox" }],
              "categories": [
                { "id": "review", "name": "Review", "channels": ["inbox"],
                  "data_schema": { "properties": { "page": { "type": "string" }, "n": { "type": "integer" } } },
                  "content": { "title": "{{page}} by {{reviewer}}", "body": "{{#plural n}}one=x{{/plural}}",
                               "push": { "title": "{{#open}}" },
                               "locales": { "de_DE!": { "title": "x" }, "de": { "body": "{{n}} {{tenant.name}}" } } },
                  "batch": { "window_seconds": 60, "locales": { "ru": { "title": "{{#plural count}}few=x{{/plural}}" } } } },
                { "id": "bare", "name": "Bare", "channels": ["inbox"], "content": { "body": "no title" } }
              ],
              "tenants": [{ "id": "main" }]
            }
            """
        let error = try #require(throws: ConfigError.self) {
            try Self.resolve(env: ["BELFRY_CONFIG": "belfry.json"], file: file)
        }
        #expect(
            Set(error.issues.map(\.path)) == [
                "categories[0].content.locales.de_DE!", "categories[0].content.title", "categories[0].content.body",
                "categories[0].content.push.title", "categories[0].batch.locales.ru.title",
                "categories[1].content.title",
            ], "\(error)")
        let reviewer = try #require(error.issues.first { $0.path == "categories[0].content.title" })
        #expect(reviewer.message.contains("reads \"reviewer\", which the category's data_schema does not declare"))
    }

    @Test("a category's email templates are checked: Mustache syntax, language tags, known keys")
    func emailTemplates() throws {
        let file = """
            {
              "channels": [{ "id": "inbox", "kind": "inbox" }, { "id": "email", "kind": "email" }],
              "categories": [
                { "id": "ok", "name": "OK", "channels": ["inbox", "email"],
                  "email": { "subject": "Re: {{title}}", "locales": { "de": { "subject": "Antwort: {{title}}" } } } },
                { "id": "bad", "name": "Bad", "channels": ["email"],
                  "email": { "subject": "{{#open}} never closed", "html": "<p>{{body}</p>", "colour": "red",
                             "locales": { "not a tag": {}, "pt-BR": { "text": "{{/close}}" } } } }
              ],
              "tenants": [{ "id": "main" }]
            }
            """
        let error = try #require(throws: ConfigError.self) {
            try Self.resolve(env: ["BELFRY_CONFIG": "belfry.json"], file: file)
        }
        #expect(
            Set(error.issues.map(\.path)) == [
                "categories[1].email.colour", "categories[1].email.locales.not a tag",
                "categories[1].email.subject", "categories[1].email.html", "categories[1].email.locales.pt-BR.text",
            ], "\(error)")
        let fixed = """
            {
              "channels": [{ "id": "inbox", "kind": "inbox" }, { "id": "email", "kind": "email" }],
              "categories": [
                { "id": "ok", "name": "OK", "channels": ["inbox", "email"],
                  "email": { "subject": "Re: {{title}}", "locales": { "de": { "subject": "Antwort: {{title}}" } } } }
              ],
              "tenants": [{ "id": "main" }]
            }
            """
        let settings = try Self.resolve(env: ["BELFRY_CONFIG": "belfry.json"], file: fixed)
        let email = try #require(settings.workspace.category("ok")?.email)
        #expect(email.variant(for: "de-CH").subject == "Antwort: {{title}}")
        #expect(email.variant(for: "DE_at").subject == "Antwort: {{title}}")
        #expect(email.variant(for: "fr").subject == "Re: {{title}}")
        #expect(email.variant(for: nil).subject == "Re: {{title}}")
    }
}
