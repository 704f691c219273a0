import Crypto
import Foundation

/// Why a push subscription's `keys` object was rejected.
public struct WebPushKeyError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Reason: Sendable, Equatable {
        /// The value is not base64url.
        case invalidBase64URL
        /// The value decodes to the wrong number of bytes.
        case invalidLength(expected: Int, actual: Int)
        /// The key is not in uncompressed form (leading byte 0x04).
        case notUncompressedPoint
        /// The coordinates are not a point on P-256.
        case notOnCurve
    }

    /// The offending subscription field: `keys.p256dh` or `keys.auth`.
    public let field: String
    public let reason: Reason

    public var description: String {
        switch reason {
        case .invalidBase64URL:
            "\(field) is not valid base64url"
        case .invalidLength(let expected, let actual):
            "\(field) must decode to \(expected) bytes, got \(actual)"
        case .notUncompressedPoint:
            "\(field) must be an uncompressed P-256 point (leading byte 0x04)"
        case .notOnCurve:
            "\(field) is not a point on the P-256 curve"
        }
    }
}

/// The user agent's keys from a push subscription (RFC 8291 §2, §3.2).
///
/// `@unchecked` only because some swift-crypto versions do not mark their immutable key types `Sendable`.
public struct WebPushSubscriberKeys: @unchecked Sendable {
    /// The user agent's ECDH public key (`ua_public`).
    public let p256dh: P256.KeyAgreement.PublicKey
    /// The 16-byte authentication secret (`auth_secret`).
    public let auth: Data
    /// `p256dh` as the 65 bytes the key derivation hashes: encoded once per subscription, not
    /// once per message.
    let userAgentPublicKey: Data
    /// `auth` as the key of the first HMAC of every message, its pads hashed once.
    let authKey: HMACSHA256Key

    /// Validates the base64url `keys.p256dh` and `keys.auth` values of a subscription.
    public init(p256dh: String, auth: String) throws(WebPushKeyError) {
        let field = "keys.p256dh"
        guard let point = Base64URL.decode(p256dh) else {
            throw WebPushKeyError(field: field, reason: .invalidBase64URL)
        }
        guard point.count == WebPushEncryption.publicKeySize else {
            throw WebPushKeyError(
                field: field,
                reason: .invalidLength(expected: WebPushEncryption.publicKeySize, actual: point.count)
            )
        }
        guard point.first == 0x04 else {
            throw WebPushKeyError(field: field, reason: .notUncompressedPoint)
        }
        guard let publicKey = try? P256.KeyAgreement.PublicKey(x963Representation: point) else {
            throw WebPushKeyError(field: field, reason: .notOnCurve)
        }
        guard let secret = Base64URL.decode(auth) else {
            throw WebPushKeyError(field: "keys.auth", reason: .invalidBase64URL)
        }
        try self.init(p256dh: publicKey, auth: secret)
    }

    /// Creates keys from an already parsed public key; `auth` must be 16 bytes.
    public init(p256dh: P256.KeyAgreement.PublicKey, auth: Data) throws(WebPushKeyError) {
        guard auth.count == WebPushEncryption.authSecretSize else {
            throw WebPushKeyError(
                field: "keys.auth",
                reason: .invalidLength(expected: WebPushEncryption.authSecretSize, actual: auth.count)
            )
        }
        self.p256dh = p256dh
        self.auth = auth
        userAgentPublicKey = p256dh.x963Representation
        authKey = HMACSHA256Key(auth)
    }
}

/// Errors from encrypting or decrypting a Web Push message.
public enum WebPushEncryptionError: Error, Sendable, Equatable, CustomStringConvertible {
    case invalidSaltLength(Int)
    case invalidRecordSize(Int)
    case invalidPadding(Int)
    /// Plaintext, padding, delimiter and tag need `required` bytes, more than `recordSize`.
    case recordTooLarge(required: Int, recordSize: Int)
    case malformedHeader
    case malformedRecord
    case decryptionFailed
    case missingPaddingDelimiter

    public var description: String {
        switch self {
        case .invalidSaltLength(let length):
            "salt must be \(WebPushEncryption.saltSize) bytes, got \(length)"
        case .invalidRecordSize(let size):
            "record size must be between \(WebPushEncryption.minRecordSize) and \(UInt32.max), got \(size)"
        case .invalidPadding(let padding):
            "padding must be between 0 and the record size, got \(padding)"
        case .recordTooLarge(let required, let recordSize):
            "plaintext with padding, delimiter and tag needs \(required) bytes, more than the record size \(recordSize)"
        case .malformedHeader:
            "message is too short or its aes128gcm header is invalid"
        case .malformedRecord:
            "record is too short or exceeds the record size (only a single record is supported)"
        case .decryptionFailed:
            "decryption failed: wrong key or auth secret, or the message was altered"
        case .missingPaddingDelimiter:
            "decrypted record lacks the final-record padding delimiter 0x02"
        }
    }
}

