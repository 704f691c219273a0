import AsyncHTTPClient
import BelfryCore
import BelfryTestSupport
import Foundation
import NIOConcurrencyHelpers
import NIOPosix
import SQLKit
import Testing
import Vapor
import VaporTesting

@testable import BelfryServer

/// What one user's devices may do to the server and to everyone else: a cap per user, push
/// endpoints on the public internet only, no taking over another user's device, and a tarpit
/// that holds only its own deliveries.
@Suite("Devices: a cap per user, public push endpoints, no takeover, a tarpit that stalls no one else")
struct DeviceAbuseTests {
    static func webPush(
        _ endpoint: String, keys: (p256dh: String, auth: String) = P256Keys.subscriber()
    )
        -> DeviceRegistration
    {
        DeviceRegistration(
            platform: .webPush,
            subscription: .init(endpoint: endpoint, keys: .init(p256dh: keys.p256dh, auth: keys.auth)))
    }

    @Test(
        "a user registers at most the configured number of devices, and the error names it",
        arguments: TestDatabase.allCases)
    func cap(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let mallory = try await app.userToken("mallory")
            var first: DeviceRecord?
            let firstKeys = P256Keys.subscriber()
            for index in 0..<20 {
                let registered = try await app.send(
                    .POST, "/v1/me/devices", bearer: mallory,
                    json: Self.webPush("https://push.example.net/send/\(index)", keys: firstKeys))
                #expect(registered.status == .created)
                if index == 0 { first = try registered.decode(DeviceRecord.self) }
            }
            let refused = try await app.send(
                .POST, "/v1/me/devices", bearer: mallory, json: Self.webPush("https://push.example.net/send/20"))
            #expect(refused.status == .unprocessableEntity)
            #expect(refused.errorCode == "device_limit_reached")
            #expect(refused.errorMessage?.contains("at most 20 devices") == true)
            #expect(
                try await app.send(.GET, "/v1/me/devices", bearer: mallory).decode(DeviceList.self).devices.count == 20)

