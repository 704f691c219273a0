import BelfryTestSupport
import Foundation
import Testing

@testable import BelfryServer

@Suite("Strict JSON syntax of request bodies")
struct JSONSyntaxTests {
    @Test(
        "valid JSON passes, as Python's json module agrees",
        arguments: [
            #"{}"#, #"[]"#, #"{"a": [1, -2.5e+3, 0, 0.1, true, false, null, "x\"\\\/\b\f\n\r\t\u00e9"]}"#,
            "\n  \"s\"  \n",
            #"[[[{"a": {"b": []}}]]]"#, "-0", "1E5",
        ])
    func valid(text: String) {
        #expect(JSONSyntax.problem(in: Data(text.utf8)) == nil, "\(text)")
    }

    @Test(
        "what is not JSON is placed by line and column",
        arguments: [
            (#"{"email": "b@example.org",}"#, "a comma before \"}\" (trailing comma) at line 1, column 27"),
            ("[1, 2,\n]", "a comma before \"]\" (trailing comma) at line 2, column 1"),
            (#"{"a" 1}"#, "expected \":\" after the key at line 1, column 6"),
            (#"{a: 1}"#, "expected a key in double quotes at line 1, column 2"),
            ("{\"a\": 01}", "a number that is not JSON at line 1, column 7"),
            ("{\"a\": \"x\ty\"}", "a control character in a string (escape it) at line 1, column 9"),
            (#"{"a": 1} {"#, "unexpected text after the JSON value at line 1, column 10"),
            (#"{"a": [1, 2"#, "the JSON text ends too early at line 1, column 12"),
            ("  ", "the body has no JSON value at line 1, column 3"),
            (#"{"a": tru}"#, "expected a value at line 1, column 7"),
            (#"["\x"]"#, "an unknown escape in a string at line 1, column 3"),
        ])
    func invalid(text: String, expected: String) {
        #expect(JSONSyntax.problem(in: Data(text.utf8))?.description == expected, "\(text)")
    }

    @Test("a body with a trailing comma gets 400 saying where, and changes nothing")
    func trailingCommaRefused() async throws {
        try await withBelfry(.sqlite) { app in
            #expect(try await app.putUser("bob").status == .created)
            let response = try await app.send(
                .PUT, "/v1/users/bob", bearer: testAPIKey, rawBody: #"{"email": "b@example.org",}"#)
            #expect(response.status == .badRequest)
            #expect(
                response.body.string.contains("the body is not valid JSON: a comma before"),
                "\(response.body.string)")
            #expect(response.body.string.contains("line 1, column 27"))
            let user = try await app.send(.GET, "/v1/users/bob", bearer: testAPIKey).body.string
            #expect(!user.contains("b@example.org"))
        }
    }
}