/// Web Push message encryption (RFC 8291) using the aes128gcm content coding (RFC 8188), single record.
public enum WebPushEncryption {
    /// Largest body a push service is required to accept (RFC 8030 §7.2).
    public static let maxPayloadSize = 4096
    /// aes128gcm header size: salt (16) | rs (4) | idlen (1) | keyid (65-byte public key).
    public static let headerSize = saltSize + 4 + 1 + publicKeySize
    /// Largest plaintext whose unpadded encryption fits in ``maxPayloadSize`` (3993 bytes).
    public static let maxPlaintextSize = maxPayloadSize - encryptedSize(plaintextLength: 0)

    static let saltSize = 16
    static let authSecretSize = 16
    static let publicKeySize = 65
    static let tagSize = 16
    static let minRecordSize = 18

    /// Size of the encrypted message (header included) for a plaintext of `plaintextLength` bytes.
    public static func encryptedSize(plaintextLength: Int, padding: Int = 0) -> Int {
        headerSize + recordLength(plaintextLength: plaintextLength, padding: padding)
    }

    /// A new key pair for one message, as RFC 8291 requires: a random scalar and its public point.
    ///
    /// swift-crypto's `PrivateKey()` also runs a FIPS pairwise self-test (an ECDSA signature and
    /// its verification) on every key, and by default generates again until the key is
    /// compact-representable, which about half are: in a profile that was more than half of an
    /// encryption's time. A scalar at or above the group order (a chance of about 2⁻³²) is
    /// refused by the library and drawn again.
    public static func ephemeralKey() -> P256.KeyAgreement.PrivateKey {
        withUnsafeTemporaryAllocation(byteCount: 32, alignment: 1) { scalar in
            defer { scalar.initializeMemory(as: UInt8.self, repeating: 0) }
            while true {
                RandomBytes.fill(scalar)
                if let key = try? P256.KeyAgreement.PrivateKey(rawRepresentation: UnsafeRawBufferPointer(scalar)) {
                    return key
                }
            }
        }
    }

    /// Encrypts `plaintext` into a complete aes128gcm message body for the subscriber `keys`.
    ///
    /// - Parameters:
    ///   - recordSize: The `rs` header value; the single record must fit in it.
    ///   - padding: Number of zero bytes appended after the 0x02 delimiter.
    ///   - ephemeralKey: The application server's one-time ECDH key; fixed only in tests.
    ///   - salt: 16 bytes; random when `nil`, fixed only in tests.
    public static func encrypt(
        _ plaintext: Data,
        for keys: WebPushSubscriberKeys,
        recordSize: Int = 4096,
        padding: Int = 0,
        ephemeralKey: P256.KeyAgreement.PrivateKey = ephemeralKey(),
        salt: Data? = nil
    ) throws -> Data {
        if let salt, salt.count != saltSize { throw WebPushEncryptionError.invalidSaltLength(salt.count) }
        guard (minRecordSize...Int(UInt32.max)).contains(recordSize) else {
            throw WebPushEncryptionError.invalidRecordSize(recordSize)
        }
        guard (0...recordSize).contains(padding) else {
            throw WebPushEncryptionError.invalidPadding(padding)
        }
        let length = recordLength(plaintextLength: plaintext.count, padding: padding)
        guard length <= recordSize else {
            throw WebPushEncryptionError.recordTooLarge(required: length, recordSize: recordSize)
        }

        let serverPublicKey = ephemeralKey.publicKey.x963Representation
        let ikm = inputKeyingMaterial(
            sharedSecret: try ephemeralKey.sharedSecretFromKeyAgreement(with: keys.p256dh),
            authKey: keys.authKey,
            userAgentPublicKey: keys.userAgentPublicKey,
            applicationServerPublicKey: serverPublicKey
        )
        // The message is written in one zeroed buffer: header, then the record in place (its
        // padding is the zeros already there), which the ciphertext and tag then overwrite.
        var message = Data(count: headerSize + length)
        try message.withUnsafeMutableBytes { message in
            let saltBytes = UnsafeMutableRawBufferPointer(rebasing: message[..<saltSize])
            if let salt { salt.withUnsafeBytes { saltBytes.copyMemory(from: $0) } } else { RandomBytes.fill(saltBytes) }
            message.storeBytes(of: UInt32(recordSize).bigEndian, toByteOffset: saltSize, as: UInt32.self)
            message[saltSize + 4] = UInt8(publicKeySize)
            serverPublicKey.withUnsafeBytes {
                UnsafeMutableRawBufferPointer(rebasing: message[(saltSize + 5)..<headerSize]).copyMemory(from: $0)
            }

            let (key, nonce) = try contentKeys(inputKeyingMaterial: ikm, salt: UnsafeRawBufferPointer(saltBytes))
            let record = UnsafeMutableRawBufferPointer(rebasing: message[headerSize..<(message.count - tagSize)])
            plaintext.withUnsafeBytes { record.copyMemory(from: $0) }
            record[plaintext.count] = 0x02
            let sealed = try AES.GCM.seal(UnsafeRawBufferPointer(record), using: key, nonce: nonce)
            // The sealed box holds nonce, ciphertext and tag together; its 12-byte nonce is not sent.
            guard let combined = sealed.combined else {
                preconditionFailure("a sealed box with a 12-byte nonce has a combined form")
            }
            combined.withUnsafeBytes {
                UnsafeMutableRawBufferPointer(rebasing: message[headerSize...]).copyMemory(
                    from: .init(rebasing: $0[12...]))
            }
        }
        return message
    }

