import Crypto
import Foundation
import Testing

@testable import BelfryWebPush

/// RFC 8291 Appendix A ("Intermediate Values for Encryption"), base64url as printed in the RFC.
private enum RFC8291 {
    static let plaintext = "V2hlbiBJIGdyb3cgdXAsIEkgd2FudCB0byBiZSBhIHdhdGVybWVsb24"
    static let asPublic =
        "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8"
    static let asPrivate = "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"
    static let uaPublic =
        "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
    static let uaPrivate = "q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94"
    static let salt = "DGv6ra1nlYgDCS1FRnbzlw"
    static let authSecret = "BTBZMqHH6r4Tts7J_aSIgg"
    static let ecdhSecret = "kyrL1jIIOHEzg3sM2ZWRHDRB62YACZhhSlknJ672kSs"
    static let ikm = "S4lYMb_L0FxCeq0WhDx813KgSYqU26kOyzWUdsXYyrg"
    static let cek = "oIhVW04MRdy2XN9CiKLxTg"
    static let nonce = "4h_95klXJ5E_qnoN"
    static let message =
        "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27ml"
        + "mlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPT"
        + "pK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"
}

private func bytes(_ base64URL: String) throws -> Data {
    try #require(Base64URL.decode(base64URL))
}

private func bytes(of key: some ContiguousBytes) -> Data {
    key.withUnsafeBytes { Data($0) }
}

@Suite struct RFC8291VectorTests {
    let serverKey: P256.KeyAgreement.PrivateKey
    let userAgentKey: P256.KeyAgreement.PrivateKey
    let keys: WebPushSubscriberKeys

    init() throws {
        serverKey = try P256.KeyAgreement.PrivateKey(rawRepresentation: bytes(RFC8291.asPrivate))
        userAgentKey = try P256.KeyAgreement.PrivateKey(rawRepresentation: bytes(RFC8291.uaPrivate))
        keys = try WebPushSubscriberKeys(p256dh: RFC8291.uaPublic, auth: RFC8291.authSecret)
    }

    @Test func keysMatchTheRFC() throws {
        #expect(Base64URL.encode(serverKey.publicKey.x963Representation) == RFC8291.asPublic)
        #expect(keys.p256dh.x963Representation == userAgentKey.publicKey.x963Representation)
        let plaintext = try bytes(RFC8291.plaintext)
        #expect(
            String(decoding: plaintext, as: UTF8.self) == "When I grow up, I want to be a watermelon")
    }

    @Test func intermediateValues() throws {
        let sharedSecret = try serverKey.sharedSecretFromKeyAgreement(with: keys.p256dh)
        #expect(Base64URL.encode(sharedSecret.withUnsafeBytes { Data($0) }) == RFC8291.ecdhSecret)

        let ikm = WebPushEncryption.inputKeyingMaterial(
            sharedSecret: sharedSecret,
            authKey: HMACSHA256Key(keys.auth),
            userAgentPublicKey: keys.p256dh.x963Representation,
            applicationServerPublicKey: serverKey.publicKey.x963Representation
        )
        #expect(Base64URL.encode(bytes(of: ikm)) == RFC8291.ikm)

        let (cek, nonce) = try WebPushEncryption.contentKeys(
            inputKeyingMaterial: ikm, salt: bytes(RFC8291.salt))
        #expect(Base64URL.encode(bytes(of: cek)) == RFC8291.cek)
        #expect(Base64URL.encode(Data(nonce)) == RFC8291.nonce)
    }

    @Test func encryptsByteForByte() throws {
        let message = try WebPushEncryption.encrypt(
            bytes(RFC8291.plaintext),
            for: keys,
            recordSize: 4096,
            ephemeralKey: serverKey,
            salt: bytes(RFC8291.salt)
        )
        #expect(Base64URL.encode(message) == RFC8291.message)
        #expect(message.count == WebPushEncryption.encryptedSize(plaintextLength: 41))
    }

    @Test func decryptsTheRFCMessage() throws {
        let plaintext = try WebPushEncryption.decrypt(
            bytes(RFC8291.message),
            privateKey: userAgentKey,
            authSecret: bytes(RFC8291.authSecret)
        )
        #expect(Base64URL.encode(plaintext) == RFC8291.plaintext)
    }
}

