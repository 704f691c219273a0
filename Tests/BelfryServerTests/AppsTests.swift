import BelfryCore
import BelfryTestServers
import BelfryTestSupport
import BelfryWebPush
import Crypto
import Foundation
import Testing
import Vapor
import VaporTesting

@testable import BelfryServer

/// Several apps per platform, each with its own credentials, and tenants that name theirs.
@Suite("Apps: several push credentials per server", .serialized)
struct AppsTests {
    static func apnsApp(_ id: String, _ server: APNsTestServer, topic: String) -> PushApp {
        PushApp(
            id: id,
            credentials: .apns(
                .init(keyPEM: server.keyPEM, keyID: server.keyID, teamID: server.teamID, topic: topic, url: server.url),
                environment: .production))
    }

    static func register(
        _ app: Application, _ bearer: String, _ registration: DeviceRegistration
    ) async throws -> TestingHTTPResponse {
        try await app.send(.POST, "/v1/me/devices", bearer: bearer, json: registration)
    }

    static func apnsDevice(_ token: String, app: String?) -> DeviceRegistration {
        DeviceRegistration(platform: .apns, token: token, authorization: .authorized, app: app)
    }

    @Test(
        "two APNs apps with their own keys and topics: each device goes through its app's token and connection",
        arguments: TestDatabase.allCases)
    func twoAPNsApps(database: TestDatabase) async throws {
        let reader = try await APNsTestServer()
        let editor = try await APNsTestServer()
        defer {
            Task {
                await reader.shutdown()
                await editor.shutdown()
            }
        }
        try await withBelfry(database, jitter: 0.5) { settings in
            settings.apps = [
                Self.apnsApp("reader", reader, topic: "org.example.reader"),
                Self.apnsApp("editor", editor, topic: "org.example.editor"),
            ]
            settings.extraCertificatesPEM = [reader.authority, editor.authority].map(\.certificatePEM)
                .joined(separator: "\n")
        } _: { app in
            let ada = try await app.userToken("ada")
            let readerToken = String(repeating: "a1", count: 32)
            let editorToken = String(repeating: "e2", count: 32)
            let missing = try await Self.register(app, ada, Self.apnsDevice(readerToken, app: nil))
            #expect(missing.status == .unprocessableEntity)
            #expect(missing.body.string.contains("several apns apps (reader, editor)"), "\(missing.body.string)")
            let unknown = try await Self.register(app, ada, Self.apnsDevice(readerToken, app: "viewer"))
            #expect(unknown.status == .unprocessableEntity)
            #expect(unknown.body.string.contains("\\\"viewer\\\" is not one of this server's apns apps"))

            let first = try await Self.register(app, ada, Self.apnsDevice(readerToken, app: "reader"))
            #expect(first.status == .created)
            let device = try first.decode(DeviceRecord.self)
            #expect(device.app == "reader")
            #expect(device.environment == .production, "the app's environment, as the device gave none")
            #expect(try await Self.register(app, ada, Self.apnsDevice(editorToken, app: "editor")).status == .created)

            let id = try await InboxAPITests.notify(app, ["ada"], title: "Both apps", category: "reverted")
            let worker = try #require(app.deliveryQueue)
            while try await worker.runOnce() > 0 {}
            #expect(try await APNsChannelTests.status(app, id).deliveries["ios_push"] == ["sent": 2])
            let toReader = try #require(reader.received.first)
            let toEditor = try #require(editor.received.first)
            #expect(reader.received.count == 1 && editor.received.count == 1)
            #expect(toReader.status == 200, "signed with the reader app's key: \(toReader.reason ?? "")")
            #expect(toEditor.status == 200, "signed with the editor app's key: \(toEditor.reason ?? "")")
            #expect(toReader.deviceToken == readerToken && toEditor.deviceToken == editorToken)
            #expect(toReader.headers["apns-topic"] == "org.example.reader")
            #expect(toEditor.headers["apns-topic"] == "org.example.editor")
            #expect(toReader.providerToken != toEditor.providerToken)
        }
    }

