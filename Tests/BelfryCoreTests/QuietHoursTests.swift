import BelfryCore
import Foundation
import Testing

@Suite("Quiet hours")
struct QuietHoursTests {
    static let berlin = TimeZone(identifier: "Europe/Berlin")!

    @Test(
        "a push inside the window waits for its end; outside it goes at once",
        arguments: [
            // start, end, local time due, expected local release
            ("22:00", "07:00", "2026-11-21 23:30:00", "2026-11-22 07:00:00"),
            ("22:00", "07:00", "2026-11-22 06:59:00", "2026-11-22 07:00:00"),
            ("22:00", "07:00", "2026-11-22 07:00:00", "2026-11-22 07:00:00"),
            ("22:00", "07:00", "2026-11-21 21:59:00", "2026-11-21 21:59:00"),
            ("13:00", "14:30", "2026-11-21 13:10:00", "2026-11-21 14:30:00"),
            ("13:00", "14:30", "2026-11-21 14:30:00", "2026-11-21 14:30:00"),
            ("13:00", "14:30", "2026-11-21 12:00:00", "2026-11-21 12:00:00"),
        ])
    func release(start: String, end: String, due: String, expected: String) {
        let hours = QuietHours(start: start, end: end)
        let released = hours.release(of: TriggerTests.local(due, Self.berlin), userTimeZone: Self.berlin)
        #expect(TriggerTests.text(released, Self.berlin)?.dropLast(4) == Substring(expected))
    }

    @Test("the hours' own time zone wins over the user's")
    func ownZone() {
        let hours = QuietHours(start: "22:00", end: "07:00", timeZone: "Asia/Tokyo")
        // 15:00 in Berlin is 23:00 in Tokyo: quiet there, until 07:00 Tokyo = 23:00 Berlin.
        let released = hours.release(
            of: TriggerTests.local("2026-11-21 15:00:00", Self.berlin), userTimeZone: Self.berlin)
        #expect(TriggerTests.text(released, Self.berlin) == "2026-11-21 23:00:00 Sat")
    }

    @Test("bad hours are refused, naming the field")
    func validation() {
        #expect(QuietHours(start: "22:00", end: "07:00").problems.isEmpty)
        #expect(QuietHours(start: "24:00", end: "7:00").problems.count == 2)
        #expect(QuietHours(start: "08:00", end: "08:00").problems == [#"fields "start" and "end" must differ"#])
        #expect(QuietHours(start: "08:00", end: "09:00", timeZone: "Mars/Base").problems.count == 1)
    }

    @Test("security and time-sensitive categories break through")
    func breakThrough() {
        let plain = CategoryDefinition(id: "a", name: "A", channels: [])
        #expect(QuietHours.apply(to: plain))
        #expect(!QuietHours.apply(to: CategoryDefinition(id: "b", name: "B", isEditable: false, channels: [])))
        #expect(
            !QuietHours.apply(
                to: CategoryDefinition(
                    id: "c", name: "C", channels: [], push: PushHints(interruptionLevel: .timeSensitive))))
        #expect(
            !QuietHours.apply(
                to: CategoryDefinition(id: "d", name: "D", channels: [], push: PushHints(interruptionLevel: .critical)))
        )
        #expect(
            QuietHours.apply(
                to: CategoryDefinition(id: "e", name: "E", channels: [], push: PushHints(interruptionLevel: .passive))))
    }
}
