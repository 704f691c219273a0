import Foundation

/// A provider's `Retry-After` header (RFC 9110 §10.2.3): delta-seconds or an HTTP-date.
enum RetryAfter {
    /// The seconds to wait from `now`, or `nil` when the value is missing or unreadable. A
    /// date in the past is a wait of zero.
    static func seconds(_ value: String?, now: Date) -> TimeInterval? {
        guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        if value.allSatisfy(\.isASCIIDigit) {
            // delta-seconds is 1*DIGIT: a value too long for Int is still a (very long) wait.
            return TimeInterval(Int(value) ?? Int.max)
        }
        return date(value).map { max($0.timeIntervalSince(now), 0) }
    }

    /// An HTTP-date in the preferred IMF-fixdate form, or one of the two obsolete forms a
    /// recipient must also accept (RFC 9110 §5.6.7). Read rarely (a 429 or 503 answer), so the
    /// formatters are not kept.
    static func date(_ value: String) -> Date? {
        // asctime pads a one-digit day with a space ("Nov  6").
        let text = value.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
        // The two forms with a zone must say GMT: a formatter would also read them without it.
        let patterns =
            text.hasSuffix(" GMT")
            ? [
                "EEE, dd MMM yyyy HH:mm:ss 'GMT'",  // Sun, 06 Nov 1994 08:49:37 GMT
                "EEEE, dd-MMM-yy HH:mm:ss 'GMT'",  // Sunday, 06-Nov-94 08:49:37 GMT
            ] : ["EEE MMM d HH:mm:ss yyyy"]  // Sun Nov  6 08:49:37 1994
        for pattern in patterns {
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.timeZone = TimeZone(identifier: "GMT")
            formatter.dateFormat = pattern
            formatter.isLenient = false
            if let date = formatter.date(from: text) { return date }
        }
        return nil
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { ("0"..."9").contains(self) }
}
