import BelfryTestSupport
import Foundation
import SQLKit
import Testing
import Vapor

@testable import BelfryServer

@Suite("The queue's updates by id find their rows by id")
struct StatusConditionTests {
    /// The planners chose the status index for every such update: SQLite, which keeps no
    /// statistics, always, and PostgreSQL when its statistics said few deliveries had that
    /// status (`EXPLAIN` on a table of 20 000 deliveries analysed while none was running).
    @Test(
        "with a status checked, an update of results searches the primary key, not the status index",
        arguments: TestDatabase.allCases)
    func updateByIDs(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let ids = (0..<10).map { _ in UUID() }
            let checked = app.db.sql.update(Tables.deliveries).set("status", to: DeliveryStatus.sent.rawValue)
                .where("id", .in, ids).where("worker", .equal, "w").whereStatus(is: DeliveryStatus.running.rawValue)
            let plan = try await MetricsTests.plan("\(checked.query)", on: app.db)
            #expect(!plan.contains("deliveries_due"), "\(plan)")
            #expect(
                plan.contains("sqlite_autoindex_deliveries_1 (id=?)") || plan.contains("deliveries_pkey"), "\(plan)")
        }
    }

    /// The same for the status event sender's results, whose running rows `status_events_lease`
    /// holds.
    @Test(
        "with a status checked, a status event's result searches the primary key, not the lease index",
        arguments: TestDatabase.allCases)
    func statusEventsByIDs(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let ids = (0..<10).map { _ in UUID() }
            let checked = app.db.sql.update(Tables.statusEvents).set("status", to: "sent")
                .where("id", .in, ids).where("worker", .equal, "w").whereStatus(is: "running")
            let plan = try await MetricsTests.plan("\(checked.query)", on: app.db)
            #expect(!plan.contains("status_events_lease"), "\(plan)")
            #expect(
                plan.contains("sqlite_autoindex_status_events_1 (id=?)") || plan.contains("status_events_pkey"),
                "\(plan)"
            )
        }
    }
}
