import BelfryTestSupport
import Foundation
import SQLKit
import Testing
import Vapor

@testable import BelfryServer

@Suite("Retention and erasure find a notification's deliveries and answers, and a delivery's attempts, by index")
struct ChildKeyTests {
    /// What inbox retention runs (`BelfryDatabase.deleteDeliveries`, then the notifications),
    /// and an answer's delete, with SQLite's foreign keys' cascades in its plans: no statement
    /// may read a whole table, which on SQLite it did once for every row deleted.
    @Test(
        "deleting notifications, their deliveries and attempts reads no table whole", arguments: TestDatabase.allCases)
    func deletesByIndex(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let ids = [UUID(), UUID()]
            let storage = BelfryDatabase(location: app.belfry.settings.database)
            let statements: [SQLQueryString] =
                storage.deliveryDeletes(where: "notification_id IN (\(binds: ids))") + [
                    "DELETE FROM notification_actions WHERE notification_id IN (\(binds: ids))",
                    "DELETE FROM notifications WHERE id IN (\(binds: ids))",
                ]
            for statement in statements {
                let plan = try await MetricsTests.plan(statement, on: app.db)
                #expect(!plan.contains("SCAN ") && !plan.contains("Seq Scan"), "\(plan)")
            }
        }
    }
}
