import BelfryCore
import BelfryTestSupport
import Foundation
import SQLKit
import Testing
import Vapor
import VaporTesting

@testable import BelfryServer

/// API keys with scopes, kept in the database, and the audit log of what was done with them.
@Suite("API keys with scopes, and the audit log", .serialized)
struct APIKeysTests {
    static let form: HTTPHeaders = ["Content-Type": "application/x-www-form-urlencoded"]

    static func keys(_ app: Application) async throws -> (admin: String, publish: String, read: String) {
        let store = app.belfry.keyStore
        return (
            try await store.create(name: "ops", scope: .admin, on: app.db).key,
            try await store.create(name: "backend", scope: .publish, on: app.db).key,
            try await store.create(name: "dashboard", scope: .read, on: app.db).key
        )
    }

    @Test("each scope reaches its routes only, and a 403 names the key's scope", arguments: TestDatabase.allCases)
    func scopes(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let keys = try await Self.keys(app)
            _ = try await app.putUser("ada")
            let event = EventsAPITests.event(to: ["ada"])

            // publish: sends events and manages topics' subscribers; no user management.
            let sent = try await app.send(.POST, "/v1/events", bearer: keys.publish, json: event)
            #expect(sent.status == .accepted)
            let id = try sent.decode(EventAccepted.self).eventID
            #expect(try await app.send(.GET, "/v1/events/\(id)", bearer: keys.publish).status == .ok)
            #expect(try await TopicsTests.put(app, "page:x", ["ada"]).status == .ok)
            #expect(
                try await app.send(
                    .PUT, "/v1/topics/page:y/subscribers", bearer: keys.publish, json: TopicSubscribers(users: ["ada"])
                ).status == .ok)
            let erase = try await app.send(.DELETE, "/v1/users/ada", bearer: keys.publish)
            #expect(erase.status == .forbidden)
            #expect(erase.errorMessage?.contains("\"backend\" has the publish scope") == true)
            #expect(try await app.send(.POST, "/v1/users/ada/tokens", bearer: keys.publish).status == .forbidden)
            #expect(try await app.send(.GET, "/v1/users/ada/preferences", bearer: keys.publish).status == .forbidden)

