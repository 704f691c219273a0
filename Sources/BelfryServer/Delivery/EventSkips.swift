import BelfryCore
import Foundation
import SQLKit

/// The per-event count of channels left out, by reason, that `GET /v1/events/{id}` reports.
/// Fan-out adds the rule's skips; the queue adds fallbacks found unnecessary.
enum EventSkips {
    static func add(
        event: UUID, channel: String, reason: SkipReason, count: Int, on sql: any SQLDatabase
    ) async throws {
        try await sql.raw(
            """
            INSERT INTO event_skips (event_id, channel, reason, count)
            VALUES (\(bind: event), \(bind: channel), \(bind: reason.rawValue), \(bind: count))
            ON CONFLICT (event_id, channel, reason) DO UPDATE SET count = event_skips.count + excluded.count
            """
        ).run()
    }

    /// Adds a batch's skips: channel, then reason, then count.
    static func add(_ skips: [String: [SkipReason: Int]], event: UUID, on sql: any SQLDatabase) async throws {
        for (channel, reasons) in skips {
            for (reason, count) in reasons {
                try await add(event: event, channel: channel, reason: reason, count: count, on: sql)
            }
        }
    }
}