    /// Decrypts a single-record message as the user agent does, returning the plaintext without padding.
    public static func decrypt(
        _ message: Data,
        privateKey: P256.KeyAgreement.PrivateKey,
        authSecret: Data
    ) throws -> Data {
        let bytes = [UInt8](message)
        guard bytes.count >= headerSize, bytes[20] == publicKeySize else {
            throw WebPushEncryptionError.malformedHeader
        }
        let salt = Data(bytes[0..<saltSize])
        let recordSize = bytes[16..<20].reduce(0) { $0 << 8 | Int($1) }
        let keyID = bytes[21..<headerSize]
        guard recordSize >= minRecordSize,
            let serverPublicKey = try? P256.KeyAgreement.PublicKey(x963Representation: keyID)
        else { throw WebPushEncryptionError.malformedHeader }
        let record = bytes[headerSize...]
        guard record.count > tagSize, record.count <= recordSize else {
            throw WebPushEncryptionError.malformedRecord
        }

        let ikm = inputKeyingMaterial(
            sharedSecret: try privateKey.sharedSecretFromKeyAgreement(with: serverPublicKey),
            authKey: HMACSHA256Key(authSecret),
            userAgentPublicKey: privateKey.publicKey.x963Representation,
            applicationServerPublicKey: serverPublicKey.x963Representation
        )
        let (key, nonce) = try contentKeys(inputKeyingMaterial: ikm, salt: salt)
        let sealed = try AES.GCM.SealedBox(
            nonce: nonce,
            ciphertext: record.dropLast(tagSize),
            tag: record.suffix(tagSize)
        )
        guard let padded = try? AES.GCM.open(sealed, using: key) else {
            throw WebPushEncryptionError.decryptionFailed
        }
        guard let delimiter = padded.lastIndex(where: { $0 != 0 }), padded[delimiter] == 0x02 else {
            throw WebPushEncryptionError.missingPaddingDelimiter
        }
        return Data(padded[..<delimiter])
    }

    /// Record length for one final record: plaintext, 0x02 delimiter, padding and AEAD tag.
    static func recordLength(plaintextLength: Int, padding: Int) -> Int {
        plaintextLength + 1 + padding + tagSize
    }

    /// `IKM = HKDF(auth_secret, ecdh_secret, "WebPush: info" || 0x00 || ua_public || as_public, 32)` (RFC 8291 §3.3).
    ///
    /// HKDF with at most one block of output is two HMACs (RFC 5869 §2.2–2.3): the extract, and
    /// the expand of `info || 0x01`. Written that way, the five HMACs of a message skip the
    /// generic HKDF layers, which cost as much as the hashing.
    static func inputKeyingMaterial(
        sharedSecret: SharedSecret,
        authKey: HMACSHA256Key,
        userAgentPublicKey: Data,
        applicationServerPublicKey: Data
    ) -> SHA256Digest {
        let prk = sharedSecret.withUnsafeBytes { authKey.code($0) }
        return prk.withUnsafeBytes { prk in
            HMACSHA256Key.code(key: prk) { info in
                info.update(infoPrefix)
                info.update(userAgentPublicKey)
                info.update(applicationServerPublicKey)
                info.update(firstBlock)
            }
        }
    }

    /// Content-encryption key and nonce for the first (only) record (RFC 8291 §3.4, RFC 8188 §2.2–2.3).
    static func contentKeys(
        inputKeyingMaterial: SHA256Digest,
        salt: some ContiguousBytes
    ) throws -> (key: SymmetricKey, nonce: AES.GCM.Nonce) {
        let prk = HMACSHA256Key(
            salt.withUnsafeBytes { salt in HMACSHA256Key.code(key: salt) { $0.update(inputKeyingMaterial) } })
        let key = keyInfo.withUnsafeBytes { prk.code($0) }
        let nonce = nonceInfo.withUnsafeBytes { prk.code($0) }
        return (
            key.withUnsafeBytes { SymmetricKey(data: $0.prefix(16)) },
            try nonce.withUnsafeBytes { try AES.GCM.Nonce(data: $0.prefix(12)) }
        )
    }

    private static let infoPrefix = Data("WebPush: info\0".utf8)
    /// The expand step's counter for its first (and here only) block.
    private static let firstBlock = Data([0x01])
    private static let keyInfo = Data("Content-Encoding: aes128gcm\0\u{01}".utf8)
    private static let nonceInfo = Data("Content-Encoding: nonce\0\u{01}".utf8)
}
