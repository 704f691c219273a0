import Foundation

/// A JSON object written as bytes, in the order its fields are given (callers give them
/// sorted); strings escaped as JSONSerialization escapes them, slashes left as they are.
public struct JSONBytes {
    private var bytes: [UInt8] = [UInt8(ascii: "{")]
    /// Whether the object being written has a field yet, one level per open object.
    private var started: [Bool] = [false]

    public init() {
        bytes.reserveCapacity(512)
    }

    private mutating func key(_ name: String) {
        if started[started.count - 1] { bytes.append(UInt8(ascii: ",")) }
        started[started.count - 1] = true
        string(name)
        bytes.append(UInt8(ascii: ":"))
    }

    public mutating func open(_ name: String) {
        key(name)
        bytes.append(UInt8(ascii: "{"))
        started.append(false)
    }

    public mutating func close() {
        bytes.append(UInt8(ascii: "}"))
        started.removeLast()
    }

    public mutating func field(_ name: String, _ value: String) {
        key(name)
        string(value)
    }

    public mutating func field(_ name: String, _ value: Int) {
        key(name)
        bytes.append(contentsOf: String(value).utf8)
    }

    /// A UUID as a string in lower case, written from its bytes: no `uuidString` and no
    /// `lowercased()` per field.
    public mutating func field(_ name: String, uuid: UUID) {
        key(name)
        let hex: StaticString = "0123456789abcdef"
        bytes.append(UInt8(ascii: "\""))
        withUnsafeBytes(of: uuid.uuid) { raw in
            hex.withUTF8Buffer { digits in
                for (index, byte) in raw.enumerated() {
                    if index == 4 || index == 6 || index == 8 || index == 10 { bytes.append(UInt8(ascii: "-")) }
                    bytes.append(digits[Int(byte >> 4)])
                    bytes.append(digits[Int(byte & 0xF)])
                }
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    /// A date as `JSONEncoder`'s `.iso8601` writes it: UTC, whole seconds (the fraction dropped),
    /// such as `2026-11-26T19:04:00Z`; from the date's seconds by `gmtime_r`, with no formatter.
    public mutating func field(_ name: String, date: Date) {
        key(name)
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        let (year, month, day) = (Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1, Int(parts.tm_mday))
        let time = Int(parts.tm_hour) * 3600 + Int(parts.tm_min) * 60 + Int(parts.tm_sec)
        func digits(_ value: Int, _ count: Int) {
            var divisor = 1
            for _ in 1..<count { divisor *= 10 }
            while divisor > 0 {
                bytes.append(UInt8(ascii: "0") + UInt8(value / divisor % 10))
                divisor /= 10
            }
        }
        bytes.append(UInt8(ascii: "\""))
        digits(year, 4)
        bytes.append(UInt8(ascii: "-"))
        digits(month, 2)
        bytes.append(UInt8(ascii: "-"))
        digits(day, 2)
        bytes.append(UInt8(ascii: "T"))
        digits(time / 3600, 2)
        bytes.append(UInt8(ascii: ":"))
        digits(time / 60 % 60, 2)
        bytes.append(UInt8(ascii: ":"))
        digits(time % 60, 2)
        bytes.append(contentsOf: [UInt8(ascii: "Z"), UInt8(ascii: "\"")])
    }

    /// A value that is JSON text already.
    public mutating func field(_ name: String, raw: String) {
        key(name)
        bytes.append(contentsOf: raw.utf8)
    }

    public mutating func finish() -> Data {
        bytes.append(UInt8(ascii: "}"))
        return Data(bytes)
    }

    private mutating func string(_ text: String) {
        Self.appendString(text, to: &bytes)
    }

    /// `text` as a JSON string (RFC 8259 §7) at the end of `bytes`: quotes, backslashes and
    /// control characters escaped, the short forms where JSONSerialization and JSONEncoder use
    /// them, slashes left as they are.
    public static func appendString(_ text: String, to bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "\""))
        // Most text needs no escape: it is copied whole, not appended a byte at a time (which
        // was a twentieth of the webhook client's loop).
        guard text.utf8.contains(where: needsEscape) else {
            bytes.append(contentsOf: text.utf8)
            bytes.append(UInt8(ascii: "\""))
            return
        }
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                bytes.append(UInt8(ascii: "\\"))
                bytes.append(byte)
            case 0x0A: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0x08: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "b")])
            case 0x0C: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "f")])
            case ..<0x20:
                bytes.append(contentsOf: "\\u00".utf8)
                bytes.append(hexDigits[Int(byte >> 4)])
                bytes.append(hexDigits[Int(byte & 0xF)])
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    private static func needsEscape(_ byte: UInt8) -> Bool {
        byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\")
    }
}