    @Test(
        "a tenant that names its apps refuses other apps' devices, and its events reach only its apps",
        arguments: TestDatabase.allCases)
    func tenantApps(database: TestDatabase) async throws {
        let reader = try await APNsTestServer()
        let editor = try await APNsTestServer()
        defer {
            Task {
                await reader.shutdown()
                await editor.shutdown()
            }
        }
        var workspace = WorkspaceConfig.demo
        workspace.tenants = workspace.tenants.map { tenant in
            var tenant = tenant
            if tenant.id == "dewiki" { tenant.apps = ["editor"] }
            return tenant
        }
        try await withBelfry(database, workspace: workspace, jitter: 0.5) { settings in
            settings.apps = [
                Self.apnsApp("reader", reader, topic: "org.example.reader"),
                Self.apnsApp("editor", editor, topic: "org.example.editor"),
            ]
            settings.extraCertificatesPEM = [reader.authority, editor.authority].map(\.certificatePEM)
                .joined(separator: "\n")
        } _: { app in
            let grete = try await app.userToken("grete", tenants: ["dewiki"])
            let refused = try await Self.register(
                app, grete, Self.apnsDevice(String(repeating: "d3", count: 32), app: "reader"))
            #expect(refused.status == .unprocessableEntity)
            #expect(
                refused.body.string.contains(#"app \"reader\" is not one of the apps of tenant \"dewiki\" (editor)"#),
                "\(refused.body.string)")
            #expect(
                try await Self.register(app, grete, Self.apnsDevice(String(repeating: "d4", count: 32), app: "editor"))
                    .status == .created)

            // Ada reads both sites, with a device of each app.
            let ada = try await app.userToken("ada", tenants: ["enwiki", "dewiki"])
            for (token, name) in [("a1", "reader"), ("e2", "editor")] {
                let response = try await Self.register(
                    app, ada, Self.apnsDevice(String(repeating: token, count: 32), app: name))
                #expect(response.status == .created)
            }
            let english = try await InboxAPITests.notify(
                app, ["ada"], title: "en", category: "reverted", tenant: "enwiki")
            let german = try await InboxAPITests.notify(
                app, ["ada"], title: "de", category: "reverted", tenant: "dewiki")
            let worker = try #require(app.deliveryQueue)
            while try await worker.runOnce() > 0 {}
            #expect(try await APNsChannelTests.status(app, english).deliveries["ios_push"] == ["sent": 2])
            #expect(try await APNsChannelTests.status(app, german).deliveries["ios_push"] == ["sent": 1])
            #expect(reader.received.map { ($0.aps["alert"] as? [String: Any])?["title"] as? String } == ["en"])
            #expect(
                Set(editor.received.map { ($0.aps["alert"] as? [String: Any])?["title"] as? String }) == ["en", "de"])
        }
    }

    @Test("a platform's only app needs no name; each web_push app serves its own VAPID key")
    func onlyAppAndVAPIDKeys() async throws {
        let fcm = try await FCMTestServer()
        defer { Task { await fcm.shutdown() } }
        let siteKey = P256.Signing.PrivateKey()
        try await withBelfry(.sqlite, jitter: 0.5) { settings in
            settings.apps = [
                PushApp(
                    id: "android", credentials: .fcm(.init(serviceAccountJSON: fcm.serviceAccountJSON, url: fcm.url))),
                PushApp(
                    id: "site-b",
                    credentials: .webPush(subject: "mailto:ops@site-b.example", keyPEM: siteKey.pemRepresentation)),
            ]
            settings.extraCertificatesPEM = fcm.authority.certificatePEM
        } _: { app in
            let ada = try await app.userToken("ada")
            let device = try await FCMChannelTests.register(app, ada)
            #expect(device.app == "android")
            let id = try await InboxAPITests.notify(app, ["ada"], title: "Only app", category: "reverted")
            let worker = try #require(app.deliveryQueue)
            while try await worker.runOnce() > 0 {}
            #expect(try await APNsChannelTests.status(app, id).deliveries["android_push"] == ["sent": 1])
            #expect(fcm.received.count == 1)

            struct Key: Decodable { var public_key: String }
            let key = try await app.send(.GET, "/v1/webpush/vapid-public-key?app=site-b")
            #expect(key.status == .ok)
            #expect(
                try key.decode(Key.self).public_key
                    == Base64URL.encode(siteKey.publicKey.x963Representation))
            #expect(try await app.send(.GET, "/v1/webpush/vapid-public-key?app=nope").status == .notFound)
            #expect(
                try await app.send(.GET, "/v1/webpush/vapid-public-key").status == .notFound,
                "no server-wide VAPID subject: the server's own key is not offered")

            let config = try await app.send(.GET, "/v1/config", bearer: testAPIKey).body.string
            #expect(!config.contains("PRIVATE KEY") && !config.contains("service_account"))
        }
    }

    @Test("the file's apps are read and checked: every problem with its path, tenants' apps known")
    func appsInTheFile() throws {
        let apnsKey = P256.Signing.PrivateKey().pemRepresentation
        let files = [
            "apns.p8": apnsKey, "p384.p8": P384.Signing.PrivateKey().pemRepresentation, "account.json": "{",
            "vapid.pem": P256.Signing.PrivateKey().pemRepresentation,
        ]
        var config = try #require(
            try JSONSerialization.jsonObject(
                with: Data(
                    contentsOf: PackagePaths.root.appendingPathComponent(
                        "Sources/BelfryServer/Resources/demo-workspace.json"))) as? [String: Any])
        func resolve(_ apps: [[String: Any]], tenantApps: [String]? = nil) throws(ConfigError) -> ServerConfiguration {
            var file = config
            file["apps"] = apps
            if let tenantApps, var tenants = file["tenants"] as? [[String: Any]] {
                tenants[0]["apps"] = tenantApps
                file["tenants"] = tenants
            }
            let data = (try? JSONSerialization.data(withJSONObject: file)) ?? Data()
            return try ServerConfiguration.resolve(flags: .init(config: "config.json"), environment: [:]) { path in
                if path == "config.json" { return data }
                guard let text = files[path] else { throw CocoaError(.fileReadNoSuchFile) }
                return Data(text.utf8)
            }
        }
        let good = try resolve(
            [
                [
                    "id": "reader", "platform": "apns", "key_path": "apns.p8", "key_id": "ABCDE12345",
                    "team_id": "TEAM123456", "topic": "org.example.reader", "environment": "sandbox",
                ],
                [
                    "id": "site", "platform": "web_push", "vapid_private_key_path": "vapid.pem",
                    "subject": "mailto:a@b.c",
                ],
            ], tenantApps: ["reader"])
        #expect(good.apps.map(\.id) == ["reader", "site"])
        #expect(
            good.apps.first?.credentials
                == .apns(
                    .init(keyPEM: apnsKey, keyID: "ABCDE12345", teamID: "TEAM123456", topic: "org.example.reader"),
                    environment: .sandbox))

        let error = try #require(throws: ConfigError.self) {
            try resolve(
                [
                    ["id": "a", "platform": "apns", "key_path": "p384.p8", "key_id": "ABCDE12345", "team_id": "T"],
                    ["id": "b", "platform": "fcm", "service_account_path": "account.json"],
                    ["id": "c", "platform": "fcm", "service_account_path": "missing.json", "key_path": "x"],
                    ["id": "b", "platform": "web_push", "vapid_private_key_path": "vapid.pem", "subject": "x"],
                    ["id": "d", "platform": "sms"],
                ], tenantApps: ["a", "zz"])
        }
        let text = "\(error)"
        for expected in [
            "apps[0].key_path: expected an APNs token signing key (.p8, PEM), but p384.p8",
            "apps[0].team_id: expected 10 letters and digits", "apps[0].topic: is required",
            "apps[1].service_account_path: account.json: not a service account key file",
            "apps[2].key_path: unknown key", "apps[2].service_account_path: missing.json cannot be read",
            "apps[3].id: another app already has the id \"b\"", "apps[4].platform: expected",
            "tenants[0].apps[1]: \"zz\" is not one of the apps",
        ] {
            #expect(text.contains(expected), "\(expected) in \(text)")
        }
    }
}
