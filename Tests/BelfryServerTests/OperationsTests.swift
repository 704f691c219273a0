import BelfryCore
import BelfryServer
import BelfryTestSupport
import Foundation
import Testing
import Vapor
import VaporTesting

@Suite("Operations: health, readiness, config and the OpenAPI document")
struct OperationsTests {
    @Test("healthz and readyz answer, readyz naming the database", arguments: TestDatabase.allCases)
    func health(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let health = try await app.send(.GET, "/healthz")
            #expect(health.status == .ok)
            #expect(health.body.string == #"{"status":"ok"}"#)
            // A probe waits a second at most; the first on an event loop whose pool has no
            // connection yet may need longer while the whole suite loads the machine, and
            // orchestrators probe again.
            var ready = try await app.send(.GET, "/readyz")
            for _ in 0..<10 where ready.status != .ok {
                try await Task.sleep(for: .milliseconds(200))
                ready = try await app.send(.GET, "/readyz")
            }
            #expect(ready.status == .ok)
            #expect(ready.body.string == #"{"database":"\#(database.rawValue)","status":"ready"}"#)
        }
    }

    @Test("GET /v1/config answers the workspace in force, to an API key or a user token, with an ETag")
    func config() async throws {
        try await withBelfry(.sqlite) { app in
            let response = try await app.send(.GET, "/v1/config", bearer: testAPIKey)
            #expect(try response.decode(WorkspaceConfig.self) == .demo)
            let etag = try #require(response.headers.first(name: .eTag))
            let user = try await app.send(.GET, "/v1/config", bearer: try await app.userToken("ada"))
            #expect(user.status == .ok, "apps read the categories to register them with the OS")
            #expect(try user.decode(WorkspaceConfig.self) == .demo)
            #expect(user.headers.first(name: .eTag) == etag)
            let unchanged = try await app.send(.GET, "/v1/config", bearer: testAPIKey, headers: ["If-None-Match": etag])
            #expect(unchanged.status == .notModified)
            #expect(unchanged.body.readableBytes == 0)
            // Nothing secret is in it: no server setting, key or URL.
            for secret in [testAPIKey, "webhook_url", "secret", "vapid", "apns_key"] {
                #expect(!user.body.string.contains(secret), "\(secret)")
            }
        }
    }

    @Test("unknown routes and oversized bodies get the JSON error body")
    func errorsAreJSON() async throws {
        try await withBelfry(.sqlite) { app in
            let missing = try await app.send(.GET, "/v1/nothing-here")
            #expect(missing.status == .notFound)
            #expect(missing.errorCode == "not_found")
            #expect(missing.headers.contentType == .json)

            let huge = String(repeating: "x", count: 300 * 1024)
            let oversized = try await app.testing(method: .running(port: 0)).sendRequest(
                .PUT, "/v1/users/ada",
                headers: ["Authorization": "Bearer \(testAPIKey)", "Content-Type": "application/json"],
                body: ByteBuffer(string: #"{"email": "\#(huge)"}"#))
            #expect(oversized.status == .payloadTooLarge)
            #expect(oversized.errorCode == "payload_too_large")
        }
    }

    /// The paths and methods in the served OpenAPI document, read line by line
    /// (paths at two spaces of indentation, methods at four).
    static func documentedRoutes(_ text: String) -> Set<String> {
        var routes = Set<String>()
        var inPaths = false
        var path: String?
        let methods: Set<String> = ["get", "put", "post", "patch", "delete", "head", "options"]
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if !line.hasPrefix(" ") && !line.isEmpty { inPaths = line == "paths:" }
            guard inPaths else { continue }
            if line.hasPrefix("  /") && !line.hasPrefix("   ") {
                path = String(line.dropFirst(2).dropLast())
            } else if line.hasPrefix("    ") && !line.hasPrefix("     "), let path {
                let key = line.dropFirst(4).dropLast()
                if methods.contains(String(key)) { routes.insert("\(key.uppercased()) \(path)") }
            }
        }
        return routes
    }

    @Test("the OpenAPI document describes exactly the routes the server has")
    func openAPIMatchesRouter() async throws {
        try await withBelfry(.sqlite) { app in
            let response = try await app.send(.GET, "/openapi.yaml")
            #expect(response.status == .ok)
            #expect(response.headers.contentType?.subType == "yaml")
            let text = response.body.string
            #expect(text.hasPrefix("openapi: 3.1"))
            let documented = Self.documentedRoutes(text)
            let served = Set(
                app.routes.all.map { route in
                    let path = route.path.map { component -> String in
                        switch component {
                        case .parameter(let name): "{\(name)}"
                        default: component.description
                        }
                    }.joined(separator: "/")
                    return "\(route.method.rawValue) /\(path)"
                })
            #expect(served.count >= 15)
            #expect(
                documented == served,
                "only documented: \(documented.subtracting(served)); only served: \(served.subtracting(documented))")
        }
    }
}
