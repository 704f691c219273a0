/// A mailbox: an address with an optional display name, as in `Belfry <notify@example.org>`.
public struct MailAddress: Sendable, Hashable, CustomStringConvertible {
    public var name: String?
    /// `local@domain`, ASCII only (no SMTPUTF8).
    public var address: String

    public struct Invalid: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    /// - Throws: `Invalid` for anything that is not one plain ASCII address.
    public init(address: String, name: String? = nil) throws(Invalid) {
        guard Self.isValid(address) else {
            throw Invalid(description: "expected an address such as ada@example.org, got \"\(address)\"")
        }
        self.address = address
        self.name = name.map(Self.flatten).flatMap { $0.isEmpty ? nil : $0 }
    }

    /// Parses `Name <local@domain>`, `"Name" <local@domain>` or a bare `local@domain`.
    public init(parsing text: String) throws(Invalid) {
        let trimmed = text.trimmingWhitespace
        if trimmed.hasSuffix(">"), let open = trimmed.lastIndex(of: "<") {
            var name = String(trimmed[..<open]).trimmingWhitespace
            if name.count >= 2, name.hasPrefix("\""), name.hasSuffix("\"") {
                name = String(name.dropFirst().dropLast())
            }
            let address = String(trimmed[trimmed.index(after: open)..<trimmed.index(before: trimmed.endIndex)])
            try self.init(address: address, name: name)
        } else {
            try self.init(address: trimmed)
        }
    }

    /// The domain part, for Message-IDs.
    public var domain: String { String(address[address.index(after: address.lastIndex(of: "@")!)...]) }

    /// The mailbox as a header value: the name quoted or encoded (RFC 2047) as it needs.
    public var headerValue: String {
        guard let name else { return address }
        let phrase = HeaderEncoding.phrase(name)
        // After encoded words the address goes on a line of its own, which keeps every line
        // with an encoded word within RFC 2047's 76 characters.
        return phrase.hasSuffix("?=") ? "\(phrase)\r\n <\(address)>" : "\(phrase) <\(address)>"
    }

    public var description: String { headerValue }

    /// One `@`, a non-empty local part and domain, printable ASCII without the characters that
    /// would break out of an address (`<>()[],;:"` and spaces). Stricter than RFC 5321 allows,
    /// never looser.
    public static func isValid(_ address: String) -> Bool {
        let forbidden = Set("<>()[],;:\"\\ ")
        let parts = address.split(separator: "@", omittingEmptySubsequences: false)
        guard address.utf8.count <= 254, parts.count == 2, !parts[0].isEmpty, parts[0].utf8.count <= 64,
            !parts[1].isEmpty, !parts[1].hasPrefix("."), !parts[1].hasSuffix("."), !parts[1].contains("..")
        else { return false }
        return address.unicodeScalars.allSatisfy {
            $0.value > 32 && $0.value < 127 && !forbidden.contains(Character($0))
        }
    }

    /// A display name on one line: control characters (CR and LF among them) become spaces.
    private static func flatten(_ name: String) -> String {
        String(
            String.UnicodeScalarView(name.unicodeScalars.map { $0.properties.generalCategory == .control ? " " : $0 })
        )
        .trimmingWhitespace
    }
}

extension StringProtocol {
    var trimmingWhitespace: String {
        var scalars = Substring(self).unicodeScalars[...]
        while let first = scalars.first, first.properties.isWhitespace { scalars.removeFirst() }
        while let last = scalars.last, last.properties.isWhitespace { scalars.removeLast() }
        return String(String.UnicodeScalarView(scalars))
    }
}
