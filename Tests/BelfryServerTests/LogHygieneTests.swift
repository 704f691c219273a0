import BelfryCore
import BelfryTestServers
import BelfryTestSupport
import Crypto
import Foundation
import Testing

@testable import BelfryServer

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Everything a real `belfry serve` logged, at its most talkative level, while it used every
/// secret it has: none of them may be in it.
@Suite("Log hygiene", .serialized)
struct LogHygieneTests {
    @Test(
        "a server run at trace level logs none of its secrets, keys, tokens or push addresses, as text or JSON",
        arguments: LogFormat.allCases)
    func noSecretsLogged(format: LogFormat) async throws {
        let apns = try await APNsTestServer(records: false)
        let webPush = try await WebPushTestEndpoint(records: false)
        let fcm = try await FCMTestServer()
        let receiver = try await WebhookReceiver(answers: "200")
        let mail = try await SMTPTestServer()
        let directory = try CommandLineTests.temporaryDirectory()
        defer {
            receiver.stop()
            mail.stop()
            try? FileManager.default.removeItem(at: directory)
        }
        let apiKey = "log-test-api-key-\(UUID().uuidString)"
        let tokenSecret = "log-test-token-secret-\(UUID().uuidString)"
        let vapid = P256.Signing.PrivateKey()
        let files = [
            ("apns.p8", apns.keyPEM), ("vapid.pem", vapid.pemRepresentation),
            ("fcm-service-account.json", fcm.serviceAccountJSON),
            (
                "ca.pem",
                [apns.authority, webPush.authority, mail.authority, fcm.authority].map(\.certificatePEM)
                    .joined(separator: "\n")
            ),
        ]
        for (name, text) in files { try Data(text.utf8).write(to: directory.appendingPathComponent(name)) }
        let environment = [
            "BELFRY_API_KEY": apiKey, "BELFRY_TOKEN_SECRET": tokenSecret, "BELFRY_LOG_LEVEL": "trace",
            "BELFRY_LOG_FORMAT": format.rawValue,
            "DATABASE_URL": "", "BELFRY_CONFIG": "",
            "BELFRY_WEBHOOK_URL": receiver.url, "BELFRY_WEBHOOK_SECRET": WebhookReceiver.secret,
            "BELFRY_APNS_KEY_PATH": directory.appendingPathComponent("apns.p8").path,
            "BELFRY_APNS_KEY_ID": apns.keyID, "BELFRY_APNS_TEAM_ID": apns.teamID,
            "BELFRY_APNS_TOPIC": "org.example.reader", "BELFRY_APNS_URL": apns.url,
            "BELFRY_FCM_SERVICE_ACCOUNT_PATH": directory.appendingPathComponent("fcm-service-account.json").path,
            "BELFRY_FCM_URL": fcm.url,
            "BELFRY_EXTRA_CA_FILE": directory.appendingPathComponent("ca.pem").path,
            "BELFRY_VAPID_SUBJECT": "mailto:ops@example.org", "BELFRY_WEBPUSH_ALLOW_HTTP_LOOPBACK": "true",
            "BELFRY_VAPID_PRIVATE_KEY_PATH": directory.appendingPathComponent("vapid.pem").path,
            "BELFRY_SMTP_URL": "smtp://\(SMTPTestServer.user):\(SMTPTestServer.password)@localhost:\(mail.port)",
            "BELFRY_EMAIL_FROM": "Belfry <notify@example.org>", "BELFRY_PUBLIC_URL": "https://notify.example.org",
        ]
        let database = directory.appendingPathComponent("belfry.sqlite").path
        let started = try await BelfryServeProcess.start(database: database, environment: environment)
        let (server, base) = (started.process, started.base)
        var log = ""
        var userToken = ""
        var emailLinks: [String] = []
        let deviceToken = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        let subscriber = webPush.subscribe("ada")
        do {
            func call(
                _ method: String, _ path: String, bearer: String? = apiKey, json: String? = nil
            ) async throws
                -> (status: Int, body: String)
            {
                try await CommandLineTests.request(method, base + path, bearer: bearer, json: json)
            }

            #expect(try await call("PUT", "/v1/users/ada", json: #"{"email": "ada@example.org"}"#).status == 201)
            let minted = try await call("POST", "/v1/users/ada/tokens")
            userToken = try JSONDecoder.iso8601.decode(TokenGrant.self, from: Data(minted.body.utf8)).token
            let apnsDevice = try String(
                decoding: JSONEncoder().encode(DevicesAPITests.registration(deviceToken)), as: UTF8.self)
            #expect(try await call("POST", "/v1/me/devices", bearer: userToken, json: apnsDevice).status == 201)
            let subscription = try String(
                decoding: JSONEncoder().encode(
                    DeviceRegistration(
                        platform: .webPush,
                        subscription: .init(
                            endpoint: subscriber.endpoint,
                            keys: .init(p256dh: subscriber.p256dh, auth: subscriber.auth)))), as: UTF8.self)
            #expect(try await call("POST", "/v1/me/devices", bearer: userToken, json: subscription).status == 201)
            let android = #"{"platform": "fcm", "token": "\#(FCMChannelTests.token)"}"#
            #expect(try await call("POST", "/v1/me/devices", bearer: userToken, json: android).status == 201)

            let event = #"{"category": "login-fail", "recipients": ["ada"], "content": {"title": "T", "body": "B"}}"#
            let accepted = try await call("POST", "/v1/events", json: event)
            let id = try JSONDecoder().decode(EventAccepted.self, from: Data(accepted.body.utf8)).eventID
            var status: EventStatus?
            let deadline = Date().addingTimeInterval(30)
            while Date() < deadline {
                let answer = try await call("GET", "/v1/events/\(id)")
                status = try JSONDecoder.iso8601.decode(EventStatus.self, from: Data(answer.body.utf8))
                let pending = status?.deliveries.values.contains { $0["queued"] != nil || $0["running"] != nil }
                if status?.state == .done, pending == false { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(status?.deliveries["ios_push"] == ["sent": 1], "\(status?.deliveries ?? [:])")
            #expect(status?.deliveries["web_push"] == ["sent": 1], "\(status?.lastErrors ?? [:])")
            #expect(status?.deliveries["android_push"] == ["sent": 1], "\(status?.lastErrors ?? [:])")
            #expect(status?.deliveries["webhook"] == ["sent": 1])
            #expect(status?.deliveries["email"] == ["sent": 1], "\(status?.lastErrors ?? [:])")
            // An email Ada may turn off carries an unsubscribe link; she opts in to mention emails.
            let optIn = #"{"preference": "opt_in"}"#
            _ = try await call(
                "PATCH", "/v1/me/preferences/categories/mention/channels/email?scope=defaults", bearer: userToken,
                json: optIn)
            let mention = #"{"category": "mention", "recipients": ["ada"], "content": {"title": "M", "body": "B"}}"#
            _ = try await call("POST", "/v1/events", json: mention)
            var emails: [SMTPTestServer.Received] = []
            for _ in 0..<100 where emails.count < 2 {
                try await Task.sleep(for: .milliseconds(100))
                emails = try mail.received()
            }
            // The links an email carries, followed as a mail client and a person would.
            let sent = try #require(emails.first { $0.headers["List-Unsubscribe"] != nil })
            let unsubscribe = try #require(sent.headers["List-Unsubscribe"]?.dropFirst().dropLast())
            let unsubscribePath = String(unsubscribe.dropFirst("https://notify.example.org".count))
            _ = try await call("GET", unsubscribePath, bearer: nil)
            let preferencesLink = try #require(
                sent.part("text/plain")?.content.firstMatch(of: /\/preferences\?link=[^\s&]+/)?.output)
            _ = try await call("GET", String(preferencesLink), bearer: nil)
            emailLinks = [
                String(unsubscribePath.split(separator: "/").last ?? ""), String(preferencesLink.dropFirst(18)),
            ]

            // The token in the places a client puts it: a header, a stream's query, a sign-in link.
            _ = try await call("GET", "/v1/me/notifications", bearer: userToken)
            _ = try await call("GET", "/preferences?token=\(userToken)", bearer: nil)
            _ = try await call("GET", "/v1/me/notifications", bearer: userToken + "x")
            _ = try await call("GET", "/v1/events/\(id)", bearer: apiKey + "x")
            var stream = URLRequest(url: try #require(URL(string: "\(base)/v1/me/stream?token=\(userToken)")))
            stream.timeoutInterval = 2
            _ = try? await URLSession.shared.data(for: stream)

            log = server.output
            server.terminate()
        } catch {
            server.terminate()
            throw error
        }
        await apns.shutdown()
        await webPush.shutdown()
        let accessTokens = Set(fcm.received.compactMap { $0.headers["authorization"]?.split(separator: " ").last })
        await fcm.shutdown()

        #expect(log.contains("event accepted"), "the run did log: \(log.count) characters")
        if format == .json {
            // Standard error is JSON, a line an object; standard output has the start-up banner.
            let objects = log.split(separator: "\n").filter { $0.hasPrefix("{") }.compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }
            #expect(objects.count == log.split(separator: "\n").filter { $0.hasPrefix("{") }.count, "every line parses")
            #expect(objects.count > 50)
            #expect(objects.allSatisfy { $0["level"] is String && $0["message"] is String })
            #expect(objects.allSatisfy { ($0["time"] as? String)?.hasSuffix("Z") == true }, "ISO 8601 in UTC")
            #expect(objects.contains { $0["request_id"] is String }, "request loggers carry their request id")
            #expect(
                objects.contains {
                    ($0["metadata"] as? [String: Any])?.keys.contains { $0.hasPrefix("belfry.") } == true
                },
                "Belfry's namespaced metadata")
            #expect(!log.contains("[ INFO ]") && !log.contains("[ TRACE ]"), "no text lines")
        }
        let pemLines = { (pem: String) in
            pem.split(separator: "\n").filter { !$0.hasPrefix("-----") && $0.count >= 16 }.map(String.init)
        }
        var secrets: [(String, String)] = [
            ("the API key", apiKey), ("the token secret", tokenSecret), ("the webhook secret", WebhookReceiver.secret),
            ("the device token", deviceToken), ("the Web Push endpoint", subscriber.endpoint),
            ("the subscription's p256dh key", subscriber.p256dh), ("the subscription's auth secret", subscriber.auth),
        ]
        // A user token's signature is what makes it a credential.
        secrets.append(("a user token", String(userToken.split(separator: ".").last ?? "")))
        // Signed links are credentials too: their signatures must not be in the log.
        secrets += emailLinks.map { ("an email link", String($0.split(separator: ".").last ?? "")) }
        #expect(emailLinks.count == 2)
        secrets.append(("the SMTP password", SMTPTestServer.password))
        secrets.append(
            (
                "the SMTP AUTH PLAIN token",
                Data("\0\(SMTPTestServer.user)\0\(SMTPTestServer.password)".utf8).base64EncodedString()
            ))
        secrets += pemLines(apns.keyPEM).map { ("the APNs key", $0) }
        secrets += pemLines(vapid.pemRepresentation).map { ("the VAPID key", $0) }
        let account = try #require(
            try JSONSerialization.jsonObject(with: Data(fcm.serviceAccountJSON.utf8)) as? [String: String])
        secrets += pemLines(account["private_key"] ?? "").map { ("the FCM service account's key", $0) }
        secrets.append(("the FCM registration token", FCMChannelTests.token))
        #expect(!accessTokens.isEmpty)
        secrets += accessTokens.map { ("an FCM access token", String($0)) }
        for (name, secret) in secrets {
            #expect(!log.contains(secret), "\(name) is in the log")
        }
        #expect(
            log.firstMatch(of: /eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{20,}/) == nil,
            "no JWT (user token, APNs provider token, VAPID token or FCM assertion) is in the log")
    }

    @Test(
        "redaction blanks credentials, token and link values, CSRF tokens, cookies, JWTs and signed links, and leaves the rest"
    )
    func redaction() {
        let jwt = "eyJ0eXAiOiJKV1QifQ.eyJzdWIiOiJhZGEifQ.c2lnbmF0dXJl"
        let cases = [
            ("headers: Authorization: Bearer sk-123; Host: x", "headers: Authorization: Bearer [redacted]; Host: x"),
            ("authorization: bearer \(jwt)", "authorization: bearer [redacted]"),
            ("uri: \"/v1/me/stream?token=\(jwt)&x=1\"", "uri: \"/v1/me/stream?token=[redacted]&x=1\""),
            ("Authorization: vapid t=\(jwt), k=BPub", "Authorization: vapid [redacted], k=BPub"),
            ("a token \(jwt) in text", "a token [redacted] in text"),
            (
                "uri: \"/preferences?link=eyJraW5kIjoibGluayJ9.bWFj&tenant=x\"",
                "uri: \"/preferences?link=[redacted]&tenant=x\""
            ),
            ("POST /unsubscribe/eyJraW5kIjoidW5zdWJzY3JpYmUifQ.bWFjLXNpZw", "POST /unsubscribe/[redacted]"),
            ("GET /v1/events/01A2 answered 200", "GET /v1/events/01A2 answered 200"),
            (
                #"headers: ["X-CSRF-Token": "HbxvOoMzY0ujsloEjkcGPCC0", "Accept": "*/*"]"#,
                #"headers: ["X-CSRF-Token": "[redacted]", "Accept": "*/*"]"#
            ),
            ("x-csrf-token: HbxvOoMzY0ujsloEjkcGPCC0", "x-csrf-token: [redacted]"),
            (
                "Cookie: belfry_signin=Qk9iX2; belfry_session=abc.def",
                "Cookie: belfry_signin=[redacted]; belfry_session=[redacted]"
            ),
            ("body: _csrf=HbxvOoMz&op=read", "body: _csrf=[redacted]&op=read"),
        ]
        for (line, redacted) in cases {
            #expect(LogRedaction.redact(line) == redacted)
        }
    }
}
