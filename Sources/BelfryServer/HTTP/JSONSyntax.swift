/// A strict check of JSON text's syntax (RFC 8259): what Foundation's decoder lets through,
/// such as a trailing comma, is refused, and a problem is placed by line and column, so that a
/// client learns where its body broke. It reads the bytes once and builds nothing.
struct JSONSyntax {
    struct Problem: Error, CustomStringConvertible {
        var message: String
        var line: Int
        var column: Int

        var description: String { "\(message) at line \(line), column \(column)" }
    }

    private enum Container {
        case array, object
    }

    /// What may come next.
    private enum Expect {
        case value, valueOrEnd, key, keyOrEnd, colon, commaOrEnd, end
    }

    /// The first syntax error in `bytes`, or `nil` when it is one JSON value.
    static func problem<Bytes: Collection>(in bytes: Bytes) -> Problem? where Bytes.Element == UInt8 {
        var checker = JSONSyntax()
        return checker.check(Array(bytes))
    }

    /// What a request body's keys are checked against: the fields the body takes, and those of
    /// the objects inside it, by the path `nested` names them with (`content`, `schedule.calendar`;
    /// a list's objects by the list's name).
    struct KeyRules: Sendable {
        var allowed: Set<String>
        var nested: [String: Set<String>]
    }

    /// What the keys of a body held, when its top is an object.
    struct KeyFindings: Sendable {
        /// Each unknown key's path (`content.zz`, `changes[2].x`) and the path of the object it is
        /// in as `nested` names it (empty for the body), in key order, depth first.
        var unknown: [(path: String, object: String)] = []
        /// The top-level keys whose value is `null`.
        var nulls: Set<String> = []
    }

    /// Checks `bytes`' syntax and, in the same pass, its keys against `rules`: only the body's
    /// object and the nested objects `rules` names are looked at, so a long list is read once
    /// and kept nowhere.
    static func check<Bytes: Collection>(
        _ bytes: Bytes, keys rules: KeyRules
    ) -> Result<KeyFindings, Problem> where Bytes.Element == UInt8 {
        var checker = JSONSyntax()
        checker.keys = KeyWalk(rules: rules)
        if let problem = checker.check(Array(bytes)) { return .failure(problem) }
        return .success(checker.keys?.findings() ?? KeyFindings())
    }

    private var stack: [Container] = []
    /// The key walk of `check(_:keys:)`, when asked for.
    private var keys: KeyWalk?
    private var expect = Expect.value
    private var line = 1
    private var lineStart = 0

