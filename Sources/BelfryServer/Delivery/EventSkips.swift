import BelfryCore
import Fluent
import Foundation
import SQLKit

/// The per-event count of channels left out, by reason, that `GET /v1/events/{id}` reports.
/// Fan-out adds the rule's skips; the queue adds fallbacks found unnecessary.
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
}
