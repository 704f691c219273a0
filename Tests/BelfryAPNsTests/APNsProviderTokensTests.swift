import BelfryAPNs
import Crypto
import Foundation
import Testing

@Suite("APNs provider tokens and reasons")
struct APNsProviderTokensTests {
    /// A clock the test moves by hand.
    final class ManualClock: @unchecked Sendable {
        private let lock = NSLock()
        private var current = Date(timeIntervalSince1970: 1_800_000_000)

        var now: Date { lock.withLock { current } }
        func advance(by seconds: TimeInterval) { lock.withLock { current += seconds } }
    }

    static func decode(_ part: Substring) throws -> [String: Any] {
        var base64 = part.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        let data = try #require(Data(base64Encoded: base64))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    @Test("an ES256 JWT with the key id and team id, whose signature the public key verifies")
    func token() throws {
        let key = P256.Signing.PrivateKey()
        let clock = ManualClock()
        let tokens = APNsProviderTokens(key: key, keyID: "ABC123DEFG", teamID: "DEF123GHIJ", now: { clock.now })
        let token = try tokens.current()
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        #expect(parts.count == 3)
        #expect(try Self.decode(parts[0]) as? [String: String] == ["alg": "ES256", "kid": "ABC123DEFG"])
        let claims = try Self.decode(parts[1])
        #expect(claims["iss"] as? String == "DEF123GHIJ")
        #expect(claims["iat"] as? Int == 1_800_000_000)
        #expect(!token.contains("="), "base64url without padding")

        var signature = String(parts[2]).replacingOccurrences(of: "-", with: "+").replacingOccurrences(
            of: "_", with: "/")
        signature += String(repeating: "=", count: (4 - signature.count % 4) % 4)
        let raw = try #require(Data(base64Encoded: signature))
        #expect(raw.count == 64, "JOSE r and s, 32 bytes each")
        let verified = key.publicKey.isValidSignature(
            try P256.Signing.ECDSASignature(rawRepresentation: raw), for: Data("\(parts[0]).\(parts[1])".utf8))
        #expect(verified)
    }

    @Test("reused for 50 minutes, signed anew after, and replaced once when refused")
    func lifetime() throws {
        let clock = ManualClock()
        let tokens = APNsProviderTokens(key: P256.Signing.PrivateKey(), keyID: "K", teamID: "T", now: { clock.now })
        let first = try tokens.current()
        clock.advance(by: 49 * 60)
        #expect(try tokens.current() == first, "reused within 50 minutes")
        clock.advance(by: 60)
        let second = try tokens.current()
        #expect(second != first, "signed anew after 50 minutes")

        clock.advance(by: 1)
        let replaced = try tokens.replace(second)
        #expect(replaced != second)
        #expect(try tokens.replace(second) == replaced, "a second refusal of the old token keeps the new one")
        #expect(try tokens.current() == replaced)

        clock.advance(by: -120)
        #expect(try tokens.current() != replaced, "a clock that went back signs anew rather than trust the future")
    }

    @Test("APNs reasons read Apple's spelling, keep unknown ones verbatim, and say which retire a device")
    func apnsReasons() {
        #expect(APNsReason("Unregistered") == .unregistered)
        #expect(APNsReason("BadCollapseId") == .badCollapseID)
        #expect(APNsReason("BadCollapseId").description == "BadCollapseId")
        #expect(APNsReason("SomethingNew") == .unknown("SomethingNew"))
        #expect(APNsReason("SomethingNew").description == "SomethingNew")
        let retiring = ["BadDeviceToken", "DeviceTokenNotForTopic", "Unregistered", "ExpiredToken"]
        #expect(retiring.allSatisfy { APNsReason($0).retiresDevice })
        #expect(!APNsReason("BadTopic").retiresDevice)
        #expect(APNsReason("ExpiredProviderToken").refusesProviderToken)
        #expect(APNsReason("InvalidProviderToken").refusesProviderToken)
        #expect(!APNsReason("Forbidden").refusesProviderToken)
    }
}