@Suite struct WebPushEncryptionTests {
    let userAgentKey = P256.KeyAgreement.PrivateKey()
    let authSecret = Data((0..<16).map { _ in UInt8.random(in: .min ... .max) })

    var keys: WebPushSubscriberKeys {
        get throws {
            try WebPushSubscriberKeys(
                p256dh: Base64URL.encode(userAgentKey.publicKey.x963Representation),
                auth: Base64URL.encode(authSecret)
            )
        }
    }

    @Test(arguments: [(0, 0), (1, 0), (41, 17), (1000, 0), (3993, 0), (0, 4079)])
    func roundTrips(length: Int, padding: Int) throws {
        let plaintext = Data((0..<length).map { _ in UInt8.random(in: 0...255) })
        let message = try WebPushEncryption.encrypt(plaintext, for: keys, padding: padding)
        #expect(
            message.count == WebPushEncryption.encryptedSize(plaintextLength: length, padding: padding))
        #expect(message[16..<20] == Data([0, 0, 0x10, 0]))
        #expect(message[20] == 65)
        let decrypted = try WebPushEncryption.decrypt(
            message, privateKey: userAgentKey, authSecret: authSecret)
        #expect(decrypted == plaintext)
    }

    @Test func freshKeyAndSaltPerMessage() throws {
        let plaintext = Data("same".utf8)
        let first = try WebPushEncryption.encrypt(plaintext, for: keys)
        let second = try WebPushEncryption.encrypt(plaintext, for: keys)
        #expect(first.prefix(16) != second.prefix(16))
        #expect(first[21..<86] != second[21..<86])
    }

    @Test func payloadLimit() {
        #expect(WebPushEncryption.headerSize == 86)
        #expect(WebPushEncryption.maxPlaintextSize == 3993)
        #expect(
            WebPushEncryption.encryptedSize(plaintextLength: 3993) == WebPushEncryption.maxPayloadSize)
        #expect(
            WebPushEncryption.encryptedSize(plaintextLength: 3994) > WebPushEncryption.maxPayloadSize)
        #expect(
            WebPushEncryption.encryptedSize(plaintextLength: 10, padding: 5) == 86 + 10 + 1 + 5 + 16)
    }

    @Test func rejectsRecordOverflow() throws {
        let keys = try keys
        #expect(throws: WebPushEncryptionError.recordTooLarge(required: 4097, recordSize: 4096)) {
            try WebPushEncryption.encrypt(Data(count: 4080), for: keys)
        }
        #expect(throws: WebPushEncryptionError.recordTooLarge(required: 118, recordSize: 100)) {
            try WebPushEncryption.encrypt(Data(count: 1), for: keys, recordSize: 100, padding: 100)
        }
        _ = try WebPushEncryption.encrypt(Data(count: 4079), for: keys)
    }

    @Test func rejectsInvalidParameters() throws {
        let keys = try keys
        #expect(throws: WebPushEncryptionError.invalidSaltLength(15)) {
            try WebPushEncryption.encrypt(Data(), for: keys, salt: Data(count: 15))
        }
        #expect(throws: WebPushEncryptionError.invalidRecordSize(17)) {
            try WebPushEncryption.encrypt(Data(), for: keys, recordSize: 17)
        }
        #expect(throws: WebPushEncryptionError.invalidPadding(-1)) {
            try WebPushEncryption.encrypt(Data(), for: keys, padding: -1)
        }
    }

    @Test func decryptionDetectsTampering() throws {
        var message = try WebPushEncryption.encrypt(Data("secret".utf8), for: keys)
        #expect(throws: WebPushEncryptionError.decryptionFailed) {
            try WebPushEncryption.decrypt(message, privateKey: userAgentKey, authSecret: Data(count: 16))
        }
        #expect(throws: WebPushEncryptionError.decryptionFailed) {
            try WebPushEncryption.decrypt(message, privateKey: .init(), authSecret: authSecret)
        }
        #expect(throws: WebPushEncryptionError.malformedHeader) {
            try WebPushEncryption.decrypt(
                message.prefix(85), privateKey: userAgentKey, authSecret: authSecret)
        }
        #expect(throws: WebPushEncryptionError.malformedRecord) {
            try WebPushEncryption.decrypt(
                message.prefix(102), privateKey: userAgentKey, authSecret: authSecret)
        }
        message[message.count - 1] ^= 1
        #expect(throws: WebPushEncryptionError.decryptionFailed) {
            try WebPushEncryption.decrypt(message, privateKey: userAgentKey, authSecret: authSecret)
        }
    }
}

