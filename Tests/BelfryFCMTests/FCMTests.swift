import BelfryFCM
import Crypto
import CryptoExtras
import Foundation
import Testing

/// A service account key file as Firebase's console writes it, with a new RSA key.
struct TestAccount {
    let key: _RSA.Signing.PrivateKey
    let json: Data

    init(tokenURI: String = "https://oauth2.example/token", type: String = "service_account") throws {
        key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let object: [String: Any] = [
            "type": type, "project_id": "belfry-demo", "private_key_id": "key-1",
            "private_key": key.pemRepresentation, "client_email": "push@belfry-demo.iam.gserviceaccount.com",
            "token_uri": tokenURI,
        ]
        json = try JSONSerialization.data(withJSONObject: object)
    }
}

/// A clock the tests move.
final class TestClock: @unchecked Sendable {
    private let lock = NSLock()
    private var value = Date(timeIntervalSince1970: 1_800_000_000)
    var now: Date { lock.withLock { value } }
    func advance(_ seconds: TimeInterval) { lock.withLock { value += seconds } }
}

/// A token endpoint in memory: counts grants and answers what the test says.
final class TestGrants: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    var answer: (Int) -> FCMAccessTokens.GrantAnswer = { number in
        .init(status: 200, body: Data(#"{"access_token":"token-\#(number)","expires_in":3599}"#.utf8))
    }
    var forms: [String] = []
    var granted: Int { lock.withLock { count } }

    func exchange(_ request: FCMAccessTokens.GrantRequest) async throws -> FCMAccessTokens.GrantAnswer {
        let number = lock.withLock {
            count += 1
            forms.append(request.form)
            return count
        }
        try await Task.sleep(for: .milliseconds(20))
        return answer(number)
    }
}

func decodeJWTPart(_ part: Substring) -> [String: Any] {
    var text = part.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
    while text.count % 4 != 0 { text += "=" }
    return (try? JSONSerialization.jsonObject(with: Data(base64Encoded: text) ?? Data())) as? [String: Any] ?? [:]
}

@Suite("FCM core")
struct FCMTests {
    @Test("a key file that is not JSON, of another type, or without a field is refused by name")
    func serviceAccountProblems() throws {
        #expect(throws: FCMServiceAccount.Problem.self) { try FCMServiceAccount(json: Data("not json".utf8)) }
        let user = try TestAccount(type: "authorized_user")
        #expect {
            try FCMServiceAccount(json: user.json)
        } throws: { error in
            "\(error)".contains("\"authorized_user\"")
        }
        var object = try JSONSerialization.jsonObject(with: try TestAccount().json) as! [String: Any]
        object["private_key"] = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
        #expect {
            try FCMServiceAccount(json: try JSONSerialization.data(withJSONObject: object))
        } throws: { error in
            "\(error)".contains("\"private_key\" is not an RSA private key")
        }
        object["client_email"] = nil
        #expect {
            try FCMServiceAccount(json: try JSONSerialization.data(withJSONObject: object))
        } throws: { error in
            "\(error)" == "the service account has no \"client_email\""
        }
    }

    @Test("the assertion is RS256 over the account's claims, for an hour, verified with the public key")
    func assertion() throws {
        let account = try TestAccount()
        let tokens = FCMAccessTokens(
            account: try FCMServiceAccount(json: account.json), now: { Date() },
            exchange: { _ in .init(status: 500, body: Data()) })
        let issuedAt = Date(timeIntervalSince1970: 1_800_000_000)
        let jwt = try tokens.assertion(issuedAt: issuedAt)
        let parts = jwt.split(separator: ".")
        #expect(parts.count == 3)
        let header = decodeJWTPart(parts[0])
        #expect(header["alg"] as? String == "RS256")
        #expect(header["kid"] as? String == "key-1")
        let claims = decodeJWTPart(parts[1])
        #expect(claims["iss"] as? String == "push@belfry-demo.iam.gserviceaccount.com")
        #expect(claims["aud"] as? String == "https://oauth2.example/token")
        #expect(claims["scope"] as? String == "https://www.googleapis.com/auth/firebase.messaging")
        #expect((claims["iat"] as? Int) == 1_800_000_000)
        #expect((claims["exp"] as? Int) == 1_800_003_600)
        var signature = String(parts[2]).replacingOccurrences(of: "-", with: "+").replacingOccurrences(
            of: "_", with: "/")
        while signature.count % 4 != 0 { signature += "=" }
        let valid = account.key.publicKey.isValidSignature(
            _RSA.Signing.RSASignature(rawRepresentation: Data(base64Encoded: signature)!),
            for: Data("\(parts[0]).\(parts[1])".utf8), padding: .insecurePKCS1v1_5)
        #expect(valid)
        let other = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        #expect(
            !other.publicKey.isValidSignature(
                _RSA.Signing.RSASignature(rawRepresentation: Data(base64Encoded: signature)!),
                for: Data("\(parts[0]).\(parts[1])".utf8), padding: .insecurePKCS1v1_5))
    }

    @Test("many sends wait on one grant; the token is kept until five minutes before it expires")
    func oneGrantForMany() async throws {
        let clock = TestClock()
        let grants = TestGrants()
        let tokens = FCMAccessTokens(
            account: try FCMServiceAccount(json: try TestAccount().json), now: { clock.now }, exchange: grants.exchange)
        let seen = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<50 { group.addTask { try await tokens.current() } }
            return try await group.reduce(into: Set<String>()) { $0.insert($1) }
        }
        #expect(seen == ["token-1"])
        #expect(grants.granted == 1)
        #expect(
            grants.forms[0].hasPrefix("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion="))
        clock.advance(3599 - 301)
        #expect(try await tokens.current() == "token-1")
        clock.advance(2)
        #expect(try await tokens.current() == "token-2")
        // A refused token is replaced once, however many sends saw it refused.
        async let first = tokens.replace("token-2")
        async let second = tokens.replace("token-2")
        #expect(Set([try await first, try await second]) == ["token-3"])
        #expect(try await tokens.replace("token-2") == "token-3")
        #expect(grants.granted == 3)
    }

    @Test("a refused grant fails with the endpoint's reason, and is remembered for a few seconds")
    func refusedGrant() async throws {
        let clock = TestClock()
        let grants = TestGrants()
        grants.answer = { _ in
            .init(
                status: 400, body: Data(#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#.utf8)
            )
        }
        let tokens = FCMAccessTokens(
            account: try FCMServiceAccount(json: try TestAccount().json), now: { clock.now }, exchange: grants.exchange)
        await #expect {
            try await tokens.current()
        } throws: { error in
            guard let failure = error as? FCMAccessTokens.Failure, !failure.isTransient else { return false }
            return "\(failure)".contains("invalid_grant: Invalid JWT Signature.")
        }
        _ = try? await tokens.current()
        #expect(grants.granted == 1)
        clock.advance(11)
        grants.answer = { _ in .init(status: 503, body: Data()) }
        await #expect {
            try await tokens.current()
        } throws: { error in
            (error as? FCMAccessTokens.Failure)?.isTransient == true
        }
        #expect(grants.granted == 2)
    }

    @Test("a message carries the notification, Android options and Belfry's ids as strings")
    func message() throws {
        let notification = FCMNotification(
            id: UUID(uuidString: "00000000-0000-0000-0000-0000000000AA")!,
            notificationID: UUID(uuidString: "00000000-0000-0000-0000-0000000000BB")!, category: "comments",
            tenant: "de", title: "Ada \"replied\"", body: "Line\none", url: "https://example.org/a",
            imageURL: "https://example.org/i.png", data: #"{"post":7}"#, tag: "post-7", collapseKey: "post-7",
            urgent: true, ttlSeconds: 3600, batchCount: 3)
        let request = try #require(FCMPayload.request(notification, device: FCMDevice(token: "tok:1"), unread: 4))
        let object = try JSONSerialization.jsonObject(with: request.body) as! [String: Any]
        let message = object["message"] as! [String: Any]
        #expect(message["token"] as? String == "tok:1")
        #expect(
            message["notification"] as? [String: String]
                == ["title": "Ada \"replied\"", "body": "Line\none", "image": "https://example.org/i.png"])
        let android = message["android"] as! [String: Any]
        #expect(android["priority"] as? String == "HIGH")
        #expect(android["ttl"] as? String == "3600s")
        #expect(android["collapse_key"] as? String == "post-7")
        let shown = android["notification"] as! [String: Any]
        #expect(shown["channel_id"] as? String == "comments")
        #expect(shown["tag"] as? String == "post-7")
        #expect(shown["notification_count"] as? Int == 4)
        let data = message["data"] as! [String: String]
        #expect(data["notification_id"] == "00000000-0000-0000-0000-0000000000bb")
        #expect(data["delivery_id"] == "00000000-0000-0000-0000-0000000000aa")
        #expect(data["data"] == #"{"post":7}"#)
        #expect(data["batch_count"] == "3")
        #expect(data["unread"] == "4")
        #expect(data["url"] == "https://example.org/a")

        // Alerts off but the badge on: data only, never urgent.
        let quiet = try #require(
            FCMPayload.request(notification, device: FCMDevice(token: "t", showsAlerts: false), unread: 1))
        let quietMessage =
            (try JSONSerialization.jsonObject(with: quiet.body) as! [String: Any])["message"] as! [String: Any]
        #expect(quietMessage["notification"] == nil)
        #expect((quietMessage["android"] as! [String: Any])["priority"] as? String == "NORMAL")
        #expect(
            FCMPayload.request(notification, device: FCMDevice(token: "t", allowsNotifications: false), unread: 1)
                == nil)
        #expect(
            FCMPayload.request(
                notification, device: FCMDevice(token: "t", showsAlerts: false, showsBadge: false), unread: 1)
                == nil)
        #expect(FCMPayload.largestSize(notification) > request.body.count)
    }

    @Test("FCM's error answers are read for their code, Google's status and message")
    func failures() {
        let unregistered = FCMFailure(
            status: 404,
            body: Data(
                #"{"error":{"code":404,"message":"Requested entity was not found.","status":"NOT_FOUND","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"UNREGISTERED"}]}}"#
                    .utf8))
        #expect(unregistered.code == .unregistered)
        #expect(unregistered.code?.retiresDevice == true)
        #expect(unregistered.description == "UNREGISTERED: Requested entity was not found.")
        let expired = FCMFailure(
            status: 401,
            body: Data(
                #"{"error":{"code":401,"message":"Request had invalid authentication credentials.","status":"UNAUTHENTICATED"}}"#
                    .utf8))
        #expect(expired.refusesAccessToken)
        #expect(expired.description.hasPrefix("UNAUTHENTICATED"))
        let thirdParty = FCMFailure(
            status: 401,
            body: Data(
                #"{"error":{"code":401,"status":"UNAUTHENTICATED","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"THIRD_PARTY_AUTH_ERROR"}]}}"#
                    .utf8))
        #expect(!thirdParty.refusesAccessToken)
        #expect(FCMFailure(status: 502, body: Data("<html>".utf8)).description == "HTTP 502")
        #expect(FCMErrorCode("SOMETHING_NEW") == .unknown("SOMETHING_NEW"))
    }
}
