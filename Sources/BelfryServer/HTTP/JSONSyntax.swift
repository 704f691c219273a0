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

    private var stack: [Container] = []
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
                    expect = stack.isEmpty ? .end : .commaOrEnd
                    index += 1
                } else {
                    return fail("expected \",\" or \"\(Character(Unicode.Scalar(closing)))\"", at: index)
                }
            case .key, .keyOrEnd:
                if byte == UInt8(ascii: "}") {
                    guard expect == .keyOrEnd else { return fail("a comma before \"}\" (trailing comma)", at: index) }
                    stack.removeLast()
                    expect = stack.isEmpty ? .end : .commaOrEnd
                    index += 1
                    continue
                }
                guard byte == UInt8(ascii: "\"") else { return fail("expected a key in double quotes", at: index) }
                switch string(bytes, from: index) {
                case .success(let end): index = end
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
}
