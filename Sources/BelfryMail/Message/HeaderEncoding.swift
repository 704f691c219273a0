/// Header values that survive any mail system: RFC 2047 encoded words for text that is not
/// plain printable ASCII, folded so that no line is longer than 78 octets (RFC 5322 §2.1.1).
public enum HeaderEncoding {
    /// Text per encoded word (whole characters only, RFC 2047 §5). A line holding an encoded
    /// word may be 76 characters at most (§2): 39 octets make a 64-character word, which fits
    /// after `Subject: ` or any field name Belfry writes, and after the space that starts a
    /// folded line.
    static let wordOctets = 39

    /// Unstructured text (a subject): as it is when it is printable ASCII that folds within 78
    /// octets, else as encoded words. Control characters, CR and LF included, become spaces,
    /// so a value can never start a header of its own.
    public static func text(_ value: String) -> String {
        let flat = oneLine(value)
        if flat.unicodeScalars.allSatisfy({ $0.value >= 32 && $0.value < 127 }), !flat.contains("=?"),
            let folded = foldASCII(flat)
        {
            return folded
        }
        return encodedWords(flat)
    }

    /// A display name (RFC 5322 phrase): as an atom sequence, a quoted string, or encoded words.
    public static func phrase(_ value: String) -> String {
        let flat = oneLine(value)
        guard flat.unicodeScalars.allSatisfy({ $0.value >= 32 && $0.value < 127 }), !flat.contains("=?") else {
            return encodedWords(flat)
        }
        let atext = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-/=?^_`{|}~ ")
        if flat.allSatisfy({ atext.contains($0) }) { return flat }
        return "\"" + flat.replacingAll("\\", with: "\\\\").replacingAll("\"", with: "\\\"") + "\""
    }

    /// `value` as UTF-8 base64 encoded words separated by folding white space.
    static func encodedWords(_ value: String) -> String {
        var words: [String] = []
        var chunk: [UInt8] = []
        for scalar in value.unicodeScalars {
            let octets = Array(String(scalar).utf8)
            if chunk.count + octets.count > wordOctets {
                words.append(word(chunk))
                chunk = []
            }
            chunk += octets
        }
        if !chunk.isEmpty || words.isEmpty { words.append(word(chunk)) }
        return words.joined(separator: "\r\n ")
    }

    private static func word(_ octets: [UInt8]) -> String {
        "=?UTF-8?B?" + Base64.encode(octets) + "?="
    }

    /// Folds printable ASCII at spaces so each line, with room for the longest header name
    /// Belfry writes, stays within 78 octets; `nil` when a word is too long to fold.
    private static func foldASCII(_ value: String) -> String? {
        let limit = 78 - "List-Unsubscribe-Post: ".count
        guard value.utf8.count > limit else { return value }
        var lines: [String] = []
        var line = ""
        for word in value.split(separator: " ", omittingEmptySubsequences: false) {
            if word.utf8.count > limit { return nil }
            if line.isEmpty {
                line = String(word)
            } else if line.utf8.count + 1 + word.utf8.count <= limit {
                line += " " + word
            } else {
                lines.append(line)
                line = String(word)
            }
        }
        lines.append(line)
        return lines.joined(separator: "\r\n ")
    }

    private static func oneLine(_ value: String) -> String {
        String(
            String.UnicodeScalarView(
                value.unicodeScalars.map { $0.properties.generalCategory == .control ? " " : $0 }))
    }
}

extension String {
    func replacingAll(_ target: String, with replacement: String) -> String {
        split(separator: target, omittingEmptySubsequences: false).joined(separator: replacement)
    }
}