@Suite struct SubscriberKeyValidationTests {
    static let validPoint = Base64URL.encode(
        P256.KeyAgreement.PrivateKey().publicKey.x963Representation)
    static let validAuth = Base64URL.encode(Data(count: 16))

    static let cases: [(String, String, WebPushKeyError)] = [
        ("not base64!", validAuth, .init(field: "keys.p256dh", reason: .invalidBase64URL)),
        (
            Base64URL.encode(Data([4] + [UInt8](repeating: 1, count: 63))), validAuth,
            .init(field: "keys.p256dh", reason: .invalidLength(expected: 65, actual: 64))
        ),
        (
            Base64URL.encode(P256.KeyAgreement.PrivateKey().publicKey.compressedRepresentation),
            validAuth,
            .init(field: "keys.p256dh", reason: .invalidLength(expected: 65, actual: 33))
        ),
        (
            Base64URL.encode(Data([5] + [UInt8](repeating: 1, count: 64))), validAuth,
            .init(field: "keys.p256dh", reason: .notUncompressedPoint)
        ),
        (
            Base64URL.encode(
                Data([4] + [UInt8](repeating: 0, count: 31) + [1] + [UInt8](repeating: 0, count: 31) + [1])),
            validAuth, .init(field: "keys.p256dh", reason: .notOnCurve)
        ),
        (validPoint, "BTBZ+qHH6r4Tts7J/aSIgg", .init(field: "keys.auth", reason: .invalidBase64URL)),
        (
            validPoint, Base64URL.encode(Data(count: 15)),
            .init(field: "keys.auth", reason: .invalidLength(expected: 16, actual: 15))
        ),
        (
            validPoint, Base64URL.encode(Data(count: 32)),
            .init(field: "keys.auth", reason: .invalidLength(expected: 16, actual: 32))
        ),
    ]

    @Test(arguments: cases)
    func rejectsInvalidKeys(p256dh: String, auth: String, error: WebPushKeyError) {
        #expect(throws: error) { try WebPushSubscriberKeys(p256dh: p256dh, auth: auth) }
    }

    @Test func errorMessagesNameTheField() {
        #expect(
            WebPushKeyError(field: "keys.p256dh", reason: .notOnCurve).description
                == "keys.p256dh is not a point on the P-256 curve"
        )
        #expect(
            WebPushKeyError(field: "keys.auth", reason: .invalidLength(expected: 16, actual: 15))
                .description
                == "keys.auth must decode to 16 bytes, got 15"
        )
    }

    @Test func acceptsPaddedBase64URL() throws {
        let keys = try WebPushSubscriberKeys(p256dh: Self.validPoint + "=", auth: Self.validAuth + "==")
        #expect(Base64URL.encode(keys.p256dh.x963Representation) == Self.validPoint)
        #expect(keys.auth == Data(count: 16))
    }
}
