import Crypto
import Foundation

/// An HMAC-SHA-256 key (RFC 2104) whose two padded blocks are hashed once, when the key is made.
///
/// Each code then costs the message's blocks and one block for the outer hash, where swift-crypto's
/// generic `HMAC<SHA256>` hashes both pads again for every code, and reaches the hash through
/// generic metadata lookups: in a profile of Web Push encryption, which computes five codes per
/// message, those lookups alone were a tenth of the samples.
struct HMACSHA256Key {
    private let inner: SHA256
    private let outer: SHA256

    /// A key longer than a SHA-256 block (64 bytes) is hashed first, as RFC 2104 says; Web
    /// Push's keys are 16 or 32 bytes.
    init(_ key: UnsafeRawBufferPointer) {
        if key.count > Self.blockSize {
            self = SHA256.hash(data: key).withUnsafeBytes { Self($0) }
            return
        }
        inner = Self.padded(key, with: 0x36)
        outer = Self.padded(key, with: 0x5c)
    }

    init(_ key: some ContiguousBytes) {
        self = key.withUnsafeBytes { Self($0) }
    }

    /// The code of `message`.
    func code(_ message: UnsafeRawBufferPointer) -> SHA256Digest {
        Self.code(inner: inner, outer: outer) { $0.update(bufferPointer: message) }
    }

    /// The code of what `message` feeds the hash.
    func code(_ message: (inout SHA256) -> Void) -> SHA256Digest {
        Self.code(inner: inner, outer: outer, message)
    }

    /// The code of what `message` feeds the hash, under a key used once: this saves copying the
    /// padded hashes.
    static func code(key: UnsafeRawBufferPointer, _ message: (inout SHA256) -> Void) -> SHA256Digest {
        guard key.count <= blockSize else { return Self(key).code(message) }
        return code(inner: padded(key, with: 0x36), outer: padded(key, with: 0x5c), message)
    }

    /// Consuming the two hashes lets a key used once update them in place; a kept key's are
    /// copied (swift-crypto's hashes copy their state on the first write to a shared one).
    private static func code(
        inner: consuming SHA256, outer: consuming SHA256, _ message: (inout SHA256) -> Void
    ) -> SHA256Digest {
        message(&inner)
        inner.finalize().withUnsafeBytes { outer.update(bufferPointer: $0) }
        return outer.finalize()
    }

    private static let blockSize = 64

    /// A hash that has taken in one block: `key`, zero-filled to the block size, XOR `pad`.
    private static func padded(_ key: UnsafeRawBufferPointer, with pad: UInt8) -> SHA256 {
        precondition(key.count <= blockSize, "a key longer than a block is hashed first")
        var hash = SHA256()
        withUnsafeTemporaryAllocation(byteCount: blockSize, alignment: 1) { block in
            block.initializeMemory(as: UInt8.self, repeating: pad)
            for index in key.indices { block[index] = key[index] ^ pad }
            hash.update(bufferPointer: UnsafeRawBufferPointer(block))
            block.initializeMemory(as: UInt8.self, repeating: 0)
        }
        return hash
    }
}

extension SHA256 {
    /// Takes in `bytes` without the generic `update(data:)`.
    mutating func update(_ bytes: some ContiguousBytes) {
        bytes.withUnsafeBytes { update(bufferPointer: $0) }
    }
}
