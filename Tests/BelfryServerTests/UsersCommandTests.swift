import BelfryCore
import BelfryTestSupport
import Foundation
import SQLKit
import Testing
import Vapor

@testable import BelfryServer

/// `belfry users` and `belfry devices` against the SQLite file a server used.
@Suite("belfry users and devices", .serialized)
struct UsersCommandTests {
    @Test("users list, show and delete, and devices list, read and change the server's database")
    func usersAndDevices() async throws {
        let directory = try CommandLineTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("belfry.sqlite").path
        let database = ["--database", path]
        try await withBelfryApp(location: .sqlite(path: path)) { app, _ in
            let ada = try await app.userToken("ada")
            _ = try await app.putUser("ada", UserUpsert(email: "ada@example.org", tenants: ["enwiki", "dewiki"]))
            _ = try await app.putUser("bob", UserUpsert())
            #expect(
                try await app.send(
                    .POST, "/v1/me/devices", bearer: ada, json: DevicesAPITests.registration(DevicesAPITests.token)
                ).status.code < 300)
        }
        let run = { (arguments: [String]) in try TestProcess.run(CommandLineTests.executable, arguments + database) }

        let listed = CommandLineTests.table(try run(["users"]))
        #expect(listed.map { $0.prefix(2) } == [["ada", "ada@example.org"], ["bob", "-"]])
        #expect(try run(["users"]).hasPrefix("ID   EMAIL"), "a header row, aligned")
        #expect(CommandLineTests.table(try run(["users", "list", "--after", "ada"])).first?.first == "bob")
        let page = try run(["users", "list", "--limit", "1"])
        #expect(page.hasSuffix("More: belfry users list --after ada\n"), "\(page)")
        let shown = try JSONDecoder.iso8601.decode(UserRecord.self, from: Data(try run(["users", "show", "ada"]).utf8))
        #expect(shown.id == "ada" && shown.email == "ada@example.org")
        #expect(shown.tenants == ["dewiki", "enwiki"], "\(shown.tenants)")
        let compact = try run(["users", "show", "ada", "--json"])
        #expect(compact.hasPrefix(#"{"created_at":"#) && compact.filter { $0 == "\n" }.count == 1, "one line")

        let devices = try #require(CommandLineTests.table(try run(["devices", "list", "--user", "ada"])).first)
        #expect(devices.count == 5)
        #expect(devices[1] == "apns" && devices[4] == "active")
        #expect(devices[3] == String(DevicesAPITests.token.prefix(8)) + "…", "never the whole token")
        #expect(try run(["devices", "list", "--user", "bob"]) == "no devices\n")

        let unasked = try #require(throws: TestProcess.Failure.self) { try run(["users", "delete", "ada"]) }
        #expect(unasked.status == 64 && unasked.output.contains("pass --yes"), "no terminal to ask at")
        #expect(try run(["users", "delete", "ada", "--yes"]) == "erased ada\n")
        for arguments in [
            ["users", "show", "ada"], ["devices", "list", "--user", "ada"], ["users", "delete", "ada", "--yes"],
        ] {
            let failure = try #require(throws: TestProcess.Failure.self) { try run(arguments) }
            #expect(failure.output.contains(#"no user "ada""#), "\(arguments)")
        }
        #expect(CommandLineTests.table(try run(["users"])).map(\.first) == ["bob"])
        let bad = try #require(throws: TestProcess.Failure.self) { try run(["users", "show", "not an id"]) }
        #expect(bad.output.contains("is not a valid user id"))
        try await withBelfryApp(location: .sqlite(path: path)) { app, _ in
            let left = try await app.db.sql.raw("SELECT COUNT(*) AS n FROM devices").first()
            #expect(try left?.decode(column: "n", as: Int.self) == 0, "erasure took ada's device")
        }
    }
}
