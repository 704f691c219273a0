import BelfryCore
import Fluent
import Foundation
import SQLKit

/// The category throttle: at most `limit` notifications per user in any `window_seconds` on
/// the channels other than the inbox. Each user and category has one row holding the times of
/// the notifications it let through; fan-out locks the rows of a batch's users (in user id
/// order, `FOR UPDATE` on PostgreSQL; SQLite writes one transaction at a time), so instances
/// sharing a database count every notification once and the limit holds across them.
enum Throttle {
    /// Which of `users` `category` may reach now, recording a notification for each of them.
    static func admit(
        _ users: [UUID], category: String, rule: ThrottleRule, now: Date, storage: BelfryDatabase,
        on db: any Database
    ) async throws -> Set<UUID> {
        guard !users.isEmpty else { return [] }
        // The order PostgreSQL sorts uuids in: hex digits compare as the bytes do.
        let sorted = Array(Set(users)).sorted { $0.uuidString < $1.uuidString }
        try await storage.insert(
            into: Tables.throttleState, columns: ["user_id", "category", "times"],
            rows: sorted.map { [.id($0), .text(category), .text("[]")] }, rowsPerStatement: 500,
            ignoringConflictsOn: ["user_id", "category"], on: db)
        var times: [UUID: [Double]] = [:]
        for chunk in sorted.chunked(500) {
            let select = db.sql.select().columns("user_id", "times").from(Tables.throttleState)
                .where("category", .equal, category).where("user_id", .in, Array(chunk)).orderBy("user_id")
            let locked = storage.kind == .postgres ? select.lockingClause(SQLRaw("FOR UPDATE")) : select
            for row in try await locked.all() {
                let text = try row.decode(column: "times", as: String.self)
                times[try row.decode(column: "user_id", as: UUID.self)] =
                    (try? JSONDecoder().decode([Double].self, from: Data(text.utf8))) ?? []
            }
        }
        let start = now.timeIntervalSince1970 - Double(rule.windowSeconds)
        var admitted = Set<UUID>()
        for user in sorted {
            var recent = (times[user] ?? []).filter { $0 > start }
            if recent.count < rule.limit {
                recent.append(now.timeIntervalSince1970)
                admitted.insert(user)
            }
            let text = String(decoding: try JSONEncoder().encode(recent), as: UTF8.self)
            try await db.sql.update(Tables.throttleState).set("times", to: text)
                .where("user_id", .equal, user).where("category", .equal, category).run()
        }
        return admitted
    }
}
