import BelfryCore
import Foundation

/// JSON written directly as bytes, as `Response.jsonEncoder` writes it (keys sorted, `/` not
/// escaped): a status event's body is written for every message, and going through `Encodable`
/// cost more than the rest of queueing it. PostgreSQL's bulk inserts write their rows with the
/// same string escaping.
enum JSONText {
    static func write(_ value: JSONValue, into json: inout [UInt8]) {
        switch value {
        case .null: json.append(contentsOf: "null".utf8)
        case .bool(let flag): json.append(contentsOf: (flag ? "true" : "false").utf8)
        case .number(let number): write(number, into: &json)
        case .string(let string): appendString(string, to: &json)
        case .array(let elements):
            json.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { json.append(UInt8(ascii: ",")) }
                write(element, into: &json)
            }
            json.append(UInt8(ascii: "]"))
        case .object(let fields): write(fields, into: &json)
        }
    }

    static func write(_ fields: [String: JSONValue], into json: inout [UInt8]) {
        json.append(UInt8(ascii: "{"))
        for (index, key) in fields.keys.sorted().enumerated() {
            if index > 0 { json.append(UInt8(ascii: ",")) }
            appendString(key, to: &json)
            json.append(UInt8(ascii: ":"))
            write(fields[key] ?? .null, into: &json)
        }
        json.append(UInt8(ascii: "}"))
    }

    /// A whole number as an integer, anything else as JSONEncoder writes a Double.
    static func write(_ number: Double, into json: inout [UInt8]) {
        if number.rounded() == number, abs(number) < 1e15 {
            json.append(contentsOf: String(Int(number)).utf8)
        } else if number.isFinite {
            json.append(contentsOf: "\(number)".utf8)
        } else {
            json.append(contentsOf: "null".utf8)
        }
    }

    /// `text` as a JSON string (RFC 8259 §7): quotes, backslashes and control characters
    /// escaped, the short forms where JSONEncoder uses them.
    static func appendString(_ text: String, to json: inout [UInt8]) {
        json.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                json.append(UInt8(ascii: "\\"))
                json.append(byte)
            case 0x0A: json.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: json.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: json.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0x08: json.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "b")])
            case 0x0C: json.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "f")])
            case ..<0x20:
                json.append(contentsOf: "\\u00".utf8)
                json.append(hexDigits[Int(byte >> 4)])
                json.append(hexDigits[Int(byte & 0xF)])
            default:
                json.append(byte)
            }
        }
        json.append(UInt8(ascii: "\""))
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)
}
