import Foundation
import SQLKit

/// The deliveries waiting, counted by channel: for `/metrics`, and the console's figures and
/// queue-depth samples. A scrape must stay cheap when the outbox is long, which is when it is
/// watched: with a million deliveries queued, the grouped reads of `deliveries_due` took over a
/// second on SQLite, looking up each row for its channel (BENCHMARKS.md).
enum Outbox {
    /// Queued or under way: what the queue has still to do.
    static let pendingStatuses: [DeliveryStatus] = [.queued, .running]

    /// Deliveries in each of `statuses`, by channel, in one statement (one snapshot: a delivery
    /// claimed meanwhile is not counted twice): the queued ones counted in the claim index, which
    /// holds their channel, the others grouped by channel and status.
    static func counts(
        _ statuses: [DeliveryStatus], on sql: any SQLDatabase
    ) async throws -> [DeliveryStatus: [String: Int]] {
        guard !statuses.isEmpty else { return [:] }
        var counts: [DeliveryStatus: [String: Int]] = [:]
        for row in try await sql.raw(countsQuery(statuses, on: sql)).all() {
            guard let status = DeliveryStatus(rawValue: try row.decode(column: "status", as: String.self)) else {
                continue
            }
            counts[status, default: [:]][try row.decode(column: "channel", as: String.self)] = try row.decode(
                column: "n", as: Int.self)
        }
        return counts
    }

    /// The statement of ``counts(_:on:)``. SQLite's planner, without statistics, would count the
    /// queued rows in `deliveries_due` and read each one for its channel, so it is told which
    /// index to use; PostgreSQL chooses by its statistics. The queued rows' status is written as
    /// a constant: read from each row, it would take SQLite to the table for every one.
    static func countsQuery(_ statuses: [DeliveryStatus], on sql: any SQLDatabase) -> SQLQueryString {
        var parts: [SQLQueryString] = []
        if statuses.contains(.queued) {
            let index = sql.dialect.name == "sqlite" ? " INDEXED BY deliveries_claim" : ""
            parts.append(
                """
                SELECT channel, \(unsafeRaw: queued) AS status, COUNT(*) AS n FROM deliveries\(unsafeRaw: index) \
                WHERE status = \(unsafeRaw: queued) GROUP BY channel
                """)
        }
        let others = statuses.filter { $0 != .queued }.map(\.rawValue)
        if !others.isEmpty {
            parts.append(
                """
                SELECT channel, status, COUNT(*) AS n FROM deliveries \
                WHERE status IN (\(binds: others)) GROUP BY channel, status
                """)
        }
        return parts.joined(separator: " UNION ALL ")
    }

    /// The claim index's condition, written as it is: a bound value would not show either
    /// database that the index holds the rows asked for.
    private static let queued = "'\(DeliveryStatus.queued.rawValue)'"

    /// Seconds the oldest delivery due by `now` has waited, for each of `channels` that has one.
    static func oldestDue(now: Date, channels: [String], on sql: any SQLDatabase) async throws -> [String: Double] {
        guard !channels.isEmpty else { return [:] }
        var ages: [String: Double] = [:]
        for row in try await sql.raw(firstQueued(channels)).all() {
            guard let due = try row.decode(column: "due", as: Date?.self), due <= now else { continue }
            ages[try row.decode(column: "channel", as: String.self)] = now.timeIntervalSince(due)
        }
        return ages
    }

    /// Each channel's first queued delivery, by due time: the first entry of its part of the
    /// claim index, one lookup a channel. (A grouped `MIN` over every channel reads them all.)
    static func firstQueued(_ channels: [String]) -> SQLQueryString {
        let parts: [SQLQueryString] = channels.map { channel in
            """
            SELECT \(bind: channel) AS channel, (SELECT MIN(next_attempt_at) FROM deliveries \
            WHERE status = \(unsafeRaw: queued) AND channel = \(bind: channel)) AS due
            """
        }
        return parts.joined(separator: " UNION ALL ")
    }

    /// Deliveries queued or under way, by channel, from `counts` of at least those statuses.
    static func pending(in counts: [DeliveryStatus: [String: Int]]) -> [String: Int] {
        pendingStatuses.compactMap { counts[$0] }.reduce(into: [:]) { total, byChannel in
            total.merge(byChannel, uniquingKeysWith: +)
        }
    }
}
