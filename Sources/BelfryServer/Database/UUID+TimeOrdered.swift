import BelfryJSON
import FluentSQLiteDriver
import Foundation

extension UUID {
    /// A version 7 UUID (RFC 9562 §5.7): the Unix time in milliseconds in the first 48 bits,
    /// then random bits. Rows written in bulk with such keys append to the right edge of their
    /// primary-key B-tree instead of landing on a random page each, which is what makes
    /// fan-out's inserts cheap; both databases order UUIDs (SQLite's upper-case text,
    /// PostgreSQL's bytes) by time first.
    static func timeOrdered(at date: Date) -> UUID {
        var generator = SystemRandomNumberGenerator()
        return timeOrdered(at: date, using: &generator)
    }

    /// `timeOrdered(at:)` with its random bits from `generator`.
    static func timeOrdered(at date: Date, using generator: inout some RandomNumberGenerator) -> UUID {
        let milliseconds = UInt64(max(date.timeIntervalSince1970 * 1000, 0))
        let high = milliseconds << 16 | (0x7000 | generator.next() & 0x0FFF)  // version 7
        let low = 0x8000_0000_0000_0000 | generator.next() >> 2  // the RFC's variant
        return withUnsafeBytes(of: (high.bigEndian, low.bigEndian)) { bytes in
            UUID(uuid: bytes.load(as: uuid_t.self))
        }
    }
}

/// Random bits for the ids of one fan-out batch: xoshiro256**, seeded from the system's
/// generator. Asking the system for every id cost a system call each.
struct IDRandomness: RandomNumberGenerator {
    private var state: (UInt64, UInt64, UInt64, UInt64)

    init() {
        var system = SystemRandomNumberGenerator()
        state = (system.next(), system.next(), system.next(), system.next() | 1)
    }

    mutating func next() -> UInt64 {
        let result = rotate(state.1 &* 5, 7) &* 9
        let shifted = state.1 << 17
        state.2 ^= state.0
        state.3 ^= state.1
        state.1 ^= state.2
        state.0 ^= state.3
        state.2 ^= shifted
        state.3 = rotate(state.3, 45)
        return result
    }

    private func rotate(_ value: UInt64, _ count: UInt64) -> UInt64 {
        value << count | value >> (64 - count)
    }
}

extension UUID {
    /// A UUID from its 36 characters of text with dashes, either case; `nil` for anything else.
    /// Foundation's `UUID(uuidString:)` scans with the C library: SQLite hands fan-out and the
    /// queue a few ids as text per delivery.
    init?(canonicalText text: String) {
        var text = text
        let parsed: uuid_t? = text.withUTF8 { utf8 in
            guard utf8.count == 36 else { return nil }
            var bytes: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            let valid = withUnsafeMutableBytes(of: &bytes) { output -> Bool in
                var position = 0
                for index in 0..<16 {
                    if index == 4 || index == 6 || index == 8 || index == 10 {
                        guard utf8[position] == UInt8(ascii: "-") else { return false }
                        position += 1
                    }
                    guard let high = utf8[position].hexDigitValue, let low = utf8[position + 1].hexDigitValue else {
                        return false
                    }
                    output[index] = high << 4 | low
                    position += 2
                }
                return true
            }
            return valid ? bytes : nil
        }
        guard let parsed else { return nil }
        self.init(uuid: parsed)
    }
}

/// SQLite stores a UUID as its upper-case text, as the driver's `Codable` path did. Converted
/// directly, a decoded id costs no nested decoder, no dynamic casts and no C scanning: the
/// queue and fan-out read several per delivery.
extension UUID: @retroactive SQLiteDataConvertible {
    public init?(sqliteData: SQLiteData) {
        switch sqliteData {
        case .text(let text):
            guard let uuid = UUID(canonicalText: text) else { return nil }
            self = uuid
        case .blob(var buffer) where buffer.readableBytes == 16:
            guard let bytes = buffer.readBytes(length: 16) else { return nil }
            self = bytes.withUnsafeBytes { UUID(uuid: $0.load(as: uuid_t.self)) }
        default:
            return nil
        }
    }

    public var sqliteData: SQLiteData? { .text(upperCaseText) }
}
