import BelfryCore
import Foundation

/// Checks on text a client sends to be stored and shown to people.
enum TextCheck {
    /// The problem with `text` when it holds a control character (Unicode's Cc: U+0000–U+001F,
    /// U+007F–U+009F). Such characters show as nothing, or cut the text where it is stored
    /// (a NUL ends a C string); tab and line breaks are allowed where `multiline`.
    static func controlCharacters(in text: String, field: String, multiline: Bool = false) -> String? {
        // The two ranges by value: Cc is closed (Unicode's stability policy), and looking up
        // each scalar's general category was most of intake's checks of an event's text.
        for (offset, scalar) in text.unicodeScalars.enumerated()
        where scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) {
            if multiline, scalar == "\t" || scalar == "\n" || scalar == "\r" { continue }
            let code = String(scalar.value, radix: 16, uppercase: true)
            return
                "field \"\(field)\" holds the control character U+\(String(repeating: "0", count: 4 - code.count))\(code) "
                + "at position \(offset + 1); remove it"
        }
        return nil
    }
}

extension JSONValue {
    /// How deep the value nests: 1 for a scalar, one more for each list or object around it.
    var depth: Int {
        switch self {
        case .array(let elements): 1 + (elements.map(\.depth).max() ?? 0)
        case .object(let fields): 1 + (fields.values.map(\.depth).max() ?? 0)
        default: 1
        }
    }

    /// An event's `data` as stored (JSON text), or `nil` when it cannot be served: data stored
    /// before intake limited its depth may nest deeper than the readers around it take, and
    /// is then left out of the notification rather than fail the inbox page it is on.
    static func storedData(_ text: String) -> [String: JSONValue]? {
        guard let data = try? JSONDecoder().decode([String: JSONValue].self, from: Data(text.utf8)),
            JSONValue.object(data).depth <= EventIntake.maxDataDepth
        else { return nil }
        return data
    }
}
