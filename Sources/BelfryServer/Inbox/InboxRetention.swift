import Fluent
import Foundation
import SQLKit

/// Purges inbox notifications that are read or archived and older than the retention age,
/// with their deliveries and those deliveries' attempts. Unread ones are kept however old.
struct InboxRetention: Sendable {
    let storage: BelfryDatabase
    let now: @Sendable () -> Date
    /// Days a read or archived notification is kept.
    let days: Int
    /// Rows deleted per statement, so one purge never holds the database for long.
    static let batch = 1_000

    /// - Returns: how many notifications were purged.
    @discardableResult
    func purge(on db: any Database) async throws -> Int {
        let cutoff = now().addingTimeInterval(-TimeInterval(days) * 86_400)
        var purged = 0
        while true {
            let deleted = try await storage.write(db) { tx in
                let ids = try await tx.sql.raw(
                    """
                    SELECT id FROM notifications
                    WHERE available_at < \(bind: cutoff) AND (read_at IS NOT NULL OR archived_at IS NOT NULL)
                    LIMIT \(literal: Self.batch)
                    """
                ).all().map { try $0.decode(column: "id", as: UUID.self) }
                guard !ids.isEmpty else { return 0 }
                // Their deliveries and those deliveries' attempts go with them.
                try await storage.deleteDeliveries(where: "notification_id IN (\(binds: ids))", on: tx.sql)
                try await tx.sql.delete(from: Tables.notifications).where("id", .in, ids).run()
                return ids.count
            }
            purged += deleted
            if deleted < Self.batch { return purged }
        }
    }
}
