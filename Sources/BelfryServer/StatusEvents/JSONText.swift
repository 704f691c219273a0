import BelfryCore
import Foundation

/// JSON text written directly, as `Response.jsonEncoder` writes it (keys sorted, `/` not
/// escaped): a status event's body is written for every message, and going through `Encodable`
/// cost more than the rest of queueing it.
enum JSONText {
    static func write(_ value: JSONValue, into text: inout String) {
        switch value {
        case .null: text += "null"
        case .bool(let flag): text += flag ? "true" : "false"
        case .number(let number): write(number, into: &text)
        case .string(let string): write(string, into: &text)
        case .array(let elements):
            text += "["
            for (index, element) in elements.enumerated() {
                if index > 0 { text += "," }
                write(element, into: &text)
            }
            text += "]"
        case .object(let fields): write(fields, into: &text)
        }
    }

    static func write(_ fields: [String: JSONValue], into text: inout String) {
        text += "{"
        for (index, key) in fields.keys.sorted().enumerated() {
            if index > 0 { text += "," }
            write(key, into: &text)
            text += ":"
            write(fields[key] ?? .null, into: &text)
        }
        text += "}"
    }

    /// A whole number as an integer, anything else as JSONEncoder writes a Double.
    static func write(_ number: Double, into text: inout String) {
        if number.rounded() == number, abs(number) < 1e15 {
            text += String(Int(number))
        } else if number.isFinite {
            text += "\(number)"
        } else {
            text += "null"
        }
    }

    static func write(_ string: String, into text: inout String) {
        text += "\""
        // Most strings (ids, types, names) need no escape: appended whole.
        guard string.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") })
        else {
            text += string
            text += "\""
            return
        }
        for scalar in string.unicodeScalars {
            switch scalar {
            case "\"": text += "\\\""
            case "\\": text += "\\\\"
            case "\n": text += "\\n"
            case "\r": text += "\\r"
            case "\t": text += "\\t"
            case "\u{08}": text += "\\b"
            case "\u{0C}": text += "\\f"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                text += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: text.unicodeScalars.append(scalar)
            }
        }
        text += "\""
    }
}
