import BelfryCore
import BelfryTestSupport
import BelfryWebPush
import Foundation
import SQLKit
import Testing
import Vapor
import VaporTesting

@testable import BelfryServer

/// Smaller findings of the security probe: signatures with one spelling, erasure that leaves no
/// content or id behind, and errors that stay short.
@Suite("Hardening: canonical signatures, erasure leftovers, short errors")
struct HardeningTests {
    /// `text` with its last character changed to another that decodes to the same bytes, when
    /// its spare low bits allow one (a 32-byte MAC in base64url has two).
    static func respelled(_ text: String) -> String? {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        guard let last = text.last, let index = alphabet.firstIndex(of: last) else { return nil }
        let sibling = alphabet[index ^ 1]
        let changed = String(text.dropLast()) + String(sibling)
        return Base64URL.decode(String(changed.split(separator: ".").last ?? ""))
            == Base64URL.decode(String(text.split(separator: ".").last ?? "")) ? changed : nil
    }

    @Test("a token, cookie or CSRF token with a respelled last character is refused")
    func canonicalSignatures() async throws {
        try await withBelfry(.sqlite) { app in
            let token = try await app.userToken("ada")
            let respelledToken = try #require(Self.respelled(token), "a JWT whose signature has spare bits")
            #expect(respelledToken != token)
            #expect(try await app.send(.GET, "/v1/me/preferences", bearer: token).status == .ok)
            #expect(try await app.send(.GET, "/v1/me/preferences", bearer: respelledToken).status == .unauthorized)

            let browser = try await WebPagesTests.Browser.signIn(app, token: token)
            let cookie = try #require(browser.cookie)
            let respelledCookie = try #require(Self.respelled(cookie))
            #expect(try await browser.get("/preferences").status == .ok)
            #expect(
                try await WebPagesTests.Browser(app: app, cookie: respelledCookie).get("/preferences").status
                    == .unauthorized)

            let csrf = try WebPagesTests.csrf(in: try await browser.get("/preferences"))
            let respelledCSRF = try #require(Self.respelled(csrf))
            let headers: HTTPHeaders = ["Cookie": "\(WebSession.cookieName)=\(cookie)"]
            var good = headers
            good.add(name: "X-CSRF-Token", value: csrf)
            var bad = headers
            bad.add(name: "X-CSRF-Token", value: respelledCSRF)
            #expect(try await app.send(.POST, "/web/session/token?page=preferences", headers: good).status == .ok)
            #expect(
                try await app.send(.POST, "/web/session/token?page=preferences", headers: bad).status == .forbidden)
        }
    }

    @Test(
        "erasure blanks the content of events sent to that user alone, and their id in topic cursors",
        arguments: TestDatabase.allCases)
    func erasureLeavesNothing(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            _ = try await app.putUser("ada")
            _ = try await app.putUser("bob")
            func send(_ recipients: [String], title: String) async throws -> UUID {
                try await app.send(
                    .POST, "/v1/events", bearer: testAPIKey,
                    json: EventRequest(
                        category: "mention", recipients: recipients,
                        content: .init(title: title, body: "private words", url: "https://example.org/ada"),
                        data: ["about": .string("ada")])
                ).decode(EventAccepted.self).eventID
            }
            let alone = try await send(["ada"], title: "Ada, your account")
            let shared = try await send(["ada", "bob"], title: "The team's news")
            try await EventsAPITests.fanOut(app)
            let adaID = try await WebPagesTests.userID(app, "ada")
            // A topic event part-way through, its cursor at Ada.
            try await app.db.sql.update("events").set("topic_cursor", to: adaID).where("id", .equal, shared).run()

            #expect(try await app.send(.DELETE, "/v1/users/ada", bearer: testAPIKey).status == .noContent)
            struct Row: Decodable {
                var title: String
                var body: String
                var url: String?
                var data: String?
                var topic_cursor: UUID?
            }
            func row(_ id: UUID) async throws -> Row {
                try #require(
                    try await app.db.sql.select().columns("title", "body", "url", "data", "topic_cursor").from("events")
                        .where("id", .equal, id).first(decoding: Row.self))
            }
            let erased = try await row(alone)
            #expect(erased.title == "" && erased.body == "" && erased.url == nil && erased.data == nil)
            let kept = try await row(shared)
            #expect(kept.title == "The team's news")
            #expect(kept.topic_cursor != adaID)
            #expect(kept.topic_cursor == Fanout.beforeEveryUser, "no subscriber before her: the start")
            // The erased event still answers its status.
            #expect(try await app.send(.GET, "/v1/events/\(alone)", bearer: testAPIKey).status == .ok)
        }
    }

    @Test("an error about thousands of unknown tenants names a few and counts the rest")
    func shortErrors() async throws {
        try await withBelfry(.sqlite) { app in
            let tenants = (0..<10_000).map { "site\($0)" }
            let response = try await app.send(
                .PUT, "/v1/users/ada", bearer: testAPIKey, json: UserUpsert(tenants: tenants))
            #expect(response.status == .unprocessableEntity)
            let message = try #require(response.errorMessage)
            #expect(message.contains("tenants[0]") && message.contains("tenants[2]") && !message.contains("tenants[3]"))
            #expect(message.contains("9997 more tenants are unknown"))
            #expect(response.body.readableBytes < 1_000)
        }
    }
}
