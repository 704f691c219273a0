import Foundation
import SQLKit

/// The deliveries waiting, counted by channel: for `/metrics`, and the console's figures and
/// queue-depth samples.
enum Outbox {
    /// Queued or under way: what the queue has still to do.
    static let pendingStatuses: [DeliveryStatus] = [.queued, .running]

    /// Deliveries in each of `statuses`, by channel, in one grouped query.
    static func counts(
        _ statuses: [DeliveryStatus], on sql: any SQLDatabase
    ) async throws -> [DeliveryStatus: [String: Int]] {
        var counts: [DeliveryStatus: [String: Int]] = [:]
        for row in try await sql.select()
            .columns("channel", "status").column(SQLFunction("COUNT", args: SQLLiteral.all), as: "n")
            .from(Tables.deliveries)
            .where("status", .in, statuses.map(\.rawValue))
            .groupBy("channel").groupBy("status").all()
        {
            guard let status = DeliveryStatus(rawValue: try row.decode(column: "status", as: String.self)) else {
                continue
            }
            counts[status, default: [:]][try row.decode(column: "channel", as: String.self)] = try row.decode(
                column: "n", as: Int.self)
        }
        return counts
    }

    /// Seconds the oldest delivery due by `now` has waited, by channel (channels with none due
    /// are left out). Read along the claim index: a channel's first queued row is its oldest.
    static func oldestDue(now: Date, on sql: any SQLDatabase) async throws -> [String: Double] {
        var ages: [String: Double] = [:]
        for row in try await sql.select()
            .column("channel").column(SQLFunction("MIN", args: SQLColumn("next_attempt_at")), as: "due")
            .from(Tables.deliveries)
            .where("status", .equal, DeliveryStatus.queued.rawValue)
            .where("next_attempt_at", .lessThanOrEqual, now)
            .groupBy("channel").all()
        {
            let due = try row.decode(column: "due", as: Date.self)
            ages[try row.decode(column: "channel", as: String.self)] = max(0, now.timeIntervalSince(due))
        }
        return ages
    }

    /// Deliveries queued or under way, by channel, from `counts` of at least those statuses.
    static func pending(in counts: [DeliveryStatus: [String: Int]]) -> [String: Int] {
        pendingStatuses.compactMap { counts[$0] }.reduce(into: [:]) { total, byChannel in
            total.merge(byChannel, uniquingKeysWith: +)
        }
    }
}
