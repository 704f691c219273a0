import BelfryCore
import BelfryJSON
import Fluent
import Foundation
import SQLKit

/// The per-event count of channels left out, by reason, that `GET /v1/events/{id}` reports.
/// Fan-out adds the rule's skips; the queue adds fallbacks found unnecessary.
///
/// An event fanned out in one batch (most are: a few recipients each) keeps the rule's skips
/// in its own row, `events.skips`, written by the update that ends it: a stream of such events
/// would otherwise add a row and an index entry to `event_skips` for each channel and reason of
/// each event, the most written rows of fan-out. The rest go to `event_skips`, added to as each
/// page of a big event and each skip at send time comes; a read adds the two.
enum EventSkips {
    /// Skips by event, then channel, then reason.
    typealias Counts = [UUID: [String: [SkipReason: Int]]]

    /// Adds these counts to the stored ones, in one statement for however many events.
    static func add(_ skips: Counts, storage: BelfryDatabase, on db: any Database) async throws {
        var rows: [[BulkValue]] = []
        for (event, channels) in skips {
            for (channel, reasons) in channels {
                for (reason, count) in reasons {
                    rows.append([.id(event), .text(channel), .text(reason.rawValue), .integer(count)])
                }
            }
        }
        // Each (event, channel, reason) comes once: a statement may not update one row twice.
        _ = try await storage.insert(
            into: Tables.eventSkips, columns: ["event_id", "channel", "reason", "count"], rows: rows,
            rowsPerStatement: 500,
            onConflict: .update(
                target: ["event_id", "channel", "reason"], set: "count = event_skips.count + excluded.count"),
            on: db)
    }

    /// The counts of one event as `events.skips` holds them: a JSON object of channels, each an
    /// object of reasons and counts; nil when nothing was left out.
    static func column(_ counts: [String: [SkipReason: Int]]) -> String? {
        let channels = counts.filter { !$0.value.isEmpty }
        guard !channels.isEmpty else { return nil }
        var json = JSONBytes()
        for (channel, reasons) in channels.sorted(by: { $0.key < $1.key }) {
            json.open(channel)
            for (reason, count) in reasons.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
                json.field(reason.rawValue, count)
            }
            json.close()
        }
        return String(decoding: json.finish(), as: UTF8.self)
    }

    /// `events.skips` read back: counts by channel, then reason.
    static func counts(inColumn text: String) throws -> [String: [String: Int]] {
        try JSONDecoder().decode([String: [String: Int]].self, from: Data(text.utf8))
    }

    /// `events.skips` set to each event's counts, or left as it is for an event without skips:
    /// nil when no event has any.
    static func columnUpdate(_ counts: [(event: UUID, skips: [String: [SkipReason: Int]])]) -> SQLQueryString? {
        let cases = counts.compactMap { event, skips in
            column(skips).map { SQLQueryString("WHEN \(bind: event) THEN \(bind: $0)") }
        }
        guard !cases.isEmpty else { return nil }
        return "CASE id " + cases.joined(separator: " ") + " ELSE skips END"
    }
}
