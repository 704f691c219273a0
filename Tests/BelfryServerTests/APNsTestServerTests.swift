import BelfryWebPush
import Crypto
import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import BelfryTestServers

/// The APNs stand-in verifies each distinct provider token once and then compares strings; it
/// must still refuse what Apple refuses.
@Suite("APNs test server: provider tokens")
struct APNsTestServerTests {
    static func token(key: P256.Signing.PrivateKey, keyID: String, teamID: String, issuedAt: Int) throws -> String {
        let header = Base64URL.encode(Data(#"{"alg":"ES256","kid":"\#(keyID)"}"#.utf8))
        let claims = Base64URL.encode(Data(#"{"iss":"\#(teamID)","iat":\#(issuedAt)}"#.utf8))
        let signature = try key.signature(for: Data("\(header).\(claims)".utf8)).rawRepresentation
        return "\(header).\(claims).\(Base64URL.encode(signature))"
    }

    @Test("a good token is verified once; a foreign one is refused; a cached one still expires")
    func cachedVerification() throws {
        let key = P256.Signing.PrivateKey()
        let now = NIOLockedValueBox(Date(timeIntervalSince1970: 1_800_000_000))
        let state = NIOLockedValueBox(APNsTestServer.State())
        let checker = RequestChecker(
            publicKey: key.publicKey, keyID: "K", teamID: "T", now: { now.withLockedValue { $0 } }, state: state,
            records: false)
        func send(_ token: String) -> (Int, String?) {
            checker.answer(
                HTTP2TestServer.Request(
                    method: "POST", path: "/3/device/ab12",
                    headers: [
                        "authorization": "bearer \(token)", "apns-topic": "org.example", "apns-push-type": "alert",
                    ],
                    body: Data("{}".utf8)))
        }
        let good = try Self.token(key: key, keyID: "K", teamID: "T", issuedAt: 1_800_000_000)
        #expect(send(good) == (200, nil))
        #expect(send(good) == (200, nil))
        #expect(state.withLockedValue { $0.verified.count } == 1, "verified once")

        let foreign = try Self.token(key: P256.Signing.PrivateKey(), keyID: "K", teamID: "T", issuedAt: 1_800_000_000)
        #expect(send(foreign) == (403, "InvalidProviderToken"))
        let otherTeam = try Self.token(key: key, keyID: "K", teamID: "X", issuedAt: 1_800_000_000)
        #expect(send(otherTeam) == (403, "InvalidProviderToken"))
        // A token whose signature was tampered with after a good one was cached is a new string: verified, refused.
        // One character of the signature changed (replacing its last two with "AA" changed
        // nothing in one token of 256, whose signature ended so).
        var tampered = Array(good)
        tampered[tampered.count - 10] = tampered[tampered.count - 10] == "A" ? "B" : "A"
        #expect(String(tampered) != good)
        #expect(send(String(tampered)) == (403, "InvalidProviderToken"))

        now.withLockedValue { $0 = $0.addingTimeInterval(3600) }
        #expect(send(good) == (403, "ExpiredProviderToken"), "the cache keeps the time it was issued")
    }
}
