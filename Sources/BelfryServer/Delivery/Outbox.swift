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
            .from("deliveries")
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

    /// Deliveries queued or under way, by channel, from `counts` of at least those statuses.
    static func pending(in counts: [DeliveryStatus: [String: Int]]) -> [String: Int] {
        pendingStatuses.compactMap { counts[$0] }.reduce(into: [:]) { total, byChannel in
            total.merge(byChannel, uniquingKeysWith: +)
        }
    }
}