    private mutating func check(_ bytes: [UInt8]) -> Problem? {
        var index = 0
        func fail(_ message: String, at position: Int) -> Problem {
            Problem(message: message, line: line, column: position - lineStart + 1)
        }
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case 0x20, 0x09, 0x0D:
                index += 1
                continue
            case 0x0A:
                index += 1
                line += 1
                lineStart = index
                continue
            default: break
            }
            switch expect {
            case .end:
                return fail("unexpected text after the JSON value", at: index)
            case .colon:
                guard byte == UInt8(ascii: ":") else { return fail("expected \":\" after the key", at: index) }
                expect = .value
                index += 1
            case .commaOrEnd:
                let closing: UInt8 = stack.last == .object ? UInt8(ascii: "}") : UInt8(ascii: "]")
                if byte == UInt8(ascii: ",") {
                    expect = stack.last == .object ? .key : .value
                    index += 1
                } else if byte == closing {
                    stack.removeLast()
                    keys?.close()
                    expect = stack.isEmpty ? .end : .commaOrEnd
                    index += 1
                } else {
                    return fail("expected \",\" or \"\(Character(Unicode.Scalar(closing)))\"", at: index)
                }
            case .key, .keyOrEnd:
                if byte == UInt8(ascii: "}") {
                    guard expect == .keyOrEnd else { return fail("a comma before \"}\" (trailing comma)", at: index) }
                    stack.removeLast()
                    keys?.close()
                    expect = stack.isEmpty ? .end : .commaOrEnd
                    index += 1
                    continue
                }
                guard byte == UInt8(ascii: "\"") else { return fail("expected a key in double quotes", at: index) }
                switch string(bytes, from: index) {
                case .success(let end):
                    keys?.key(Self.text(bytes[(index + 1)..<(end - 1)]))
                    index = end
                case .failure(let problem): return fail(problem.message, at: problem.column)
                }
                expect = .colon
            case .value, .valueOrEnd:
                if byte == UInt8(ascii: "]") {
                    guard expect == .valueOrEnd else {
                        return fail(
                            stack.last == .array ? "a comma before \"]\" (trailing comma)" : "expected a value",
                            at: index)
                    }
                    stack.removeLast()
                    keys?.close()
                    expect = stack.isEmpty ? .end : .commaOrEnd
                    index += 1
                    continue
                }
                switch value(bytes, from: index) {
                case .success(let end): index = end
                case .failure(let problem): return fail(problem.message, at: problem.column)
                }
            }
        }
        switch expect {
        case .end: return nil
        default: return fail(stack.isEmpty ? "the body has no JSON value" : "the JSON text ends too early", at: index)
        }
    }

    /// Where a failure is: `column` holds the byte offset; the caller turns it into line and column.
    private struct Failure: Error {
        var message: String
        var column: Int
    }

    /// Reads one value (or opens a container); the offset after it.
    private mutating func value(_ bytes: [UInt8], from start: Int) -> Result<Int, Failure> {
        let byte = bytes[start]
        if keys != nil {
            keys?.value(
                byte == UInt8(ascii: "{")
                    ? .object : byte == UInt8(ascii: "[") ? .array : byte == UInt8(ascii: "n") ? .null : .other)
        }
        switch byte {
        case UInt8(ascii: "{"):
            stack.append(.object)
            expect = .keyOrEnd
            return .success(start + 1)
        case UInt8(ascii: "["):
            stack.append(.array)
            expect = .valueOrEnd
            return .success(start + 1)
        case UInt8(ascii: "\""):
            expect = stack.isEmpty ? .end : .commaOrEnd
            return string(bytes, from: start)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            expect = stack.isEmpty ? .end : .commaOrEnd
            return number(bytes, from: start)
        default:
            for literal in ["true", "false", "null"] where bytes[start...].starts(with: literal.utf8) {
                expect = stack.isEmpty ? .end : .commaOrEnd
                return .success(start + literal.utf8.count)
            }
            return .failure(Failure(message: "expected a value", column: start))
        }
    }

    /// Reads a string from its opening quote; the offset after its closing quote.
    private func string(_ bytes: [UInt8], from start: Int) -> Result<Int, Failure> {
        var index = start + 1
        while index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: "\""):
                return .success(index + 1)
            case UInt8(ascii: "\\"):
                guard index + 1 < bytes.count else { break }
                let escaped = bytes[index + 1]
                if escaped == UInt8(ascii: "u") {
                    let digits = bytes[(index + 2)..<min(index + 6, bytes.count)]
                    guard digits.count == 4, digits.allSatisfy({ Character(Unicode.Scalar($0)).isHexDigit }) else {
                        return .failure(Failure(message: "\\u needs four hex digits", column: index))
                    }
                    index += 6
                } else {
                    guard "\"\\/bfnrt".utf8.contains(escaped) else {
                        return .failure(Failure(message: "an unknown escape in a string", column: index))
                    }
                    index += 2
                }
                continue
            case 0..<0x20:
                return .failure(Failure(message: "a control character in a string (escape it)", column: index))
            default:
                break
            }
            index += 1
        }
        return .failure(Failure(message: "a string that is not closed", column: start))
    }

    /// Reads a number; the offset after it.
    private func number(_ bytes: [UInt8], from start: Int) -> Result<Int, Failure> {
        var index = start
        func digits() -> Int {
            let from = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            return index - from
        }
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        let leadingZero = index < bytes.count && bytes[index] == UInt8(ascii: "0")
        let integer = digits()
        guard integer > 0, !(leadingZero && integer > 1) else {
            return .failure(Failure(message: "a number that is not JSON", column: start))
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard digits() > 0 else { return .failure(Failure(message: "a number that is not JSON", column: start)) }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                index += 1
            }
            guard digits() > 0 else { return .failure(Failure(message: "a number that is not JSON", column: start)) }
        }
        return .success(index)
    }

    /// A string's text from the bytes between its quotes, its escapes read.
    private static func text(_ raw: ArraySlice<UInt8>) -> String {
        guard raw.contains(UInt8(ascii: "\\")) else { return String(decoding: raw, as: UTF8.self) }
        var scalars = String.UnicodeScalarView()
        var utf8: [UInt8] = []
        func flush() {
            scalars.append(contentsOf: String(decoding: utf8, as: UTF8.self).unicodeScalars)
            utf8.removeAll()
        }
        var index = raw.startIndex
        func hex(at position: Int) -> UInt32 {
            UInt32(String(decoding: raw[position..<position + 4], as: UTF8.self), radix: 16) ?? 0xFFFD
        }
        while index < raw.endIndex {
            let byte = raw[index]
            guard byte == UInt8(ascii: "\\") else {
                utf8.append(byte)
                index += 1
                continue
            }
            let escaped = raw[index + 1]
            index += 2
            switch escaped {
            case UInt8(ascii: "b"): utf8.append(0x08)
            case UInt8(ascii: "f"): utf8.append(0x0C)
            case UInt8(ascii: "n"): utf8.append(0x0A)
            case UInt8(ascii: "r"): utf8.append(0x0D)
            case UInt8(ascii: "t"): utf8.append(0x09)
            case UInt8(ascii: "u"):
                flush()
                var code = hex(at: index)
                index += 4
                // A high surrogate and the low one after it make one scalar.
                if (0xD800..<0xDC00).contains(code), index + 6 <= raw.endIndex, raw[index] == UInt8(ascii: "\\"),
                    raw[index + 1] == UInt8(ascii: "u")
                {
                    let low = hex(at: index + 2)
                    if (0xDC00..<0xE000).contains(low) {
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                        index += 6
                    }
                }
                scalars.append(Unicode.Scalar(code) ?? "\u{FFFD}")
            default: utf8.append(escaped)  // \" \\ \/
            }
        }
        flush()
        return String(scalars)
    }
}

