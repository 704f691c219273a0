import Foundation

/// A daily window in which a user's push notifications wait (the inbox still receives at once).
/// Read in `timeZone`, or the user's time zone when absent. A window may cross midnight.
public struct QuietHours: Codable, Hashable, Sendable {
    /// Local start time, `HH:mm`.
    public var start: String
    /// Local end time, `HH:mm`, when held notifications go out.
    public var end: String
    /// An IANA time zone; `nil` uses the user's own.
    public var timeZone: String?

    public init(start: String, end: String, timeZone: String? = nil) {
        self.start = start
        self.end = end
        self.timeZone = timeZone
    }

    enum CodingKeys: String, CodingKey, CaseIterable {
        case start, end
        case timeZone = "time_zone"
    }

    /// The problems with these hours, each naming its field; empty when they are valid.
    public var problems: [String] {
        var problems: [String] = []
        for (name, value) in [("start", start), ("end", end)] where Self.minutes(value) == nil {
            problems.append("field \"\(name)\" must be a local time HH:mm such as 22:00, got \"\(value)\"")
        }
        if let startMinute = Self.minutes(start), startMinute == Self.minutes(end) {
            problems.append("fields \"start\" and \"end\" must differ")
        }
        if let timeZone, TimeZone(identifier: timeZone) == nil {
            problems.append("field \"time_zone\" must be an IANA time zone such as Europe/Berlin, got \"\(timeZone)\"")
        }
        return problems
    }

    /// Minutes after midnight of an `HH:mm` time.
    static func minutes(_ text: String) -> Int? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, parts.allSatisfy({ $0.count == 2 }), let hour = Int(parts[0]),
            let minute = Int(parts[1]),
            (0...23).contains(hour), (0...59).contains(minute)
        else { return nil }
        return hour * 60 + minute
    }

    /// When a push due at `date` may go out: `date` itself outside the window, else the window's end.
    ///
    /// - Parameter userTimeZone: the user's zone, used when these hours name none (UTC when neither is known).
    public func release(of date: Date, userTimeZone: TimeZone?) -> Date {
        guard let startMinute = Self.minutes(start), let endMinute = Self.minutes(end), startMinute != endMinute else {
            return date
        }
        let zone = timeZone.flatMap(TimeZone.init(identifier:)) ?? userTimeZone ?? .gmt
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = zone
        let parts = calendar.dateComponents([.hour, .minute], from: date)
        let minute = (parts.hour ?? 0) * 60 + (parts.minute ?? 0)
        let inside =
            startMinute < endMinute
            ? (startMinute..<endMinute).contains(minute)
            : minute >= startMinute || minute < endMinute
        guard inside else { return date }
        let rule = CalendarRule(hour: endMinute / 60, minute: endMinute % 60)
        return rule.nextDate(after: date, in: zone) ?? date
    }

    /// Whether quiet hours apply to a category: not to those users cannot turn off, nor to
    /// time-sensitive or critical ones, which break through.
    public static func apply(to category: CategoryDefinition) -> Bool {
        guard category.isEditable else { return false }
        switch category.push.interruptionLevel {
        case .timeSensitive?, .critical?: return false
        case .passive?, .active?, nil: return true
        }
    }
}

extension QuietHours: RequestFields {
    public static var fields: Set<String> { CodingKeys.names }
}
