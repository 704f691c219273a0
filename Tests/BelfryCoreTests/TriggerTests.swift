import BelfryCore
import Foundation
import Testing

@Suite("Triggers and calendar rules")
struct TriggerTests {
    static let berlin = TimeZone(identifier: "Europe/Berlin")!
    static let tokyo = TimeZone(identifier: "Asia/Tokyo")!

    /// A moment given as local wall-clock time in `zone`.
    static func local(_ text: String, _ zone: TimeZone) -> Date {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = zone
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss"
        return formatter.date(from: text)!
    }

    static func text(_ date: Date?, _ zone: TimeZone) -> String? {
        guard let date else { return nil }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = zone
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss EEE"
        return formatter.string(from: date)
    }

    @Test(
        "calendar rules find the next matching local time",
        arguments: [
            // rule, after (Berlin local), expected next (Berlin local)
            (CalendarRule(hour: 8), "2026-11-21 07:59:00", "2026-11-21 08:00:00 Sat"),
            (CalendarRule(hour: 8), "2026-11-21 08:00:00", "2026-11-22 08:00:00 Sun"),
            (CalendarRule(hour: 8, minute: 30), "2026-11-21 09:00:00", "2026-11-22 08:30:00 Sun"),
            (CalendarRule(weekday: 2, hour: 9), "2026-11-21 12:00:00", "2026-11-23 09:00:00 Mon"),
            (CalendarRule(minute: 15), "2026-11-21 10:20:00", "2026-11-21 11:15:00 Sat"),
            (CalendarRule(day: 31, hour: 12), "2026-11-21 00:00:00", "2026-12-31 12:00:00 Thu"),
            (CalendarRule(month: 2, day: 29), "2026-11-21 00:00:00", "2028-02-29 00:00:00 Tue"),
            // Spring forward: 02:30 does not exist on 29 March 2026 in Berlin.
            (CalendarRule(hour: 2, minute: 30), "2026-03-29 00:00:00", "2026-03-29 03:00:00 Sun"),
            // Fall back: 02:30 happens twice on 25 October 2026; the first one counts.
            (CalendarRule(hour: 2, minute: 30), "2026-10-25 00:00:00", "2026-10-25 02:30:00 Sun"),
        ])
    func nextLocalTime(rule: CalendarRule, after: String, expected: String) {
        let next = rule.nextDate(after: Self.local(after, Self.berlin), in: Self.berlin)
        #expect(Self.text(next, Self.berlin) == expected)
    }

    @Test("the same rule is a different moment in each recipient's time zone")
    func perTimeZone() throws {
        let rule = CalendarRule(hour: 8)
        let now = Self.local("2026-11-21 00:30:00", TimeZone(identifier: "UTC")!)
        let berlin = try #require(rule.nextDate(after: now, in: Self.berlin))
        let tokyo = try #require(rule.nextDate(after: now, in: Self.tokyo))
        #expect(Self.text(berlin, Self.berlin) == "2026-11-21 08:00:00 Sat")
        #expect(Self.text(tokyo, Self.tokyo) == "2026-11-22 08:00:00 Sun", "08:00 has passed in Tokyo already")
        #expect(tokyo.timeIntervalSince(berlin) == 16 * 3600)
    }

    @Test("rules with out-of-range or no fields are refused, naming the field")
    func validation() {
        #expect(CalendarRule(weekday: 8).problems == [#""weekday" must be from 1 to 7, got 8"#])
        #expect(CalendarRule(hour: 24, minute: -1).problems.count == 2)
        #expect(CalendarRule().problems == ["give at least one of month, day, weekday, hour, minute"])
        #expect(CalendarRule(weekday: 8).nextDate(after: Date(), in: Self.berlin) == nil)
    }

    @Test("moments and intervals")
    func momentsAndIntervals() {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        #expect(
            Trigger.at(now.addingTimeInterval(60)).nextDate(after: now, in: Self.berlin) == now.addingTimeInterval(60))
        #expect(
            Trigger.at(now.addingTimeInterval(-60)).nextDate(after: now, in: Self.berlin) == now,
            "a past moment is due at once")
        #expect(Trigger.interval(90, repeats: true).nextDate(after: now, in: Self.berlin) == now.addingTimeInterval(90))
        #expect(Trigger.interval(0, repeats: false).nextDate(after: now, in: Self.berlin) == nil)
        #expect(Trigger.calendar(CalendarRule(hour: 8, repeats: true)).repeats)
        #expect(!Trigger.at(now).repeats)
    }

    @Test("a repeating rule fires on each match in turn")
    func repeating() {
        let rule = CalendarRule(weekday: 6, hour: 17, repeats: true)
        var moment = Self.local("2026-11-21 00:00:00", Self.berlin)
        var fired: [String] = []
        for _ in 0..<3 {
            guard let next = rule.nextDate(after: moment, in: Self.berlin) else { break }
            fired.append(Self.text(next, Self.berlin) ?? "")
            moment = next
        }
        #expect(fired == ["2026-11-27 17:00:00 Fri", "2026-12-04 17:00:00 Fri", "2026-12-11 17:00:00 Fri"])
    }
}