/// The walk of a body's keys beside the syntax check: a frame for each open object or array,
/// which knows whether its keys (or its elements' keys) are checked, and under which path.
private struct KeyWalk {
    enum Kind {
        case object, array, null, other
    }

    /// A step of a path, for putting the unknown keys in the order a sorted walk finds them.
    enum Step: Comparable {
        case key(String)
        case index(Int)
    }

    struct Frame {
        var isArray: Bool
        /// The keys this object takes, or its elements take (an array); nil when not checked.
        var allowed: Set<String>?
        var path: String
        /// The object's name in `nested`.
        var object: String
        var steps: [Step]
        /// The key whose value comes next (an object), or the current element's index (an array).
        var key: String? = nil
        var index = -1
    }

    let rules: JSONSyntax.KeyRules
    var frames: [Frame] = []
    var unknown: [(path: String, object: String, steps: [Step])] = []
    var nulls: Set<String> = []

    init(rules: JSONSyntax.KeyRules) {
        self.rules = rules
    }

    mutating func key(_ key: String) {
        guard var frame = frames.last, !frame.isArray else { return }
        frame.key = key
        if let allowed = frame.allowed, !allowed.contains(key) {
            unknown.append(
                (frame.path.isEmpty ? key : "\(frame.path).\(key)", frame.object, frame.steps + [.key(key)]))
        }
        frames[frames.count - 1] = frame
    }

    mutating func value(_ kind: Kind) {
        var child = Frame(isArray: kind == .array, allowed: nil, path: "", object: "", steps: [])
        if var parent = frames.last {
            if parent.isArray {
                parent.index += 1
                frames[frames.count - 1] = parent
                if kind == .object, let allowed = parent.allowed {
                    child.allowed = allowed
                    child.path = "\(parent.path)[\(parent.index)]"
                    child.object = parent.object
                    child.steps = parent.steps + [.index(parent.index)]
                }
            } else if let key = parent.key {
                if kind == .null, frames.count == 1 { nulls.insert(key) }
                let object = parent.object.isEmpty ? key : "\(parent.object).\(key)"
                if parent.allowed?.contains(key) == true, let inner = rules.nested[object],
                    kind == .object || kind == .array
                {
                    child.allowed = inner
                    child.path = parent.path.isEmpty ? key : "\(parent.path).\(key)"
                    child.object = object
                    child.steps = parent.steps + [.key(key)]
                }
            }
        } else if kind == .object {
            child.allowed = rules.allowed
        }
        if kind == .object || kind == .array { frames.append(child) }
    }

    mutating func close() {
        frames.removeLast()
    }

    func findings() -> JSONSyntax.KeyFindings {
        let ordered = unknown.sorted { $0.steps.lexicographicallyPrecedes($1.steps) }
        return JSONSyntax.KeyFindings(unknown: ordered.map { ($0.path, $0.object) }, nulls: nulls)
    }
}
