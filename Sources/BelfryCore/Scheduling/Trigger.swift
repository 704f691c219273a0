import Foundation

/// When a notification is due, after the platform framework's triggers (seed 003): at a
/// moment, after an interval, or on a calendar rule read in a time zone. The server uses it
/// for scheduled events; the SDK can use it for local notifications.
public enum Trigger: Hashable, Sendable {
    case at(Date)
    /// An interval after the reference date; with `repeats`, every interval after that.
    case interval(TimeInterval, repeats: Bool)
    case calendar(CalendarRule)

    /// The first due date strictly after `date`, reading calendar rules in `timeZone`.
    ///
    /// - Parameters:
    ///   - date: for a one-off trigger, the moment it was set (an `.at` in the past is due at once);
    ///     for a repeating one, the last time it fired.
    /// - Returns: `nil` when the trigger will not fire again.
    public func nextDate(after date: Date, in timeZone: TimeZone) -> Date? {
        switch self {
        case .at(let moment):
            return max(moment, date)
        case .interval(let seconds, _):
            return seconds > 0 ? date.addingTimeInterval(seconds) : nil
        case .calendar(let rule):
            return rule.nextDate(after: date, in: timeZone)
        }
    }

    public var repeats: Bool {
        switch self {
        case .at: false
        case .interval(_, let repeats): repeats
        case .calendar(let rule): rule.repeats
        }
    }
}

/// Date components a due time must match, like `08:00 every Monday`, read in the recipient's
/// time zone. Components left out match any value, except that the ones finer than the finest
/// given are zero (`hour: 8` is 08:00:00, not any minute of that hour).
public struct CalendarRule: Codable, Hashable, Sendable {
    public var month: Int?
    public var day: Int?
    /// 1 is Sunday, 7 is Saturday, as in Foundation's Gregorian calendar.
    public var weekday: Int?
    public var hour: Int?
    public var minute: Int?
    public var repeats: Bool

    public init(
        month: Int? = nil, day: Int? = nil, weekday: Int? = nil, hour: Int? = nil, minute: Int? = nil,
        repeats: Bool = false
    ) {
        self.month = month
        self.day = day
        self.weekday = weekday
        self.hour = hour
        self.minute = minute
        self.repeats = repeats
    }

    /// The problems with this rule, each naming its field; empty when it is valid.
    public var problems: [String] {
        var problems: [String] = []
        let fields: [(String, Int?, ClosedRange<Int>)] = [
            ("month", month, 1...12), ("day", day, 1...31), ("weekday", weekday, 1...7), ("hour", hour, 0...23),
            ("minute", minute, 0...59),
        ]
        for (name, value, range) in fields {
            if let value, !range.contains(value) {
                problems.append("\"\(name)\" must be from \(range.lowerBound) to \(range.upperBound), got \(value)")
            }
        }
        if fields.allSatisfy({ $0.1 == nil }) {
            problems.append("give at least one of month, day, weekday, hour, minute")
        }
        return problems
    }

    /// The first matching time strictly after `date`. A local time skipped by a daylight-saving
    /// change is taken as the first time after the gap; a repeated one as its first occurrence.
    public func nextDate(after date: Date, in timeZone: TimeZone) -> Date? {
        guard problems.isEmpty else { return nil }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        var components = DateComponents()
        components.month = month
        components.day = day
        components.weekday = weekday
        // A rule naming a date but no hour means midnight; one naming only a minute means every hour.
        components.hour = hour ?? ((month ?? day ?? weekday) != nil ? 0 : nil)
        components.minute = minute ?? 0
        components.second = 0
        // `.nextTime` moves a local time lost to a daylight-saving gap to the first time after it,
        // but it also turns a missing date (31 November, 29 February) into the next day. So its
        // answer counts only when the date still matches the rule; otherwise the strict match does.
        let lenient = calendar.nextDate(
            after: date, matching: components, matchingPolicy: .nextTime, repeatedTimePolicy: .first,
            direction: .forward)
        if let lenient, matchesDate(lenient, calendar) { return lenient }
        return calendar.nextDate(
            after: date, matching: components, matchingPolicy: .strict, repeatedTimePolicy: .first, direction: .forward)
    }

    private func matchesDate(_ date: Date, _ calendar: Calendar) -> Bool {
        let found = calendar.dateComponents([.month, .day, .weekday], from: date)
        return (month == nil || month == found.month) && (day == nil || day == found.day)
            && (weekday == nil || weekday == found.weekday)
    }

    enum CodingKeys: String, CodingKey, CaseIterable {
        case month, day, weekday, hour, minute, repeats
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        month = try container.decodeIfPresent(Int.self, forKey: .month)
        day = try container.decodeIfPresent(Int.self, forKey: .day)
        weekday = try container.decodeIfPresent(Int.self, forKey: .weekday)
        hour = try container.decodeIfPresent(Int.self, forKey: .hour)
        minute = try container.decodeIfPresent(Int.self, forKey: .minute)
        repeats = try container.decodeIfPresent(Bool.self, forKey: .repeats) ?? false
    }
}

extension CalendarRule: RequestFields {
    public static var fields: Set<String> { CodingKeys.names }
}
