import BelfryTestSupport
import Foundation
import SQLKit
import Testing
import Vapor

@testable import BelfryServer

@Suite("The queue's updates by id find their rows by id")
struct StatusConditionTests {
    /// A table updated by id with its status checked, and the index its status leads to.
    struct Table: Sendable, CustomTestStringConvertible {
        let name: String
        let statusIndex: String
        var testDescription: String { name }

        static let all = [
            Table(name: Tables.deliveries, statusIndex: "deliveries_due"),
            Table(name: Tables.statusEvents, statusIndex: "status_events_lease"),
        ]
    }

    /// The planners chose the status index for every such update: SQLite, which keeps no
    /// statistics, always, and PostgreSQL when its statistics said few rows had that status
    /// (`EXPLAIN` on a table of 20 000 deliveries analysed while none was running; on
    /// `status_events`, whose running rows `status_events_lease` holds, on an empty one).
    @Test(
        "with a status checked, an update of results by id searches the primary key, not a status index",
        arguments: TestDatabase.allCases, Table.all)
    func updateByIDs(database: TestDatabase, table: Table) async throws {
        try await withBelfry(database) { app in
            let ids = (0..<10).map { _ in UUID() }
            let checked = app.db.sql.update(table.name).set("status", to: "sent")
                .where("id", .in, ids).where("worker", .equal, "w").whereStatus(is: "running")
            let plan = try await MetricsTests.plan("\(checked.query)", on: app.db)
            #expect(!plan.contains(table.statusIndex), "\(plan)")
            #expect(
                plan.contains("sqlite_autoindex_\(table.name)_1 (id=?)") || plan.contains("\(table.name)_pkey"),
                "\(plan)")
        }
    }
}
