import BelfryWebPush
import Crypto
import Foundation
import Testing

@Suite struct VAPIDTests {
    let key = VAPIDKey()
    let audience = "https://push.example.net"
    let subject = "mailto:ops@belfry.example"
    let expiration = Date(timeIntervalSince1970: 1_700_000_000.75)

    /// Splits `vapid t=<JWT>, k=<key>` into the JWT's three segments and `k`.
    private func parse(_ header: String) throws -> (segments: [Substring], k: String) {
        let prefix = "vapid t="
        try #require(header.hasPrefix(prefix))
        let parts = header.dropFirst(prefix.count).components(separatedBy: ", k=")
        try #require(parts.count == 2)
        let segments = parts[0].split(separator: ".", omittingEmptySubsequences: false)
        try #require(segments.count == 3)
        return (segments, parts[1])
    }

    @Test func headerAndClaims() throws {
        let (segments, k) = try parse(
            key.authorization(audience: audience, subject: subject, expiration: expiration))
        #expect(k == key.publicKeyBase64URL)

        let header = try #require(Base64URL.decode(String(segments[0])))
        #expect(String(decoding: header, as: UTF8.self) == #"{"typ":"JWT","alg":"ES256"}"#)

        let claims = try #require(Base64URL.decode(String(segments[1])))
        #expect(
            String(decoding: claims, as: UTF8.self)
                == #"{"aud":"https://push.example.net","exp":1700000000,"sub":"mailto:ops@belfry.example"}"#
        )
    }

    @Test func signatureVerifiesWithK() throws {
        let (segments, k) = try parse(
            key.authorization(audience: audience, subject: subject, expiration: expiration))
        let publicKeyBytes = try #require(Base64URL.decode(k))
        #expect(publicKeyBytes.count == 65 && publicKeyBytes.first == 0x04)
        let publicKey = try P256.Signing.PublicKey(x963Representation: publicKeyBytes)

        let rawSignature = try #require(Base64URL.decode(String(segments[2])))
        #expect(rawSignature.count == 64)
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: rawSignature)
        let signingInput = Data("\(segments[0]).\(segments[1])".utf8)
        #expect(publicKey.isValidSignature(signature, for: signingInput))
        #expect(!publicKey.isValidSignature(signature, for: signingInput + Data("x".utf8)))
    }

    @Test func loadsPEM() throws {
        // RFC 8291 Appendix A's application server key doubles as a known P-256 key.
        let raw = try #require(Base64URL.decode("yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"))
        let known = VAPIDKey(privateKey: try P256.Signing.PrivateKey(rawRepresentation: raw))
        let loaded = try VAPIDKey(pemRepresentation: known.pemRepresentation)
        #expect(
            loaded.publicKeyBase64URL
                == "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8"
        )
        #expect(throws: (any Error).self) { try VAPIDKey(pemRepresentation: "not a key") }
    }

    @Test(arguments: [
        "ops@belfry.example", "mailto:", "http://belfry.example", "https://", "", "tel:+15551234",
    ])
    func rejectsInvalidSubject(subject: String) {
        #expect(throws: VAPIDError.invalidSubject(subject)) {
            try key.authorization(audience: audience, subject: subject, expiration: expiration)
        }
    }

    @Test(arguments: [
        "mailto:ops@belfry.example", "MAILTO:ops@belfry.example", "https://belfry.example/contact",
    ])
    func acceptsValidSubject(subject: String) throws {
        _ = try key.authorization(audience: audience, subject: subject, expiration: expiration)
    }

    @Test(arguments: [
        "push.example.net", "https://push.example.net/", "https://push.example.net/send/abc",
        "https://push.example.net:443", "HTTPS://push.example.net", "ftp://push.example.net",
    ])
    func rejectsNonOriginAudience(audience: String) {
        #expect(throws: VAPIDError.invalidAudience(audience)) {
            try key.authorization(audience: audience, subject: subject, expiration: expiration)
        }
    }

    @Test(arguments: [
        ("https://fcm.googleapis.com/fcm/send/abc:def", "https://fcm.googleapis.com"),
        (
            "https://Updates.Push.Services.Mozilla.com:443/wpush/v2/x",
            "https://updates.push.services.mozilla.com"
        ),
        ("https://push.example.net:8443/p?q=1", "https://push.example.net:8443"),
        ("http://localhost:80/push", "http://localhost"),
        ("http://127.0.0.1:8080/push", "http://127.0.0.1:8080"),
        ("https://[::1]:8443/push", "https://[::1]:8443"),
    ])
    func origin(endpoint: String, expected: String) throws {
        #expect(VAPIDKey.origin(of: try #require(URL(string: endpoint))) == expected)
    }

    @Test(arguments: ["ftp://push.example.net/x", "mailto:ops@belfry.example", "/relative/path"])
    func noOriginForNonHTTP(endpoint: String) throws {
        #expect(VAPIDKey.origin(of: try #require(URL(string: endpoint))) == nil)
    }
}