            // Updating one of the twenty is no new device; removing one makes room.
            let device = try #require(first)
            let again = try await app.send(
                .POST, "/v1/me/devices", bearer: mallory,
                json: Self.webPush(device.endpoint ?? "", keys: firstKeys))
            #expect(again.status == .ok, "\(again.body.string)")
            #expect(try await app.send(.DELETE, "/v1/me/devices/\(device.id)", bearer: mallory).status == .noContent)
            #expect(
                try await app.send(
                    .POST, "/v1/me/devices", bearer: mallory, json: Self.webPush("https://push.example.net/send/20")
                ).status == .created)
            // Others are not affected.
            let ada = try await app.userToken("ada")
            #expect(
                try await app.send(
                    .POST, "/v1/me/devices", bearer: ada, json: Self.webPush("https://push.example.net/a")
                )
                .status == .created)
        }
        try await withBelfry(.sqlite) { settings in
            settings.maxDevicesPerUser = 2
        } _: { app in
            let ada = try await app.userToken("ada")
            for index in 0..<2 {
                _ = try await app.send(
                    .POST, "/v1/me/devices", bearer: ada, json: Self.webPush("https://p.example.net/\(index)"))
            }
            let refused = try await app.send(
                .POST, "/v1/me/devices", bearer: ada, json: Self.webPush("https://p.example.net/2"))
            #expect(refused.errorMessage?.contains("at most 2 devices") == true)
        }
    }

    static let refusedEndpoints = [
        "https://127.0.0.1:8443/push", "https://localhost/push", "https://[::1]/push", "https://0x7f000001/push",
        "https://2130706433/push", "https://127.1/push", "https://0177.0.0.1/push", "https://169.254.169.254/latest",
        "https://10.0.0.7/push", "https://192.168.1.1/push", "https://172.16.0.1/push", "https://100.64.0.1/push",
        "https://0.0.0.0/push", "https://[::ffff:127.0.0.1]/push", "https://[::ffff:7f00:1]/push",
        "https://[fe80::1]/push", "https://[fd00::1]/push", "https://user:pw@push.example.net/push",
        "https://user@push.example.net/push", "https://push.localhost/push", "https://printer.local/push",
        "http://127.0.0.1:9/push", "http://push.example.net/push", "ftp://push.example.net/push", "https:///push",
    ]

    @Test("push endpoints are https to a public host: every private or disguised address form is refused")
    func endpointForms() async throws {
        try await withBelfry(.sqlite) { app in
            let ada = try await app.userToken("ada")
            for endpoint in Self.refusedEndpoints {
                let response = try await app.send(.POST, "/v1/me/devices", bearer: ada, json: Self.webPush(endpoint))
                #expect(response.status == .unprocessableEntity, "\(endpoint)")
                #expect(response.errorMessage?.contains("subscription.endpoint") == true, "\(endpoint)")
            }
            #expect(try await app.send(.GET, "/v1/me/devices", bearer: ada).decode(DeviceList.self).devices.isEmpty)
            for endpoint in [
                "https://fcm.googleapis.com/fcm/send/abc", "HTTPS://updates.push.services.mozilla.com/wpush/v2/x",
                "https://web.push.apple.com:443/QGk", "https://93.184.216.34/push", "https://[2606:4700::1111]/push",
            ] {
                let response = try await app.send(.POST, "/v1/me/devices", bearer: ada, json: Self.webPush(endpoint))
                #expect(response.status == .created, "\(endpoint): \(response.body.string)")
            }
        }
        // Tests may allow loopback, as an IP address only.
        try await withBelfry(.sqlite) { settings in
            settings.webPushAllowsLoopback = true
        } _: { app in
            let ada = try await app.userToken("ada")
            for (endpoint, status) in [
                ("https://127.0.0.1:8443/push", HTTPStatus.created), ("http://127.0.0.1:9/push", .created),
                ("http://[::1]:9/push", .created), ("https://localhost/push", .unprocessableEntity),
                ("https://10.0.0.7/push", .unprocessableEntity),
            ] {
                let response = try await app.send(.POST, "/v1/me/devices", bearer: ada, json: Self.webPush(endpoint))
                #expect(response.status == status, "\(endpoint)")
            }
        }
    }

    @Test("delivery resolves a push service's name and connects only to a checked public address, pinned")
    func pinnedResolution() async throws {
        let answers = NIOLockedValueBox<[String: [String]]>([
            "127.attacker.example": ["127.0.0.1"], "split.example": ["93.184.216.34", "10.1.2.3"],
            "push.example.net": ["93.184.216.34"], "metadata.example": ["169.254.169.254"],
            "mapped.example": ["::ffff:10.0.0.1"],
        ])
        let lookups = NIOLockedValueBox(0)
        let resolver = HostResolver { host in
            lookups.withLockedValue { $0 += 1 }
            guard let texts = answers.withLockedValue({ $0[host] }) else {
                throw HostResolver.Failure(description: "\(host) does not resolve")
            }
            return texts.compactMap(IPAddress.init)
        }
        let time = NIOLockedValueBox(Date(timeIntervalSince1970: 1_800_000_000))
        let group = MultiThreadedEventLoopGroup.singleton
        let shared = try HTTPClient.outbound(eventLoopGroup: group, extraCertificatesPEM: nil)
        let clients = PinnedClients(
            shared: shared, allowingLoopback: true, resolver: resolver, now: { time.withLockedValue { $0 } }
        ) { dnsOverride in
            try HTTPClient.outbound(eventLoopGroup: group, extraCertificatesPEM: nil, dnsOverride: dnsOverride)
        }
        func refusal(_ url: String) async -> PinnedClients.Refusal? {
            do {
                _ = try await clients.client(for: URL(string: url)!)
                return nil
            } catch {
                return error
            }
        }
        // A name never counts as loopback, even where tests allow loopback addresses.
        for host in ["127.attacker.example", "split.example", "metadata.example", "mapped.example"] {
            guard case .notPublic(let refusedHost, _) = await refusal("https://\(host)/push") else {
                Issue.record("\(host) was not refused")
                continue
            }
            #expect(refusedHost == host)
            #expect(clients.pinnedAddress(of: host) == nil)
        }
        guard case .notPublic = await refusal("https://169.254.169.254/x") else {
            Issue.record("an address literal was not checked")
            return
        }
        guard case .unresolved = await refusal("https://nowhere.example/push") else {
            Issue.record("an unresolvable name was not refused")
            return
        }

        let before = lookups.withLockedValue { $0 }
        #expect(await refusal("https://push.example.net/push/1") == nil)
        #expect(clients.pinnedAddress(of: "push.example.net")?.text == "93.184.216.34")
        #expect(await refusal("https://push.example.net/push/2") == nil)
        #expect(lookups.withLockedValue { $0 } == before + 1, "resolved once, then the pinned client is reused")
        // Later the name moves: resolved again after the recheck, and pinned to the new address;
        // had it moved to a private one, nothing would connect there.
        answers.withLockedValue { $0["push.example.net"] = ["93.184.216.35"] }
        time.withLockedValue { $0 += PinnedClients.recheck + 1 }
        #expect(await refusal("https://push.example.net/push/3") == nil)
        #expect(clients.pinnedAddress(of: "push.example.net")?.text == "93.184.216.35")
        answers.withLockedValue { $0["push.example.net"] = ["127.0.0.1"] }
        time.withLockedValue { $0 += PinnedClients.recheck + 1 }
        guard case .notPublic = await refusal("https://push.example.net/push/4") else {
            Issue.record("a name that moved to loopback was not refused")
            return
        }
        await clients.shutdown()
        try await shared.shutdown()
    }

    @Test(
        "another user's APNs token moves as a new device; a Web Push subscription only with its keys",
        arguments: TestDatabase.allCases)
    func takeover(database: TestDatabase) async throws {
        try await withBelfry(database) { settings in
            settings.webPushAllowsLoopback = true
        } _: { app in
            let alice = try await app.userToken("alice")
            let mallory = try await app.userToken("mallory")
            let keys = P256Keys.subscriber()
            let endpoint = "https://push.example.net/send/alice-laptop"
            let hers = try await app.send(
                .POST, "/v1/me/devices", bearer: alice, json: Self.webPush(endpoint, keys: keys))
            #expect(hers.status == .created)

            // Mallory knows the endpoint, not the browser's keys.
            let stolen = try await app.send(.POST, "/v1/me/devices", bearer: mallory, json: Self.webPush(endpoint))
            #expect(stolen.status == .unprocessableEntity)
            #expect(stolen.errorMessage?.contains("other keys") == true)
            let aliceDevices = try await app.send(.GET, "/v1/me/devices", bearer: alice).decode(DeviceList.self)
            #expect(aliceDevices.devices.map(\.endpoint) == [endpoint])
            #expect(try await app.send(.GET, "/v1/me/devices", bearer: mallory).decode(DeviceList.self).devices.isEmpty)

            // An APNs token cannot prove its phone: it moves, as a new device, and Alice's is gone,
            // so nothing queued for her reaches the phone's new user.
            let token = String(repeating: "ab", count: 32)
            let apns = ["platform": "apns", "token": token, "environment": "sandbox", "authorization": "authorized"]
            let phone = try await app.send(.POST, "/v1/me/devices", bearer: alice, json: apns).decode(DeviceRecord.self)
            let moved = try await app.send(.POST, "/v1/me/devices", bearer: mallory, json: apns)
            #expect(moved.status == .created)
            #expect(try moved.decode(DeviceRecord.self).id != phone.id)
            let left = try await app.send(.GET, "/v1/me/devices", bearer: alice).decode(DeviceList.self).devices
            #expect(left.map(\.id) == [try hers.decode(DeviceRecord.self).id])
        }
    }

    @Test("twenty devices at a tarpit hold only their own deliveries: another user's webhook goes out meanwhile")
    func tarpit() async throws {
        let tarpit = try await SilentServer()
        defer { tarpit.stop() }
        let port = tarpit.port
        let receiver = try await WebhookReceiver(answers: "200")
        defer { receiver.stop() }
        try await withBelfry(.sqlite, webhook: receiver.webhook) { settings in
            settings.vapidSubject = "mailto:ops@belfry.example"
            settings.webPushAllowsLoopback = true
        } _: { app in
            let mallory = try await app.userToken("mallory")
            for index in 0..<20 {
                let registered = try await app.send(
                    .POST, "/v1/me/devices", bearer: mallory,
                    json: Self.webPush("https://127.0.0.1:\(port)/push/\(index)"))
                #expect(registered.status == .created)
            }
            let id = try await DeliveryQueueTests.trigger(app, to: ["mallory", "alice"])
            let queue = try #require(app.deliveryQueue)
            let started = ContinuousClock.now
            let finished = NIOLockedValueBox(false)
            let run = Task {
                defer { finished.withLockedValue { $0 = true } }
                return try await queue.runOnce(limit: 64)
            }
            var webhookAfter: Duration?
            var pushStillOut = false
            while webhookAfter == nil, ContinuousClock.now - started < .seconds(30) {
                let users = try receiver.entries().compactMap { entry -> String? in
                    guard case .object(let body) = entry.body, case .object(let user)? = body["user"],
                        case .string(let id)? = user["id"]
                    else { return nil }
                    return id
                }
                if users.contains("alice") {
                    webhookAfter = ContinuousClock.now - started
                    pushStillOut = !finished.withLockedValue { $0 }
                }
                try await Task.sleep(for: .milliseconds(20))
            }
            // Alice's webhook arrived while Mallory's push requests were still out, unanswered:
            // the attempts of that run end only when the last times out.
            #expect(webhookAfter != nil, "alice's webhook arrived")
            #expect(pushStillOut, "mallory's push requests were still out when alice's webhook left")
            _ = try await run.value
            #expect(tarpit.accepted >= 1, "the push requests went to the tarpit")
            let allAfter = ContinuousClock.now - started
            print(
                "tarpit: alice's webhook after \(webhookAfter ?? .zero); 20 push attempts in the tarpit ended after \(allAfter)"
            )
            let status = try await APNsChannelTests.status(app, id)
            #expect(status.deliveries["webhook"] == ["sent": 2])
            #expect(status.deliveries["web_push"] == ["queued": 20], "each timed out and waits for its retry")
        }
    }
}
