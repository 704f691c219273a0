import BelfryCore
import BelfryTestSupport
import Foundation
import Testing

@testable import BelfryClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The push settings screen against a real `belfry serve` that sends to the APNs test server
/// (TLS and HTTP/2), with the OS permission and device token faked.
@MainActor
@Suite("BelfryClient push settings against a live server", .serialized)
struct PushEndToEndTests {
    static let tenants = ["enwiki", "dewiki", "wikidata", "commons"]
    static let topic = "org.belfry.reader"

    /// `belfry serve` set up to send to `apns`: its key, its URL and its certificate authority.
    static func withPushServer(_ body: (EndToEndTests.Server, APNsTestServer) async throws -> Void) async throws {
        let apns = try await APNsTestServer()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("belfry-push-\(UUID())")
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let key = directory.appendingPathComponent("AuthKey.p8")
            let authority = directory.appendingPathComponent("ca.pem")
            try Data(apns.keyPEM.utf8).write(to: key)
            try Data(apns.authority.certificatePEM.utf8).write(to: authority)
            try await EndToEndTests.withServer(environment: [
                "BELFRY_APNS_KEY_PATH": key.path, "BELFRY_APNS_KEY_ID": apns.keyID, "BELFRY_APNS_TEAM_ID": apns.teamID,
                "BELFRY_APNS_TOPIC": topic, "BELFRY_APNS_URL": apns.url, "BELFRY_EXTRA_CA_FILE": authority.path,
            ]) { server in
                try await body(server, apns)
            }
        } catch {
            await apns.shutdown()
            try? FileManager.default.removeItem(at: directory)
            throw error
        }
        await apns.shutdown()
        try? FileManager.default.removeItem(at: directory)
    }

    /// What the server lists as `user`'s devices, asked with a token of theirs.
    static func devices(_ server: EndToEndTests.Server, of user: String) async throws -> [DeviceRecord] {
        let grant = try BelfryAPI.decoder.decode(
            TokenGrant.self, from: try await server.admin("POST", "v1/users/\(user)/tokens"))
        var request = URLRequest(url: server.base.appendingPathComponent("v1/me/devices"))
        request.setValue("Bearer \(grant.token)", forHTTPHeaderField: "Authorization")
        let (data, _) = try await URLSession.shared.data(for: request)
        return try BelfryAPI.decoder.decode(DeviceList.self, from: data).devices
    }

    static func event(_ category: String, title: String) -> String {
        #"{"category": "\#(category)", "recipients": ["ada"], "content": {"title": "\#(title)", "body": "Open to read it"}}"#
    }

    @Test("enable push → device registered → a type toggled on all four sites → an event reaches APNs shaped right")
    func pushSettingsEndToEnd() async throws {
        try await Self.withPushServer { server, apns in
            let belfry = try await server.client(for: "ada", tenants: Self.tenants)
            let authorizer = FakeAuthorizer()
            let tokenSource = FakeTokenSource(tokenOnRegister: nil)
            let registration = PushRegistration(
                client: belfry, authorizer: authorizer, tokenSource: tokenSource,
                options: PushRegistrationOptions(environment: .sandbox, locale: "en-GB", appVersion: "7.1"))
            let model = PushSettingsModel(
                client: belfry, registration: registration, sync: TenantPreferenceSync(client: belfry),
                pushChannel: "ios_push", openSystemSettings: {})
            await model.signIn(user: "ada", tenants: Self.tenants)
            #expect(model.rows.map(\.kind) == [.primaryToggle, .education])

            // The token comes a moment after permission, as on many devices.
            let enabling = Task { await model.setPushEnabled(true) }
            try await Eventually.until("waiting for the token") { registration.phase == .waitingForToken(attempt: 1) }
            #expect(authorizer.requests == [[.alert, .sound, .badge]])
            tokenSource.send(FakeTokenSource.token(0xAB))
            await enabling.value
            #expect(registration.phase == .on)
            #expect(model.alert == nil)

            let devices = try await Self.devices(server, of: "ada")
            let device = try #require(devices.first)
            #expect(devices.count == 1)
            #expect(device.token == FakeTokenSource.token(0xAB).hexToken)
            #expect(device.id == registration.record?.deviceID)
            #expect(device.authorization == .authorized && device.environment == .sandbox)
            #expect(device.locale == "en-GB")
            let typeRows = model.rows.compactMap { row -> String? in
                if case .type(let category) = row.kind { category } else { nil }
            }
            #expect(typeRows.contains("mention") && typeRows.contains("edit-user-talk"))
            #expect(!typeRows.contains("emailuser"), "a category without push is not a push type")

            await model.setType("mention", isOn: false)
            #expect(model.alert == nil)
            for tenant in Self.tenants {
                let stored = try await server.preferences(of: "ada", tenant: tenant)
                #expect(
                    stored.category("mention")?.channels?.first { $0.channel == "ios_push" }?.preference == .optOut,
                    "\(tenant)")
                #expect(stored.category("mention")?.preference == .optIn, "only push is off, on \(tenant)")
            }

            // A mention no longer pushes; a talk page message does.
            try await server.admin("POST", "v1/events", Self.event("mention", title: "You were mentioned"))
            try await server.admin("POST", "v1/events", Self.event("edit-user-talk", title: "New message"))
            try await EndToEndTests.eventually("the push") { !apns.received.isEmpty }
            let push = try #require(apns.received.first)
            #expect(push.status == 200)
            #expect(push.deviceToken == device.token)
            #expect(push.headers["apns-topic"] == Self.topic)
            #expect(push.headers["apns-push-type"] == "alert")
            let alert = push.aps["alert"] as? [String: Any]
            #expect(alert?["title"] as? String == "New message")
            #expect(alert?["body"] as? String == "Open to read it")
            #expect(push.aps["category"] as? String == "edit-user-talk")
            #expect(push.aps["thread-id"] as? String == "talk")
            #expect(push.aps["badge"] as? Int == 2, "both notifications are unread in the inbox")
            #expect(push.aps["sound"] != nil)

            // The mention went to the inbox only.
            try await EndToEndTests.eventually("both in the inbox") {
                try await belfry.inbox.list().notifications.count == 2
            }
            #expect(apns.received.count == 1)
            #expect(!apns.received.contains { $0.aps["category"] as? String == "mention" })
        }
    }

    @Test("belfry-device: the simulated app turns push on, changes a type on every site, and signs out")
    func simulator() async throws {
        try await EndToEndTests.withServer { server in
            let executable = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
                .appendingPathComponent("belfry-device").path
            let state = FileManager.default.temporaryDirectory.appendingPathComponent("belfry-device-\(UUID())")
            defer { try? FileManager.default.removeItem(at: state) }
            let arguments = [
                "--server", server.base.absoluteString, "--api-key", EndToEndTests.key, "--user", "ada",
                "--token-delay", "0.2", "--set", "mention=off", "--state", state.path,
            ]
            let output = try await Task.detached { try TestProcess.run(executable, arguments) }.value
            #expect(output.contains("after turning push on — phase: on"), "\(output)")
            #expect(output.contains("[off] Mention"))
            let device = try #require(try await Self.devices(server, of: "ada").first)
            for tenant in Self.tenants {
                let stored = try await server.preferences(of: "ada", tenant: tenant)
                #expect(stored.category("mention")?.channels?.first { $0.channel == "ios_push" }?.preference == .optOut)
            }

            // A second run is a relaunch: already on, nothing asked; then it signs out.
            let relaunch = try await Task.detached { try TestProcess.run(executable, arguments + ["--logout"]) }.value
            #expect(relaunch.contains("signed in as ada — phase: on"), "\(relaunch)")
            #expect(!relaunch.contains("Allow notifications?"))
            #expect(relaunch.contains("the device was removed behind the scenes"))
            #expect(try await Self.devices(server, of: "ada").allSatisfy { $0.id != device.id })
        }
    }

    @Test("belfry-device shows issue 37's flows: an answered action, a background push, a read elsewhere, a reminder")
    func deliveredFlowsOnTheSimulator() async throws {
        try await EndToEndTests.withServer { server in
            let executable = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
                .appendingPathComponent("belfry-device").path
            let state = FileManager.default.temporaryDirectory.appendingPathComponent("belfry-device-\(UUID())")
            defer { try? FileManager.default.removeItem(at: state) }
            let common = [
                "--server", server.base.absoluteString, "--api-key", EndToEndTests.key, "--token-delay", "0.2",
                "--state", state.path, "--trigger", "edit-user-talk",
            ]
            let first = try await Task.detached {
                try TestProcess.run(
                    executable,
                    common + ["--user", "ada", "--answer", "mark-read", "--background-push", "--remind", "60"])
            }.value
            #expect(first.contains("route: actionAnswered(actionID: \"mark-read\") → nothing opens"), "\(first)")
            #expect(first.contains("the server has it read: true"))
            #expect(first.contains("fetch result: newData; badge 0"))
            #expect(first.contains("fired 3 times in 180 s; still pending: [\"reading-reminder\"]"))
            #expect(first.contains("openTarget(https://en.wikipedia.org/wiki/Special:ReadingLists)"))
            let second = try await Task.detached {
                try TestProcess.run(executable, common + ["--user", "bob", "--read-elsewhere"])
            }.value
            #expect(second.contains("removed from Notification Center: push-"), "\(second)")
            #expect(second.contains("Notification Center now lists 0; badge 0"))

            // Categories registered with the system; the toast rule; a token that changed.
            let third = try await Task.detached {
                try TestProcess.run(executable, common + ["--user", "ada", "--categories", "--foreground", "article"])
            }.value
            #expect(third.contains("edit-user-talk: Reply (opens the app), Mark as read (background)"), "\(third)")
            #expect(third.contains("shown as: inAppToast"))
            let before = try #require(try await Self.devices(server, of: "ada").first)
            let fourth = try await Task.detached {
                try TestProcess.run(executable, common + ["--user", "ada", "--new-token", "--foreground", "bell"])
            }.value
            #expect(fourth.contains("replaced on the server"), "\(fourth)")
            #expect(fourth.contains("shown as: bellBadge"))
            let after = try await Self.devices(server, of: "ada")
            #expect(after.count == 1 && after.first?.token != before.token, "the new token replaced the old")
        }
    }

    @Test("belfry-device --platform fcm: an Android phone registers its FCM token, turns a type off, and gets the rest")
    func androidSimulator() async throws {
        let fcm = try await FCMTestServer()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("belfry-fcm-\(UUID())")
        defer {
            try? FileManager.default.removeItem(at: directory)
            Task { await fcm.shutdown() }
        }
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let account = directory.appendingPathComponent("service-account.json")
        let authority = directory.appendingPathComponent("ca.pem")
        try Data(fcm.serviceAccountJSON.utf8).write(to: account)
        try Data(fcm.authority.certificatePEM.utf8).write(to: authority)
        try await EndToEndTests.withServer(environment: [
            "BELFRY_FCM_SERVICE_ACCOUNT_PATH": account.path, "BELFRY_FCM_URL": fcm.url,
            "BELFRY_EXTRA_CA_FILE": authority.path,
        ]) { server in
            let executable = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
                .appendingPathComponent("belfry-device").path
            let arguments = [
                "--server", server.base.absoluteString, "--api-key", EndToEndTests.key, "--user", "ada",
                "--platform", "fcm", "--token-delay", "0.2", "--set", "mention=off", "--trigger", "mention",
                "--trigger", "edit-user-talk", "--state", directory.appendingPathComponent("state").path,
            ]
            let output = try await Task.detached { try TestProcess.run(executable, arguments) }.value
            #expect(output.contains("after turning push on — phase: on"), "\(output)")
            #expect(output.contains("[off] Mention"))
            let device = try #require(try await Self.devices(server, of: "ada").first)
            #expect(device.platform == .fcm)
            #expect(device.token?.hasPrefix("belfry-device-ada:APA91b") == true)
            for tenant in Self.tenants {
                let stored = try await server.preferences(of: "ada", tenant: tenant)
                #expect(
                    stored.category("mention")?.channels?.first { $0.channel == "android_push" }?.preference == .optOut)
            }
            for _ in 0..<100 where fcm.received.isEmpty { try await Task.sleep(for: .milliseconds(50)) }
            try await Task.sleep(for: .milliseconds(300))
            #expect(fcm.received.map(\.token) == [device.token ?? ""], "the talk message only, not the mention")
            #expect((fcm.received.first?.message["data"] as? [String: String])?["category"] == "edit-user-talk")
        }
    }
}
