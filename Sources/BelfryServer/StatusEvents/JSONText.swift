import BelfryCore
import BelfryJSON
import Foundation

/// JSON written directly as bytes, as `Response.jsonEncoder` writes it (keys sorted, `/` not
/// escaped): a status event's body is written for every message, and going through `Encodable`
/// cost more than the rest of queueing it. Strings are escaped by `JSONBytes`, as webhook and
/// push bodies are.
enum JSONText {
    static func write(_ value: JSONValue, into json: inout [UInt8]) {
        switch value {
        case .null: json.append(contentsOf: "null".utf8)
        case .bool(let flag): json.append(contentsOf: (flag ? "true" : "false").utf8)
        case .number(let number): write(number, into: &json)
        case .string(let string): JSONBytes.appendString(string, to: &json)
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
            JSONBytes.appendString(key, to: &json)
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
}