            // read: statuses and topics; nothing that writes.
            #expect(try await app.send(.POST, "/v1/events", bearer: keys.read, json: event).status == .forbidden)
            #expect(try await app.send(.GET, "/v1/events/\(id)", bearer: keys.read).status == .ok)
            #expect(try await app.send(.GET, "/v1/topics/page:x", bearer: keys.read).status == .ok)
            #expect(
                try await app.send(
                    .PUT, "/v1/topics/page:y/subscribers", bearer: keys.read, json: TopicSubscribers(users: ["ada"])
                ).status == .forbidden)
            #expect(try await app.send(.GET, "/v1/audit", bearer: keys.read).status == .forbidden)

            // admin: everything, and the audit log says who.
            #expect(try await app.send(.DELETE, "/v1/users/ada", bearer: keys.admin).status == .noContent)
            let audit = try await app.send(.GET, "/v1/audit", bearer: keys.admin).decode(AuditPage.self)
            let erased = try #require(audit.entries.first { $0.action == "user.erased" })
            #expect(erased.actor == "key:ops" && erased.subject == "ada")

            // Revoked: refused at once here, as if never issued.
            #expect(try await app.belfry.keyStore.revoke(name: "backend", on: app.db))
            let refused = try await app.send(.POST, "/v1/events", bearer: keys.publish, json: event)
            #expect(refused.status == .unauthorized)
            #expect(
                try await app.send(.POST, "/v1/events", bearer: "belfry_not-a-key", json: event).status == .unauthorized
            )
        }
    }

    @Test("a key revoked on one instance is refused by another within 5 seconds")
    func revokedEverywhere() async throws {
        try await withTestStorage(.postgres) { location in
            try await withBelfryApp(location: location) { first, _ in
                try await withBelfryApp(location: location) { second, _ in
                    let key = try await first.belfry.keyStore.create(name: "backend", scope: .read, on: first.db).key
                    #expect(try await second.send(.GET, "/v1/topics/t", bearer: key).status == .ok)
                    #expect(try await first.belfry.keyStore.revoke(name: "backend", on: first.db))
                    let revokedAt = ContinuousClock.now
                    var refusedAfter: Duration?
                    while refusedAfter == nil, ContinuousClock.now - revokedAt < .seconds(10) {
                        if try await second.send(.GET, "/v1/topics/t", bearer: key).status == .unauthorized {
                            refusedAfter = ContinuousClock.now - revokedAt
                        } else {
                            try await Task.sleep(for: .milliseconds(100))
                        }
                    }
                    let after = try #require(refusedAfter, "the other instance refused the key")
                    #expect(after < .seconds(5), "\(after)")
                    #expect(try await first.send(.GET, "/v1/topics/t", bearer: key).status == .unauthorized)
                }
            }
        }
    }

    @Test("the console signs in with admin keys only, lists and revokes keys, and shows the audit log")
    func console() async throws {
        try await withBelfry(.sqlite) { app in
            let keys = try await Self.keys(app)
            let refused = try await app.send(
                .POST, "/admin/session", rawBody: "api_key=\(keys.publish)", headers: Self.form)
            #expect(refused.status == .unauthorized, "a publish key opens no console")
            let signedIn = try await app.send(
                .POST, "/admin/session", rawBody: "api_key=\(keys.admin)", headers: Self.form)
            let cookie = try #require(signedIn.headers.setCookie?[ConsoleSession.cookieName])
            let session: HTTPHeaders = ["Cookie": "\(ConsoleSession.cookieName)=\(cookie.string)"]

            let page = try await app.send(.GET, "/admin/keys", headers: session).body.string
            for name in ["ops", "backend", "dashboard"] {
                #expect(page.contains(#"<td data-label="Name">\#(name)</td>"#), "\(name)")
            }
            #expect(!page.contains(keys.publish), "never the key itself")
            let csrf = try #require(page.firstMatch(of: /name="_csrf" value="([^"]+)"/)?.output.1)
            var headers = Self.form
            headers.add(name: "Cookie", value: "\(ConsoleSession.cookieName)=\(cookie.string)")
            let revoked = try await app.send(
                .POST, "/admin/keys/revoke", rawBody: "_csrf=\(csrf)&name=backend", headers: headers)
            #expect(revoked.status == .seeOther)
            #expect(try await app.send(.GET, "/v1/topics/t", bearer: keys.publish).status == .unauthorized)
            #expect(
                try await app.send(
                    .POST, "/admin/keys/revoke", rawBody: "_csrf=forged&name=dashboard", headers: headers
                )
                .status == .forbidden)

            let audit = try await app.send(.GET, "/admin/audit", headers: session).body.string
            #expect(audit.contains("console.sign_in_failed"))
            #expect(audit.contains("console.sign_in"))
            #expect(audit.contains("key.revoked"))
            #expect(audit.contains("console:ops"))
            // Revoking the key that opened the console ends its session.
            #expect(try await app.belfry.keyStore.revoke(name: "ops", on: app.db))
            #expect(try await app.send(.GET, "/admin/keys", headers: session).status == .unauthorized)
        }
    }

    @Test("the audit log pages newest first, and records sign-outs, device moves and retries")
    func auditLog() async throws {
        try await withBelfry(.sqlite) { app in
            let alice = try await app.userToken("alice")
            let bob = try await app.userToken("bob")
            let apns = ["platform": "apns", "token": String(repeating: "cd", count: 32), "environment": "sandbox"]
            var registration = apns
            registration["authorization"] = "authorized"
            _ = try await app.send(.POST, "/v1/me/devices", bearer: alice, json: registration)
            _ = try await app.send(.POST, "/v1/me/devices", bearer: bob, json: registration)
            #expect(try await app.send(.DELETE, "/v1/users/alice/sessions", bearer: testAPIKey).status == .noContent)

            let all = try await app.send(.GET, "/v1/audit", bearer: testAPIKey).decode(AuditPage.self)
            #expect(all.entries.map(\.action) == ["user.signed_out_everywhere", "device.moved"])
            let moved = all.entries[1]
            #expect(moved.actor == "user:bob" && moved.detail?.contains("from alice to bob") == true)
            #expect(all.entries[0].actor == "key:environment")

            let first = try await app.send(.GET, "/v1/audit?limit=1", bearer: testAPIKey).decode(AuditPage.self)
            #expect(first.entries.map(\.action) == ["user.signed_out_everywhere"])
            let next = try #require(first.nextBefore)
            let second = try await app.send(.GET, "/v1/audit?limit=1&before=\(next)", bearer: testAPIKey)
                .decode(AuditPage.self)
            #expect(second.entries.map(\.action) == ["device.moved"])
            #expect(second.nextBefore == nil)
            #expect(try await app.send(.GET, "/v1/audit?limit=0", bearer: testAPIKey).status == .unprocessableEntity)
            #expect(try await app.send(.GET, "/v1/audit?before=x", bearer: testAPIKey).status == .unprocessableEntity)
            #expect(try await app.send(.GET, "/v1/audit", bearer: alice).status == .forbidden)
        }
    }

    @Test("belfry keys creates, lists and revokes keys; belfry audit shows what happened")
    func commandLine() async throws {
        let directory = try CommandLineTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("belfry.sqlite").path
        let run = { (arguments: [String]) in
            try TestProcess.run(CommandLineTests.executable, arguments + ["--database", path])
        }
        _ = try run(["migrate"])
        let key = try run(["keys", "create", "backend", "--scope", "publish"]).trimmingCharacters(in: .newlines)
        #expect(key.hasPrefix("belfry_") && key.count > 40)
        let bad = try #require(throws: TestProcess.Failure.self) {
            try run(["keys", "create", "x", "--scope", "root"])
        }
        #expect(bad.output.contains("--scope must be admin, publish or read"))
        let twice = try #require(throws: TestProcess.Failure.self) {
            try run(["keys", "create", "backend", "--scope", "read"])
        }
        #expect(twice.output.contains("already"))
        let listed = try #require(CommandLineTests.table(try run(["keys", "list"])).first)
        #expect(listed.prefix(3) == ["backend", "publish", APIKeys.fingerprint(key)])
        #expect(listed.last == "active")
        try await withBelfryApp(location: .sqlite(path: path)) { app, _ in
            let sent = try await app.send(.POST, "/v1/events", bearer: key, json: EventsAPITests.event(to: ["ada"]))
            #expect(sent.status == .accepted)
        }
        #expect(try run(["keys", "revoke", "backend"]) == "revoked backend\n")
        #expect(try run(["keys", "list"]).contains("revoked "))
        let audit = try run(["audit"])
        let entries = CommandLineTests.table(audit).map { $0.dropFirst() }
        #expect(entries.contains { Array($0.prefix(3)) == ["cli", "key.revoked", "backend"] })
        #expect(
            entries.contains {
                Array($0.prefix(3)) == ["cli", "key.created", "backend"]
                    && $0.dropFirst(3).first?.hasPrefix("scope publish") == true
            })
        try await withBelfryApp(location: .sqlite(path: path)) { app, _ in
            let sent = try await app.send(.POST, "/v1/events", bearer: key, json: EventsAPITests.event(to: ["ada"]))
            #expect(sent.status == .unauthorized)
        }
    }
}
