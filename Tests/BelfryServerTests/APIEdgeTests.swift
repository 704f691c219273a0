import BelfryCore
import BelfryTestSupport
import Foundation
import Testing
import Vapor
import VaporTesting

@testable import BelfryServer

/// Answers at the edges of the API that an outside tester (schemathesis) found wrong: each
/// says what happened and, where it helps, what to send instead.
@Suite("API edges: nulls, nested fields, methods, limits, order of checks")
struct APIEdgeTests {
    @Test("a user field sent as null is cleared; one left out keeps its value")
    func nullClears() async throws {
        try await withBelfry(.sqlite) { app in
            let created = try await app.putUser(
                "ada",
                UserUpsert(email: "ada@example.org", timeZone: "Europe/Berlin", locale: "de", tenants: ["enwiki"]))
            #expect(created.status == .created)
            let cleared = try await app.send(
                .PUT, "/v1/users/ada", bearer: testAPIKey, rawBody: #"{"email": null, "tenants": null}"#)
            #expect(cleared.status == .ok)
            let record = try cleared.decode(UserRecord.self)
            #expect(record.email == nil)
            #expect(record.tenants == [])
            #expect(record.timeZone == "Europe/Berlin", "left out, kept")
            #expect(record.locale == "de")
            let shown = try await app.send(.GET, "/v1/users/ada", bearer: testAPIKey).decode(UserRecord.self)
            #expect(shown.email == nil)
        }
    }

    @Test("unknown fields are found in nested objects, and the message lists what that object takes")
    func nestedUnknownFields() async throws {
        try await withBelfry(.sqlite) { app in
            let calendar = try await app.send(
                .POST, "/v1/events", bearer: testAPIKey,
                rawBody: #"""
                    {"category": "mention", "recipients": ["ada"], "content": {"title": "T", "body": "B"},
                     "schedule": {"calendar": {"weekdya": 2, "hour": 8}}}
                    """#)
            #expect(calendar.status == .unprocessableEntity)
            #expect(
                calendar.errorMessage
                    == #"unknown field "schedule.calendar.weekdya"; "schedule.calendar" takes day, hour, minute, month, repeats, weekday"#
            )
            let content = try await app.send(
                .POST, "/v1/events", bearer: testAPIKey,
                rawBody:
                    #"{"category": "mention", "recipients": ["ada"], "content": {"title": "T", "body": "B", "zz": 1}, "colour": 2}"#
            )
            #expect(content.status == .unprocessableEntity)
            let message = try #require(content.errorMessage)
            #expect(message.hasPrefix(#"unknown fields "colour", "content.zz"; "#), "\(message)")
            #expect(message.contains(#""content" takes body, image_url, title, url"#), "\(message)")
            #expect(message.contains("this request takes category,"), "\(message)")
        }
    }

    @Test("a path that exists answers another method with 405 and Allow; an unknown path is 404")
    func methodNotAllowed() async throws {
        try await withBelfry(.sqlite) { app in
            let wrong = try await app.send(.DELETE, "/v1/events", bearer: testAPIKey)
            #expect(wrong.status == .methodNotAllowed)
            #expect(wrong.errorCode == "method_not_allowed")
            #expect(wrong.headers.first(name: "Allow") == "POST")
            let user = try await app.send(.PATCH, "/v1/users/ada", bearer: testAPIKey)
            #expect(user.status == .methodNotAllowed)
            #expect(user.headers.first(name: "Allow") == "GET, HEAD, PUT, DELETE")
            #expect(user.errorMessage == "PATCH is not allowed here; this path takes GET, HEAD, PUT, DELETE")
            let show = try await app.send(.POST, "/v1/users/ada/tokens/x", bearer: testAPIKey)
            #expect(show.status == .notFound)
            let healthz = try await app.send(.POST, "/healthz")
            #expect(healthz.status == .methodNotAllowed)
            #expect(healthz.headers.first(name: "Allow") == "GET, HEAD")
            // A path the router sent down a constant branch, that a parameter's pattern for the
            // same method matches: still 404, never "POST is not allowed; this path takes POST".
            let branch = try await app.send(.POST, "/v1/me/notifications/read-all/read", bearer: testAPIKey)
            #expect(branch.status == .notFound)
            let missing = try await app.send(.GET, "/v1/nothing-here", bearer: testAPIKey)
            #expect(missing.status == .notFound)
            #expect(missing.headers.first(name: "Allow") == nil)
        }
    }

    @Test("413 names the limit: the server's for most routes, 2 MiB for events")
    func payloadTooLargeNamesTheLimit() async throws {
        try await withBelfry(.sqlite) { app in
            // Over a real connection: the limits apply as the body streams in.
            let server = try app.testing(method: .running(port: 0))
            let headers: HTTPHeaders = ["Authorization": "Bearer \(testAPIKey)", "Content-Type": "application/json"]
            let big = String(repeating: "x", count: 300 * 1024)
            let user = try await server.sendRequest(
                .PUT, "/v1/users/ada", headers: headers, body: ByteBuffer(string: #"{"email": "\#(big)"}"#))
            #expect(user.status == .payloadTooLarge)
            #expect(user.errorMessage == "the body is larger than 256 KiB, the most this route takes")
            let huge = String(repeating: "x", count: 2 * 1024 * 1024)
            let event = try await server.sendRequest(
                .POST, "/v1/events", headers: headers, body: ByteBuffer(string: #"{"category": "\#(huge)"}"#))
            #expect(event.status == .payloadTooLarge)
            #expect(event.errorMessage == "the body is larger than 2 MiB, the most this route takes")
        }
    }

    @Test("a JSON body may say so with parameters or in capitals; another media type is 415")
    func jsonMediaTypes() async throws {
        try await withBelfry(.sqlite) { app in
            let server = try app.testing(method: .running(port: 0))
            let event = #"{"category": "mention", "recipients": ["ada"], "content": {"title": "T", "body": "B"}}"#
            let answers: [(String?, HTTPStatus)] = [
                ("application/json", .accepted), ("application/json; charset=utf-8", .accepted),
                ("Application/JSON", .accepted), (nil, .accepted), ("text/plain", .unsupportedMediaType),
                ("application/jsonx", .unsupportedMediaType), ("application/json-seq", .unsupportedMediaType),
            ]
            for (contentType, status) in answers {
                var headers: HTTPHeaders = ["Authorization": "Bearer \(testAPIKey)"]
                if let contentType { headers.add(name: .contentType, value: contentType) }
                let answer = try await server.sendRequest(
                    .POST, "/v1/events", headers: headers, body: ByteBuffer(string: event))
                #expect(answer.status == status, "\(contentType ?? "no Content-Type"): \(answer.status)")
                if status == .unsupportedMediaType {
                    #expect(answer.errorMessage == "send the body as application/json")
                }
            }
        }
    }

    @Test("credentials are checked before the path's user id: none and a bad id is 401")
    func authenticationFirst() async throws {
        try await withBelfry(.sqlite) { app in
            let bad = "bad%20id"
            for path in ["/v1/users/\(bad)/preferences", "/v1/users/\(bad)/quiet-hours", "/v1/users/\(bad)"] {
                let anonymous = try await app.send(.GET, path)
                #expect(anonymous.status == .unauthorized, "\(path)")
                let keyed = try await app.send(.GET, path, bearer: testAPIKey)
                #expect(keyed.status == .unprocessableEntity, "\(path)")
            }
        }
    }

    @Test("a batch schedule is written without repeats, and what is written reads back")
    func batchScheduleRoundTrip() throws {
        let rule = BatchRule(schedule: CalendarRule(weekday: 2, hour: 9, repeats: true), maxItems: 5)
        let encoded = try JSONEncoder().encode(rule)
        let text = String(decoding: encoded, as: UTF8.self)
        #expect(!text.contains("repeats"), "\(text)")
        #expect(text.contains(#""calendar":{"#))
        let decoded = try JSONDecoder().decode(BatchRule.self, from: encoded)
        #expect(decoded == rule)
        // The config file takes what /v1/config shows.
        let file = """
            {
              "channels": [{ "id": "inbox", "kind": "inbox" }],
              "categories": [{ "id": "a", "name": "A", "channels": ["inbox"], "batch": \(text) }],
              "tenants": [{ "id": "main" }]
            }
            """
        let workspace = try WorkspaceConfig.decodeFile(Data(file.utf8))
        #expect(workspace.categories.first?.batch == rule)
    }
}
