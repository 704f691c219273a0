import BelfryCore
import BelfryTestSupport
import Crypto
import Foundation
import Testing

@testable import BelfryServer

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The `belfry` executable, run as an operator would.
@Suite("The belfry command line", .serialized)
struct CommandLineTests {
    /// `belfry` is built next to the test bundle.
    static let executable = BelfryServeProcess.executable

    /// A list's rows as the command prints them: a header line, then columns two spaces or
    /// more apart.
    static func table(_ output: String) -> [[String]] {
        output.split(separator: "\n").dropFirst().filter { !$0.hasPrefix("More: ") }.map { line in
            line.split(separator: #/ {2,}/#).map(String.init)
        }
    }

    static func temporaryDirectory() throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("belfry-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    static func request(
        _ method: String, _ url: String, bearer: String? = nil, json: String? = nil
    ) async throws -> (status: Int, body: String) {
        var request = URLRequest(url: try #require(URL(string: url)))
        request.httpMethod = method
        if let bearer { request.setValue("Bearer \(bearer)", forHTTPHeaderField: "Authorization") }
        if let json {
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            request.httpBody = Data(json.utf8)
        }
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
    }

    @Test("config check reports every problem of a bad file and exits non-zero")
    func configCheck() throws {
        let directory = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("bad.json")
        try Data(
            #"{"channels": [{"id": "inbox"}], "categories": [{"id": "x", "channels": ["fax"]}], "tenants": []}"#.utf8
        )
        .write(to: file)
        let failure = try #require(throws: TestProcess.Failure.self) {
            try TestProcess.run(Self.executable, ["config", "check", "--config", file.path])
        }
        #expect(failure.status == 1)
        for expected in [
            "configuration has 4 problems", "channels[0].kind: is required", "categories[0].name: is required",
            #"categories[0].channels[0]: "fax" is not one of the workspace channels"#,
            "tenants: must list at least one tenant",
        ] {
            #expect(failure.output.contains(expected), "\(failure.output)")
        }
        let good = try TestProcess.run(Self.executable, ["config", "check"])
        #expect(good.hasPrefix("OK: built-in demo: 6 channels, 3 sections, 11 categories, 4 tenants"))
    }

    @Test("config check reads every key file and reports each bad one with its path")
    func configCheckKeyFiles() throws {
        let directory = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = { (name: String) in directory.appendingPathComponent(name).path }
        try Data("{\"type\": \"service_account\",".utf8).write(to: URL(fileURLWithPath: path("account.json")))
        try Data(P384.Signing.PrivateKey().pemRepresentation.utf8).write(to: URL(fileURLWithPath: path("apns.p8")))
        var config = try #require(
            try JSONSerialization.jsonObject(
                with: Data(
                    contentsOf: PackagePaths.root.appendingPathComponent(
                        "Sources/BelfryServer/Resources/demo-workspace.json"))) as? [String: Any])
        config["server"] = [
            "fcm_service_account_path": path("account.json"), "apns_key_path": path("apns.p8"),
            "apns_key_id": "ABCDE12345", "apns_team_id": "TEAM123456",
            "vapid_private_key_path": path("missing.pem"),
        ]
        let file = directory.appendingPathComponent("config.json")
        try JSONSerialization.data(withJSONObject: config).write(to: file)
        let failure = try #require(throws: TestProcess.Failure.self) {
            try TestProcess.run(Self.executable, ["config", "check", "--config", file.path])
        }
        #expect(failure.status == 1)
        for expected in [
            "configuration has 3 problems",
            "server.fcm_service_account_path: \(path("account.json")): not a service account key file",
            "server.apns_key_path: expected an APNs token signing key (.p8, PEM), but \(path("apns.p8"))",
            "server.vapid_private_key_path: expected a P-256 private key (PEM), but \(path("missing.pem")) cannot be read",
        ] {
            #expect(failure.output.contains(expected), "\(failure.output)")
        }
    }

    @Test("serve starts on the demo config, prints a development key once, and token mints a working user token")
    func serveAndToken() async throws {
        let directory = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let database = directory.appendingPathComponent("belfry.sqlite").path
        let environment = ["BELFRY_API_KEY": "", "DATABASE_URL": "", "BELFRY_CONFIG": ""]

        let started = try await BelfryServeProcess.start(database: database, environment: environment)
        let (server, base, output) = (started.process, started.base, started.startup)
        let key = try #require(output.firstMatch(of: /belfry_[A-Za-z0-9_-]{43}/)).output
        #expect(output.contains("config:   built-in demo (6 channels, 11 categories, 4 tenants)"))
        #expect(output.contains("database: SQLite at \(database)"))

        let health = try await Self.request("GET", "\(base)/healthz")
        #expect(health.status == 200)
        let created = try await Self.request(
            "PUT", "\(base)/v1/users/ada", bearer: String(key), json: #"{"tenants": ["dewiki"]}"#)
        #expect(created.status == 201)
        let token = try TestProcess.run(Self.executable, ["token", "--user", "ada", "--database", database])
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let preferences = try await Self.request("GET", "\(base)/v1/me/preferences?tenant=dewiki", bearer: token)
        #expect(preferences.status == 200)
        #expect(preferences.body.hasPrefix(#"{"channel_preferences":[{"channel":"inbox","is_restricted":false}"#))
        #expect(server.terminate() == 0, "SIGTERM shuts down cleanly")

        let restarted = try await BelfryServeProcess.start(database: database, environment: environment)
        let again = restarted.startup
        restarted.process.terminate()
        #expect(!again.contains("belfry_"), "the development key is shown only once")
        #expect(again.contains("API keys: the development key stored in the database"))

        let missing = try #require(throws: TestProcess.Failure.self) {
            try TestProcess.run(Self.executable, ["token", "--user", "bob", "--database", database])
        }
        #expect(missing.output.contains(#"no user "bob""#))
    }

    @Test("a command other than serve and migrate refuses a database that is not there, and makes no key")
    func missingDatabase() throws {
        let directory = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("belfry.sqlite").path
        for command in [["users"], ["topics"], ["events"], ["keys"], ["audit"], ["token", "--user", "ada"]] {
            let failure = try #require(throws: TestProcess.Failure.self) {
                try TestProcess.run(Self.executable, command + ["--database", path])
            }
            #expect(failure.status == 1, "\(command)")
            #expect(failure.output.contains("there is no database at \(path)"), "\(command)")
            #expect(!FileManager.default.fileExists(atPath: path), "\(command) made no database")
        }
        // migrate makes the database, and no credential.
        let migrated = try TestProcess.run(Self.executable, ["migrate", "--database", path])
        #expect(migrated.contains("up to date"))
        #expect(try TestProcess.run(Self.executable, ["users", "--database", path]) == "no users\n")
        let listed = try TestProcess.run(Self.executable, ["keys", "--database", path])
        #expect(listed.hasPrefix("no keys"))
    }

    @Test("usage errors exit 64 with the usage; a failure exits 1 with one line; --version and bare belfry")
    func exitStatuses() throws {
        let directory = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let database = ["--database", directory.appendingPathComponent("belfry.sqlite").path]
        _ = try TestProcess.run(Self.executable, ["migrate"] + database)
        let missing = try #require(throws: TestProcess.Failure.self) {
            try TestProcess.run(Self.executable, ["users", "show", "nobody"] + database)
        }
        #expect(missing.status == 1)
        #expect(missing.output.contains(#"no user "nobody""#))
        #expect(!missing.output.contains("USAGE"), "a failure is not a usage error")
        let event = try #require(throws: TestProcess.Failure.self) {
            try TestProcess.run(Self.executable, ["events", "retry", UUID().uuidString] + database)
        }
        #expect(event.status == 1 && event.output.contains("no event"))
        let usage = try #require(throws: TestProcess.Failure.self) {
            try TestProcess.run(Self.executable, ["users", "list", "--limit", "0"] + database)
        }
        #expect(usage.status == 64 && usage.output.contains("--limit must be from 1 to 10000"))
        let noBase = try #require(throws: TestProcess.Failure.self) {
            try TestProcess.run(Self.executable, ["link", "--user", "ada"] + database)
        }
        #expect(noBase.status == 64 && noBase.output.contains("set BELFRY_PUBLIC_URL or pass --base-url"))
        let bare = try #require(throws: TestProcess.Failure.self) { try TestProcess.run(Self.executable, []) }
        #expect(bare.status == 64 && bare.output.contains("SUBCOMMANDS"))
        #expect(try TestProcess.run(Self.executable, ["--version"]) == belfryVersion + "\n")
    }

    @Test("messages lists the message log with filters and a next page, and shows one with its attempts")
    func messages() async throws {
        let directory = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("belfry.sqlite").path
        try await withBelfryApp(location: .sqlite(path: path)) { app, _ in
            _ = try await DeliveryQueueTests.trigger(app, to: ["ada", "bob"])
            _ = try await app.deliveryQueue?.runOnce()
        }
        let run = { (arguments: [String]) in try TestProcess.run(Self.executable, arguments + ["--database", path]) }
        let all = Self.table(try run(["messages"]))
        #expect(all.count >= 2)
        #expect(all.allSatisfy { $0.count == 8 })
        let ada = Self.table(try run(["messages", "list", "--user", "ada", "--channel", "webhook", "--limit", "1"]))
        #expect(ada.count == 1 && ada[0][2] == "ada" && ada[0][3] == "webhook" && ada[0][4] == "failed")
        let page = try run(["messages", "list", "--channel", "webhook", "--limit", "1"])
        let more = try #require(page.split(separator: "\n").last { $0.hasPrefix("More: ") })
        #expect(more.contains("belfry messages list --channel webhook --limit 1 --after "))
        let shown = try JSONDecoder.iso8601.decode(
            MessageRecord.self, from: Data(try run(["messages", "show", ada[0][0], "--json"]).utf8))
        #expect(shown.user == "ada" && shown.attempts.count == 1)
        #expect(shown.attempts.first?.error == "no provider for webhook channels is configured")
        let unknown = try #require(throws: TestProcess.Failure.self) { try run(["messages", "--user", "nobody"]) }
        #expect(unknown.status == 1 && unknown.output.contains(#"no user "nobody""#))
    }

    @Test("deliveries lists the failed and dead and retries them by id or by channel")
    func deliveries() async throws {
        let directory = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("belfry.sqlite").path
        // No webhook provider: the webhook deliveries of two users fail for good.
        try await withBelfryApp(location: .sqlite(path: path)) { app, _ in
            _ = try await DeliveryQueueTests.trigger(app, to: ["ada", "bob"])
            _ = try await app.deliveryQueue?.runOnce()
        }
        let run = { (arguments: [String]) in try TestProcess.run(Self.executable, arguments + ["--database", path]) }
        let rows = Self.table(try run(["deliveries", "list", "--channel", "webhook", "--since", "1h"]))
        #expect(rows.count == 2)
        #expect(
            rows.allSatisfy {
                $0[2] == "failed" && $0[3] == "webhook" && $0.last == "no provider for webhook channels is configured"
            })
        #expect(Set(rows.map { $0[4] }) == ["ada", "bob"])
        #expect(try run(["deliveries", "list", "--status", "dead"]) == "no failed or dead deliveries\n")
        // The same for scripts: one JSON array, keyed by the columns' names.
        let json = try run(["deliveries", "list", "--channel", "webhook", "--json"])
        let objects = try JSONDecoder().decode([[String: String]].self, from: Data(json.utf8))
        #expect(objects.count == 2)
        #expect(
            Set(objects[0].keys) == ["id", "ended_at", "status", "channel", "user", "event", "attempts", "why"])
        #expect(Set(objects.map { $0["user"] ?? "" }) == ["ada", "bob"])
        #expect(try run(["deliveries", "list", "--status", "dead", "--json"]) == "[]\n")
        #expect(try run(["users", "--json"]).hasPrefix(#"[{"created_at":"#))
        #expect(try run(["deliveries", "retry", rows[0][0]]) == "1 delivery queued again\n")
        let unknown = try #require(throws: TestProcess.Failure.self) { try run(["deliveries", "retry", rows[0][0]]) }
        #expect(unknown.status == 1 && unknown.output.contains("no failed or dead delivery \(rows[0][0])"))
        #expect(try run(["deliveries", "retry", "--channel", "webhook"]) == "1 delivery queued again\n")
        let both = try #require(throws: TestProcess.Failure.self) { try run(["deliveries", "retry"]) }
        #expect(both.status == 64)
        #expect(
            Self.table(try run(["audit"])).contains {
                $0.suffix(4) == ["cli", "deliveries.retried", "channel:webhook", "1 queued"]
            })
    }

    @Test("topics lists topics with their subscribers, and adds and removes them")
    func topics() throws {
        let directory = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let database = ["--database", directory.appendingPathComponent("belfry.sqlite").path]
        _ = try TestProcess.run(Self.executable, ["migrate"] + database)
        #expect(try TestProcess.run(Self.executable, ["topics"] + database).contains("no topics yet"))
        let unknown = try #require(throws: TestProcess.Failure.self) {
            try TestProcess.run(Self.executable, ["topics", "add", "page:Bell_tower", "ada", "bob"] + database)
        }
        #expect(unknown.status == 1 && unknown.output.contains(#"no user "ada", "bob""#))
        #expect(unknown.output.contains("--create-users"))
        let added = try TestProcess.run(
            Self.executable, ["topics", "add", "page:Bell_tower", "ada", "bob", "--create-users"] + database)
        #expect(added.contains("page:Bell_tower: 2 subscribed, 0 already were"))
        _ = try TestProcess.run(Self.executable, ["topics", "add", "project-42", "ada"] + database)
        #expect(
            try TestProcess.run(Self.executable, ["topics"] + database)
                == "TOPIC            SUBSCRIBERS\npage:Bell_tower  2\nproject-42       1\n")
        let removed = try TestProcess.run(Self.executable, ["topics", "remove", "page:Bell_tower", "bob"] + database)
        #expect(removed.contains("1 unsubscribed"))
        #expect(
            Self.table(try TestProcess.run(Self.executable, ["topics", "list", "page:Bell_tower"] + database))
                == [["page:Bell_tower", "1"]])
        let bad = try #require(throws: TestProcess.Failure.self) {
            try TestProcess.run(Self.executable, ["topics", "add", "bad topic", "ada"] + database)
        }
        #expect(bad.output.contains("the topic must be"))
    }

    @Test("send reads recipients from files and arguments, batches them, and refuses bad ids before sending anything")
    func send() async throws {
        let directory = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let database = directory.appendingPathComponent("belfry.sqlite").path
        let file = directory.appendingPathComponent("readers.csv")
        let rows = (0..<10_050).map { "reader-\($0),Reader \($0)" }
        try Data((["user_id,name", "# imported", ""] + rows + ["reader-7,again"]).joined(separator: "\n").utf8)
            .write(to: file)
        let arguments = [
            "send", "--database", database, "--category", "mention", "--tenant", "dewiki", "--title", "Hello",
            "--body", "World", "--to", file.path, "--to", "ada", "--idempotency-key", "launch",
        ]
        let uuid = /[0-9A-F]{8}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{12}/
        _ = try TestProcess.run(Self.executable, ["migrate", "--database", database])
        let output = try TestProcess.run(Self.executable, arguments)
        #expect(output.hasPrefix("Accepted 2 events for 10051 recipients:"), "\(output)")
        let ids = output.matches(of: uuid).map { String($0.output) }
        #expect(ids.count == 2)
        let again = try TestProcess.run(Self.executable, arguments)
        #expect(again.matches(of: uuid).map { String($0.output) } == ids, "the same idempotency key sends nothing new")
        #expect(again.hasPrefix(#"Nothing new was sent: the idempotency key "launch" was used already, for 2 events:"#))

        try await withBelfryApp(location: .sqlite(path: database)) { app, _ in
            let first = try await app.send(.GET, "/v1/events/\(ids[0])", bearer: testAPIKey).decode(EventStatus.self)
            let second = try await app.send(.GET, "/v1/events/\(ids[1])", bearer: testAPIKey).decode(EventStatus.self)
            #expect(first.recipients == 10_000)
            #expect(second.recipients == 51)
            #expect(first.tenant == "dewiki")
        }

        try Data("ada\nnot valid!\nbob\n".utf8).write(to: file)
        let base = ["send", "--database", database, "--title", "t", "--body", "b"]
        let failure = try #require(throws: TestProcess.Failure.self) {
            try TestProcess.run(Self.executable, base + ["--category", "mention", "--to", file.path])
        }
        #expect(failure.output.contains(#"line 2: "not valid!" is not a valid user id"#), "\(failure.output)")
        let unknown = try #require(throws: TestProcess.Failure.self) {
            try TestProcess.run(Self.executable, base + ["--category", "nope", "--to", "ada"])
        }
        #expect(unknown.output.contains(#"no category "nope" in this workspace"#), "\(unknown.output)")
    }

    @Test(
        "an accepted event survives SIGKILL right after its 202, mid fan-out: one notification per recipient",
        arguments: TestDatabase.allCases)
    func acceptedMeansDurable(database: TestDatabase) async throws {
        try await withTestStorage(database) { location in
            let target: String
            switch location {
            case .sqlite(let path): target = path
            case .postgres(let url): target = url
            }
            let key = "cli-test-key-0123456789abcdef"
            let environment = ["BELFRY_API_KEY": key, "DATABASE_URL": "", "BELFRY_CONFIG": ""]
            func start() async throws -> (BackgroundProcess, String) {
                let server = try await BelfryServeProcess.start(database: target, environment: environment)
                return (server.process, server.base)
            }
            let recipients = (0..<3_000).map { "\"reader-\($0)\"" }.joined(separator: ",")
            let event =
                #"{"category": "mention", "recipients": [\#(recipients)], "content": {"title": "Hello", "body": "World"}, "idempotency_key": "launch-1"}"#

            let (first, base) = try await start()
            let accepted = try await Self.request("POST", "\(base)/v1/events", bearer: key, json: event)
            #expect(first.terminate(signal: SIGKILL) == 128 + SIGKILL)
            #expect(accepted.status == 202, "\(accepted.body)")
            let id = try JSONDecoder().decode(EventAccepted.self, from: Data(accepted.body.utf8)).eventID

            let (second, again) = try await start()
            defer { second.terminate() }
            let deadline = Date().addingTimeInterval(60)
            var status: EventStatus?
            while Date() < deadline {
                let answer = try await Self.request("GET", "\(again)/v1/events/\(id)", bearer: key)
                status = try JSONDecoder.iso8601.decode(EventStatus.self, from: Data(answer.body.utf8))
                if status?.state == .done { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(status?.state == .done)
            #expect(status?.recipients == 3_000)
            #expect(
                status?.notifications == 3_000,
                "one notification per recipient; at most one is the schema's unique rule")
            #expect(status?.deliveries["inbox"] == ["sent": 3_000])

            let replay = try await Self.request("POST", "\(again)/v1/events", bearer: key, json: event)
            #expect(replay.status == 202)
            #expect(try JSONDecoder().decode(EventAccepted.self, from: Data(replay.body.utf8)).eventID == id)
        }
    }
}

extension JSONDecoder {
    static let iso8601: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }()
}
