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

@Suite("A body's keys, read in the syntax check's pass")
struct BodyKeysTests {
    static let rules = JSONSyntax.KeyRules(
        allowed: ["category", "recipients", "content", "schedule", "changes", "data", "tenant", "é"],
        nested: [
            "content": ["title", "body", "url"], "schedule": ["send_at", "calendar"],
            "schedule.calendar": ["hour", "days"], "changes": ["category", "channel", "level"],
        ])

    static let bodies = [
        #"{}"#, #"[]"#, #""text""#, #"{"category": "x", "recipients": ["a", "b"]}"#,
        #"{"zz": 1, "category": null, "aa": {"nested": true}, "tenant": null}"#,
        #"{"content": {"title": "t", "tilte": "typo", "body": null}, "content2": {}}"#,
        #"{"schedule": {"calendar": {"hour": 9, "minute": 5, "days": [1, {"x": 1}]}, "sent_at": 1}}"#,
        #"{"changes": [{"category": "a", "chanel": "b"}, 7, [1, {"q": 1}], {"level": "on", "x": null, "a": 0}]}"#,
        #"{"data": {"anything": {"goes": [1, 2]}}, "recipients": [{"not": "checked"}]}"#,
        #"{"\u00e9": 1, "\u00e8": 2, "a\"b": 3, "tab\tkey": 4, "\ud83d\udd14": 5}"#,
        #"{"content": [{"title": 1, "nope": 2}], "schedule": "later", "changes": {"category": 1, "z": 2}}"#,
        #"{"b": 1, "a": 2, "content": {"z": 1, "a": 2}, "c": 3}"#,
    ]

    @Test("the unknown keys and the nulls are what the decoder-based walk found", arguments: bodies)
    func sameAsTheDecoderWalk(body: String) throws {
        let found = try JSONSyntax.check(Data(body.utf8), keys: Self.rules).get()
        let reference = ReferenceKeys.walk(Data(body.utf8), rules: Self.rules)
        #expect(
            found.unknown.map { "\($0.path) in \($0.object)" } == reference.unknown.map { "\($0.path) in \($0.object)" }
        )
        #expect(found.nulls == reference.nulls)
    }

    @Test("a syntax error is still reported where it is")
    func syntaxError() {
        guard case .failure(let problem) = JSONSyntax.check(Data(#"{"a": [1,]}"#.utf8), keys: Self.rules) else {
            Issue.record("a trailing comma passed")
            return
        }
        #expect(problem.description.contains("trailing comma"))
    }
}

/// The walk the one-pass check replaced: Foundation's decoder over the body's keys, kept here
/// as the reference the new walk must agree with.
private enum ReferenceKeys {
    static let allowed = CodingUserInfoKey(rawValue: "allowed")!
    static let nested = CodingUserInfoKey(rawValue: "nested")!

    static func walk(
        _ data: Data, rules: JSONSyntax.KeyRules
    ) -> (unknown: [(path: String, object: String)], nulls: Set<String>) {
        let decoder = JSONDecoder()
        decoder.userInfo = [allowed: rules.allowed, nested: rules.nested]
        guard let found = try? decoder.decode(Found.self, from: data) else { return ([], []) }
        return (found.unknown, found.nulls)
    }

    struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    struct Skipped: Decodable {
        init(from decoder: any Decoder) throws {}
    }

    struct Found: Decodable {
        var unknown: [(path: String, object: String)] = []
        var nulls: Set<String> = []

        init(from decoder: any Decoder) throws {
            guard let object = try? decoder.container(keyedBy: Key.self) else { return }
            for key in object.allKeys where (try? object.decodeNil(forKey: key)) == true {
                nulls.insert(key.stringValue)
            }
            unknown = Self.unknown(
                in: object, allowed: decoder.userInfo[ReferenceKeys.allowed] as? Set<String> ?? [],
                nested: decoder.userInfo[ReferenceKeys.nested] as? [String: Set<String>] ?? [:], path: "",
                object: "")
        }

        static func unknown(
            in container: KeyedDecodingContainer<Key>, allowed: Set<String>, nested: [String: Set<String>],
            path: String, object: String
        ) -> [(path: String, object: String)] {
            var unknown: [(path: String, object: String)] = []
            for key in container.allKeys.sorted(by: { $0.stringValue < $1.stringValue }) {
                let childPath = path.isEmpty ? key.stringValue : "\(path).\(key.stringValue)"
                guard allowed.contains(key.stringValue) else {
                    unknown.append((childPath, object))
                    continue
                }
                let childObject = object.isEmpty ? key.stringValue : "\(object).\(key.stringValue)"
                guard let inner = nested[childObject] else { continue }
                if let child = try? container.nestedContainer(keyedBy: Key.self, forKey: key) {
                    unknown += Self.unknown(
                        in: child, allowed: inner, nested: nested, path: childPath, object: childObject)
                } else if var list = try? container.nestedUnkeyedContainer(forKey: key) {
                    var index = 0
                    while !list.isAtEnd {
                        if let element = try? list.nestedContainer(keyedBy: Key.self) {
                            unknown += Self.unknown(
                                in: element, allowed: inner, nested: nested, path: "\(childPath)[\(index)]",
                                object: childObject)
                        } else if (try? list.decode(Skipped.self)) == nil {
                            break
                        }
                        index += 1
                    }
                }
            }
            return unknown
        }
    }
}
