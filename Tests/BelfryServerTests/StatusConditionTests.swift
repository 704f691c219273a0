import BelfryTestSupport
import Foundation
import NIOConcurrencyHelpers
import SQLKit
import Testing
import Vapor

@testable import BelfryServer

@Suite("The queue's updates by id find their rows by id")
struct StatusConditionTests {
    /// `query` with `EXPLAIN` (SQLite: `EXPLAIN QUERY PLAN`) before it, binds and all.
    struct Explained: SQLExpression {
        let query: any SQLExpression

        func serialize(to serializer: inout SQLSerializer) {
            serializer.write(serializer.dialect.name == "sqlite" ? "EXPLAIN QUERY PLAN " : "EXPLAIN ")
            query.serialize(to: &serializer)
        }
    }

    /// The plan's text lines for `update`, as the database would run it.
    static func plan(of update: SQLUpdateBuilder, on sql: any SQLDatabase) async throws -> String {
        let lines = NIOLockedValueBox<[String]>([])
        try await sql.execute(sql: Explained(query: update.query)) { row in
            let text = row.allColumns.compactMap { column in try? row.decode(column: column, as: String.self) }
            lines.withLockedValue { $0 += text }
        }
        return lines.withLockedValue { $0 }.joined(separator: "\n")
    }

    /// SQLite, which keeps no statistics, chose the status index for every such update. (On a
    /// PostgreSQL table of 20 000 deliveries whose statistics said none was running, `EXPLAIN`
    /// showed the same before, and the primary key with the status checked this way; an empty
    /// table there is read whole either way, so this test does not ask PostgreSQL.)
    @Test("with a status checked, an update of results on SQLite searches the primary key, not the status index")
    func updateByIDs() async throws {
        try await withBelfry(.sqlite) { app in
            let ids = (0..<10).map { _ in UUID() }
            let checked = app.db.sql.update(Tables.deliveries).set("status", to: DeliveryStatus.sent.rawValue)
                .where("id", .in, ids).where("worker", .equal, "w").whereStatus(is: DeliveryStatus.running.rawValue)
            let plan = try await Self.plan(of: checked, on: app.db.sql)
            #expect(!plan.contains("deliveries_due"), "\(plan)")
            #expect(plan.contains("sqlite_autoindex_deliveries_1 (id=?)"), "\(plan)")
        }
    }
}
