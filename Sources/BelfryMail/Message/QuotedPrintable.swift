/// Quoted-printable (RFC 2045 §6.7) for text bodies: readable in the raw message, every line
/// within 76 characters, line breaks kept as CRLF hard breaks.
public enum QuotedPrintable {
    public static func encode(_ text: String) -> String {
        var lines: [String] = []
        for line in text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" }) {
            lines.append(encodeLine(Array(line.utf8)))
        }
        return lines.joined(separator: "\r\n")
    }

    /// One line, soft-broken (`=` at the end) so no output line exceeds 76 characters.
    private static func encodeLine(_ octets: [UInt8]) -> String {
        var out = ""
        var width = 0
        for (index, octet) in octets.enumerated() {
            let last = index == octets.count - 1
            let token: String
            switch octet {
            case 33...60, 62...126:
                token = String(UnicodeScalar(octet))
            case 32, 9:
                // White space at the end of a line would be lost in transit: encode it there.
                token = last ? hex(octet) : String(UnicodeScalar(octet))
            default:
                token = hex(octet)
            }
            // Room for the token plus a soft break's "=", unless this is the line's last token.
            if width + token.count > (last ? 76 : 75) {
                out += "=\r\n"
                width = 0
            }
            out += token
            width += token.count
        }
        return out
    }

    private static func hex(_ octet: UInt8) -> String {
        let digits = Array("0123456789ABCDEF")
        return "=" + String(digits[Int(octet >> 4)]) + String(digits[Int(octet & 15)])
    }
}
