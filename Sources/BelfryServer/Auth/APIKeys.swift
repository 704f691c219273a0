import BelfryWebPush
import Crypto
import Foundation

/// The server-side API keys, kept only as SHA-256 digests and compared in constant time.
struct APIKeys: Sendable {
    private let digests: [[UInt8]]

    init(keys: [String]) {
        digests = keys.map(Self.digest)
    }

    init(digests: [[UInt8]]) {
        self.digests = digests
    }

    static func digest(_ key: String) -> [UInt8] {
        Array(SHA256.hash(data: Data(key.utf8)))
    }

    /// A digest stored as 64 hex digits, or `nil` if it is anything else.
    static func parseDigest(_ hex: String) -> [UInt8]? {
        guard hex.utf8.count == 2 * SHA256.byteCount else { return nil }
        var bytes: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            guard let byte = UInt8(hex[index..<next], radix: 16) else { return nil }
            bytes.append(byte)
            index = next
        }
        return bytes
    }

    /// Whether `candidate` is one of the keys.
    func accepts(_ candidate: String) -> Bool {
        fingerprint(ifAccepting: candidate) != nil
    }

    /// The fingerprint of `candidate` if it is one of the keys: its digest is taken once, for
    /// both. Every key is compared in full, so the time taken says nothing about which key or
    /// how much of it matched.
    func fingerprint(ifAccepting candidate: String) -> String? {
        let presented = Self.digest(candidate)
        var matched = false
        for digest in digests where digest.count == presented.count {
            var difference: UInt8 = 0
            for (left, right) in zip(digest, presented) {
                difference |= left ^ right
            }
            matched = matched || difference == 0
        }
        return matched ? Self.fingerprint(digest: presented) : nil
    }

    /// A short name for a key that reveals nothing of it: the first 8 bytes of its digest, in hex.
    static func fingerprint(_ key: String) -> String {
        fingerprint(digest: digest(key))
    }

    private static func fingerprint(digest: [UInt8]) -> String {
        digest.prefix(8).hexEncoded
    }

    /// Whether a key with this fingerprint is still configured.
    func has(fingerprint: String) -> Bool {
        digests.contains { Self.fingerprint(digest: $0) == fingerprint }
    }

    /// A new random key, in the form `belfry_` followed by 43 base64url characters.
    static func generate() -> String {
        "belfry_" + randomToken(bytes: 32)
    }
}

/// `bytes` random bytes from the system's secure generator, base64url-encoded without padding.
func randomToken(bytes: Int) -> String {
    var generator = SystemRandomNumberGenerator()
    let data = Data((0..<bytes).map { _ in UInt8.random(in: .min ... .max, using: &generator) })
    return data.base64URLEncodedString()
}

extension Data {
    func base64URLEncodedString() -> String { Base64URL.encode(self) }
}

extension Sequence<UInt8> {
    /// Lowercase hex, two digits a byte: how digests and signatures are shown and stored. Every
    /// webhook signature is one, so it writes the digits itself rather than format each byte.
    var hexEncoded: String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(underestimatedCount * 2)
        for byte in self {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}
