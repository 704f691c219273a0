/// Quoted-printable (RFC 2045 §6.7) for text bodies: readable in the raw message, every line
/// within 76 characters, line breaks kept as CRLF hard breaks.
public enum QuotedPrintable {
    public static func encode(_ text: String) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count * 11 / 10 + 16)
        var line: [UInt8] = []
        var previous: UInt8 = 0
        for octet in text.utf8 {
            if octet == UInt8(ascii: "\n") {
                // LF or CRLF ends a line; the CR is not part of it.
                if previous == UInt8(ascii: "\r"), line.last == UInt8(ascii: "\r") { line.removeLast() }
                encodeLine(line, into: &out)
                out += [13, 10]
                line.removeAll(keepingCapacity: true)
            } else {
                line.append(octet)
            }
            previous = octet
        }
        encodeLine(line, into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    private static let digits = Array("0123456789ABCDEF".utf8)

    /// One line, soft-broken (`=` at the end) so no output line exceeds 76 characters.
    private static func encodeLine(_ octets: [UInt8], into out: inout [UInt8]) {
        var width = 0
        for (index, octet) in octets.enumerated() {
            let last = index == octets.count - 1
            // White space at the end of a line would be lost in transit: it is encoded there.
            let literal =
                (33...60).contains(octet) || (62...126).contains(octet) || (!last && (octet == 32 || octet == 9))
            let size = literal ? 1 : 3
            // Room for the token plus a soft break's "=", unless this is the line's last token.
            if width + size > (last ? 76 : 75) {
                out += [UInt8(ascii: "="), 13, 10]
                width = 0
            }
            if literal {
                out.append(octet)
            } else {
                out += [UInt8(ascii: "="), digits[Int(octet >> 4)], digits[Int(octet & 15)]]
            }
            width += size
        }
    }
}
