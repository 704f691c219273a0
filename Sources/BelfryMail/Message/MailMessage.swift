/// One email as RFC 5322 and MIME (RFC 2045–2047) describe it: a `multipart/alternative` body
/// with a plain text and an HTML part, both UTF-8 and quoted-printable, so every line of the
/// message stays within 78 octets (and far within SMTP's 998).
public struct MailMessage: Sendable {
    public var from: MailAddress
    public var to: MailAddress
    public var subject: String
    public var text: String
    public var html: String?
    /// Seconds since 1970, written as the `Date` header in UTC.
    public var date: Int64
    /// Without angle brackets: `local@domain`.
    public var messageID: String
    /// Further headers in order (`List-Unsubscribe`, …). Names are checked; values are
    /// written as unstructured text unless `structured`.
    public var headers: [Header]

    public struct Header: Sendable, Hashable {
        public var name: String
        public var value: String
        /// Written as given (angle-bracketed URLs, tokens): only control characters are removed.
        public var structured: Bool

        public init(_ name: String, _ value: String, structured: Bool = false) {
            self.name = name
            self.value = value
            self.structured = structured
        }
    }

    public init(
        from: MailAddress, to: MailAddress, subject: String, text: String, html: String? = nil, date: Int64,
        messageID: String, headers: [Header] = []
    ) {
        self.from = from
        self.to = to
        self.subject = subject
        self.text = text
        self.html = html
        self.date = date
        self.messageID = messageID
        self.headers = headers
    }

    /// The message as sent after DATA (before dot-stuffing), CRLF line ends throughout.
    /// - Parameter boundary: the multipart boundary; random unless a test fixes it.
    public func rendered(boundary: String = MailMessage.randomBoundary()) -> String {
        var lines: [String] = [
            "Date: \(Self.rfc5322Date(date))",
            "From: \(from.headerValue)",
            "To: \(to.headerValue)",
            "Message-ID: <\(messageID)>",
            "Subject: \(HeaderEncoding.text(subject))",
            "MIME-Version: 1.0",
        ]
        for header in headers where Self.isHeaderName(header.name) {
            let value =
                header.structured
                ? String(header.value.unicodeScalars.filter { $0.value >= 32 && $0.value != 127 })
                : HeaderEncoding.text(header.value)
            lines.append("\(header.name): \(value)")
        }
        let textPart = Self.part(type: "text/plain", body: text)
        guard let html else {
            lines += textPart
            return lines.joined(separator: "\r\n") + "\r\n"
        }
        lines.append("Content-Type: multipart/alternative; boundary=\"\(boundary)\"")
        lines.append("")
        lines.append("This is a MIME message: your mail program shows its text or HTML part.")
        lines.append("--\(boundary)")
        lines += textPart
        lines.append("--\(boundary)")
        lines += Self.part(type: "text/html", body: html)
        lines.append("--\(boundary)--")
        return lines.joined(separator: "\r\n") + "\r\n"
    }

    /// A part's headers, a blank line and its quoted-printable body.
    private static func part(type: String, body: String) -> [String] {
        [
            "Content-Type: \(type); charset=utf-8",
            "Content-Transfer-Encoding: quoted-printable",
            "",
            QuotedPrintable.encode(body),
        ]
    }

    /// A boundary that cannot occur in quoted-printable text: it holds `=_`, which QP never writes.
    public static func randomBoundary() -> String {
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz0123456789")
        return "=_belfry_" + String((0..<24).map { _ in alphabet[Int(generator.next() % UInt64(alphabet.count))] })
    }

    /// Field names are printable ASCII without a colon (RFC 5322 §2.2).
    static func isHeaderName(_ name: String) -> Bool {
        !name.isEmpty && name.unicodeScalars.allSatisfy { $0.value > 32 && $0.value < 127 && $0 != ":" }
    }

    /// `Mon, 23 Nov 2026 17:06:38 +0000` (RFC 5322 §3.3), computed without Foundation.
    static func rfc5322Date(_ seconds: Int64) -> String {
        let days = seconds >= 0 ? seconds / 86400 : (seconds - 86399) / 86400
        let secondOfDay = seconds - days * 86400
        // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        let weekday = ((days % 7) + 11) % 7  // 1970-01-01 was a Thursday.
        let weekdays = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func two(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return
            "\(weekdays[Int(weekday)]), \(two(day)) \(months[Int(month - 1)]) \(year) "
            + "\(two(secondOfDay / 3600)):\(two(secondOfDay / 60 % 60)):\(two(secondOfDay % 60)) +0000"
    }
}
