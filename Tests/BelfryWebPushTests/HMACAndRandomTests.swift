import Crypto
import Foundation
import Testing

@testable import BelfryWebPush

@Suite struct HMACSHA256KeyTests {
    /// RFC 4231 test case 2: a key shorter than the block.
    @Test func matchesRFC4231() {
        let key = Data("Jefe".utf8)
        let message = Data("what do ya want for nothing?".utf8)
        let code = message.withUnsafeBytes { HMACSHA256Key(key).code($0) }
        #expect(
            hexString(code) == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    }

    @Test(arguments: [0, 1, 16, 32, 63, 64, 65, 131])
    func matchesSwiftCrypto(keyLength: Int) {
        let key = Data((0..<keyLength).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) })
        for length in [0, 1, 55, 56, 64, 145, 1000] {
            let message = Data((0..<length).map { UInt8(truncatingIfNeeded: $0 &* 7) })
            let expected = Data(HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: key)))
            let reused = HMACSHA256Key(key)
            // The same key twice: its padded hashes are copied, not used up.
            #expect(Data(message.withUnsafeBytes { reused.code($0) }) == expected)
            #expect(Data(message.withUnsafeBytes { reused.code($0) }) == expected)
            let once = key.withUnsafeBytes { key in
                HMACSHA256Key.code(key: key) { hash in
                    hash.update(message.prefix(length / 2))
                    hash.update(message.dropFirst(length / 2))
                }
            }
            #expect(Data(once) == expected)
        }
    }

    private func hexString(_ digest: SHA256Digest) -> String {
        digest.map { String(format: "%02x", $0) }.joined()
    }
}

@Suite struct RandomBytesTests {
    /// Draws across several refills of the pool: no two 32-byte draws are equal, none is all
    /// zeros (a handed-out byte is zeroed in the pool, so a draw from used bytes would show),
    /// and the bytes are spread over all values.
    @Test func drawsAreFreshAndSpread() {
        var seen = Set<Data>()
        var counts = [Int](repeating: 0, count: 256)
        for _ in 0..<1000 {
            var draw = Data(count: 32)
            draw.withUnsafeMutableBytes { RandomBytes.fill($0) }
            #expect(draw != Data(count: 32))
            #expect(seen.insert(draw).inserted)
            for byte in draw { counts[Int(byte)] += 1 }
        }
        // 32 000 bytes: about 125 of each value; a stuck or biased source lands far outside.
        #expect(counts.min()! > 60)
        #expect(counts.max()! < 200)
    }

    @Test func oddSizesCrossTheRefill() {
        for size in [1, 7, 48, 4095, 4096] {
            var draw = Data(count: size)
            draw.withUnsafeMutableBytes { RandomBytes.fill($0) }
            #expect(draw.count == size)
            if size >= 48 { #expect(Set(draw).count > 16) }
        }
    }
}
