/// A server's reply (RFC 5321 §4.2): a three-digit code and one or more lines of text.
public struct SMTPReply: Sendable, Hashable, CustomStringConvertible {
    public var code: Int
    public var lines: [String]

    public init(code: Int, lines: [String]) {
        self.code = code
        self.lines = lines
    }

    public var isPositive: Bool { (200..<400).contains(code) }
    /// 5yz: the same command will fail again.
    public var isPermanent: Bool { code >= 500 }
    public var text: String { lines.joined(separator: " ") }
    public var description: String { "\(code) \(text)" }

    /// Collects reply lines (`250-first`, `250-second`, `250 last`) into replies.
    struct Parser {
        private var code: Int?
        private var lines: [String] = []

        struct Malformed: Error, CustomStringConvertible {
            var line: String
            var description: String { "the server sent a line that is not an SMTP reply: \"\(line.prefix(80))\"" }
        }

        /// Adds one line (without its line end); returns the reply it completes, if any.
        mutating func add(_ line: String) throws -> SMTPReply? {
            let scalars = Array(line.unicodeScalars)
            guard scalars.count >= 3, scalars[0..<3].allSatisfy({ ("0"..."9").contains($0) }),
                let value = Int(String(String.UnicodeScalarView(scalars[0..<3]))), (200..<600).contains(value),
                scalars.count == 3 || scalars[3] == " " || scalars[3] == "-",
                code == nil || code == value
            else { throw Malformed(line: line) }
            code = value
            lines.append(scalars.count > 4 ? String(String.UnicodeScalarView(scalars[4...])) : "")
            guard scalars.count == 3 || scalars[3] == " " else { return nil }
            defer {
                code = nil
                lines = []
            }
            return SMTPReply(code: value, lines: lines)
        }

        /// Whether part of a multi-line reply has arrived.
        var isMidReply: Bool { code != nil }
    }
}
