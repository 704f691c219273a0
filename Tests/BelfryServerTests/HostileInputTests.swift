import BelfryCore
import BelfryTestSupport
import Foundation
import SQLKit
import Testing
import Vapor
import VaporTesting

@testable import BelfryServer

/// What an outside tester found: input that was accepted and then broke a reader, or was
/// quietly changed into something else.
@Suite("Hostile input: deep JSON, control characters, undecodable queries and forms")
struct HostileInputTests {
    static func event(
        title: String = "Hello", body: String = "Body", data: [String: JSONValue]? = nil
    )
        -> EventRequest
    {
        EventRequest(
            category: "mention", recipients: ["ada"], content: EventRequest.Content(title: title, body: body),
            data: data)
    }

    /// `{"k": {"k": … "leaf" …}}`, `levels` deep counting the outer object and the leaf.
    static func nested(_ levels: Int) -> [String: JSONValue] {
        var value = JSONValue.string("leaf")
        for _ in 0..<(levels - 2) { value = .object(["k": value]) }
        return ["k": value]
    }

    @Test("the fields a body may have come from its type's coding keys, nested objects by path")
    func fieldsFromTypes() {
        #expect(
            EventRequest.fields == [
                "category", "recipients", "topic", "exclude", "tenant", "content", "data", "idempotency_key",
                "schedule", "ttl_seconds", "push",
            ])
        #expect(
            EventRequest.nestedFields == [
                "push": ["content_available"], "content": ["title", "body", "url", "image_url"],
                "schedule": ["send_at", "delay_seconds", "calendar"],
                "schedule.calendar": ["month", "day", "weekday", "hour", "minute", "repeats"],
            ])
        #expect(
            DeviceRegistration.nestedFields == [
                "settings": ["alert", "sound", "badge", "notification_center"],
                "subscription": ["endpoint", "keys", "expirationTime"], "subscription.keys": ["p256dh", "auth"],
            ])
        #expect(PreferenceChangesRequest.nestedFields == ["changes": ["category", "channel", "preference"]])
    }

    @Test("data nested deeper than the limit is refused at intake, naming the depth", arguments: TestDatabase.allCases)
    func deepData(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            // Up to what the request decoder takes (512 levels in all, the event object included).
            for levels in [33, 200, 511] {
                let data = String(repeating: #"{"k":"#, count: levels) + "1" + String(repeating: "}", count: levels)
                let body = #"{"category":"mention","recipients":["ada"],"content":{"title":"T","body":"B"},"data":"#
                let refused = try await app.send(.POST, "/v1/events", bearer: testAPIKey, rawBody: body + data + "}")
                #expect(refused.status == .unprocessableEntity, "\(levels) levels")
                #expect(
                    refused.errorMessage?.contains("field \"data\" nests \(levels + 1) levels deep") == true,
                    "\(refused.errorMessage?.prefix(200) ?? "")")
            }
            let accepted = try await app.send(
                .POST, "/v1/events", bearer: testAPIKey, json: Self.event(data: Self.nested(32)))
            #expect(accepted.status == .accepted)
            try await EventsAPITests.fanOut(app)
            let token = try await app.userToken("ada")
            let inbox = try await app.send(.GET, "/v1/me/notifications", bearer: token)
            #expect(inbox.status == .ok)
            let page = try inbox.decode(InboxPage.self)
            #expect(page.notifications.first?.data.map { JSONValue.object($0).depth } == 32)
        }
    }

    @Test("a notification stored with data no reader takes is served without it, not as a 500")
    func poisonedRow() async throws {
        try await withBelfry(.sqlite) { app in
            let token = try await app.userToken("ada")
            #expect(try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: Self.event()).status == .accepted)
            try await EventsAPITests.fanOut(app)
            // As an event accepted before intake limited the depth left it.
            let deep = String(repeating: #"{"k":"#, count: 510) + "1" + String(repeating: "}", count: 510)
            try await app.db.sql.update("notifications").set("data", to: deep).run()
            let inbox = try await app.send(.GET, "/v1/me/notifications", bearer: token)
            #expect(inbox.status == .ok, "\(inbox.body.string.prefix(200))")
            let item = try #require(try inbox.decode(InboxPage.self).notifications.first)
            #expect(item.title == "Hello")
            #expect(item.data == nil)
            let read = try await app.send(
                .POST, "/v1/me/notifications/\(item.id.uuidString.lowercased())/read", bearer: token)
            #expect(read.status == .ok, "\(read.body.string.prefix(200))")
        }
    }

    @Test("control characters in a title or body are refused, naming the field and the character")
    func controlCharacters() async throws {
        try await withBelfry(.sqlite) { app in
            let cases: [(EventRequest, String)] = [
                (Self.event(title: "\u{0} hidden"), #"field "content.title" holds the control character U+0000"#),
                (Self.event(title: "bell\u{7}"), #"field "content.title" holds the control character U+0007"#),
                (Self.event(body: "a\u{1B}[31mred"), #"field "content.body" holds the control character U+001B"#),
                (Self.event(body: "x\u{85}y"), #"field "content.body" holds the control character U+0085"#),
            ]
            for (event, message) in cases {
                let refused = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: event)
                #expect(refused.status == .unprocessableEntity)
                #expect(refused.errorMessage?.contains(message) == true, "\(refused.errorMessage ?? "")")
            }
            let multiline = try await app.send(
                .POST, "/v1/events", bearer: testAPIKey, json: Self.event(body: "line one\nline two\ttabbed\r\n"))
            #expect(multiline.status == .accepted, "a body keeps its line breaks and tabs")
            let email = try await app.putUser("ada", UserUpsert(email: "ada\u{0}@example.org"))
            #expect(email.status == .unprocessableEntity)
        }
    }

    @Test("the control-character check refuses exactly Unicode's Cc, over every scalar")
    func controlCharactersAreCc() {
        var refused = 0
        for value in UInt32(0)...0x10FFFF {
            guard let scalar = Unicode.Scalar(value) else { continue }
            let isControl = scalar.properties.generalCategory == .control
            let problem = TextCheck.controlCharacters(in: "a" + String(Character(scalar)), field: "f")
            if (problem != nil) != isControl {
                Issue.record(
                    "U+\(String(value, radix: 16, uppercase: true)): Cc \(isControl), refused \(problem != nil)")
            }
            if problem != nil { refused += 1 }
        }
        #expect(refused == 65, "U+0000–U+001F and U+007F–U+009F")
    }

    @Test("an undecodable query value is a 400, on the API and on the pages, never the default")
    func undecodableQuery() async throws {
        try await withBelfry(.sqlite) { app in
            let token = try await app.userToken("ada")
            let patch = try await app.send(
                .PATCH, "/v1/me/preferences/categories/mention?tenant=%FF", bearer: token,
                json: ["preference": "opt_out"])
            #expect(patch.status == .badRequest)
            #expect(patch.errorMessage?.contains("%FF") == true, "\(patch.errorMessage ?? "")")
            let defaults = try await app.send(.GET, "/v1/me/preferences", bearer: token).decode(PreferenceData.self)
            let mention = (defaults.sections ?? []).flatMap { $0.subcategories ?? [] }.first {
                $0.category == "mention"
            }
            #expect(mention?.preference == .optIn, "nothing was written")
            for path in ["/v1/me/notifications?status=%E0%A4", "/v1/me/notifications?category=%C3%28"] {
                let answer = try await app.send(.GET, path, bearer: token)
                #expect(answer.status == .badRequest, "\(path): \(answer.status) \(answer.body.string.prefix(200))")
            }
            for path in ["/preferences?tenant=%FF", "/admin?x=%FF", "/unsubscribe/abc?x=%FF"] {
                let page = try await app.send(.GET, path)
                #expect(page.status == .badRequest && page.headers.contentType == .html, "\(path)")
            }
            // Outside the pages, the answer is the API's JSON error.
            for path in ["/healthz?x=%FF", "/metrics?x=%FF", "/openapi.yaml?x=%FF", "/web/belfry.css?v=%FF"] {
                let answer = try await app.send(.GET, path)
                #expect(answer.status == .badRequest && answer.errorCode == "bad_request", "\(path)")
            }
            #expect(try await app.send(.GET, "/v1/me/notifications?status=unread", bearer: token).status == .ok)
        }
    }

    @Test("an empty form post is an empty form: refused for its missing CSRF token, not as too large")
    func emptyForm() async throws {
        try await withBelfry(.sqlite) { app in
            let token = try await app.userToken("ada")
            let browser = try await WebPagesTests.Browser.signIn(app, token: token)
            var headers: HTTPHeaders = ["Content-Type": "application/x-www-form-urlencoded"]
            headers.add(name: "Cookie", value: "\(WebSession.cookieName)=\(browser.cookie ?? "")")
            let empty = try await app.testing().sendRequest(.POST, "/preferences", headers: headers)
            #expect(empty.status == .forbidden, "\(empty.status)")
            #expect(empty.body.string.contains("too large") == false)
            let broken = try await browser.post("/preferences", form: [])
            #expect(broken.status == .forbidden)
            let undecodable = try await app.testing().sendRequest(
                .POST, "/preferences", headers: headers, body: ByteBuffer(string: "_csrf=%FF&tenant=enwiki"))
            #expect(undecodable.status == .badRequest)
            #expect(undecodable.headers.contentType == .html)
        }
    }
}

@Suite("URL-encoded text, read strictly")
struct URLEncodedTests {
    @Test("pairs decode + and %XX, keep order and empty values")
    func pairs() throws {
        let pairs = try URLEncoded.pairs("a=1&b=x+y%2Bz&c&d=&caf%C3%A9=%E2%9C%93")
        #expect(pairs.map(\.name) == ["a", "b", "c", "d", "café"])
        #expect(pairs.map(\.value) == ["1", "x y+z", "", "", "✓"])
    }

    @Test(
        "broken escapes and bytes that are not UTF-8 are errors naming the part",
        arguments: [
            ("a=%ZZ", "%ZZ"), ("a=%F", "%F"), ("a=%", "%"), ("tenant=%FF", "%FF"), ("x=%C3%28", "%C3%28"),
            ("%E0%A4=1", "%E0%A4"),
        ])
    func undecodable(text: String, part: String) {
        #expect(throws: URLEncoded.Undecodable(part: part)) { try URLEncoded.pairs(Substring(text)) }
    }
}
