import BelfryJSON
import BelfryTestSupport
import FluentSQLiteDriver
import Foundation
import SQLKit
import Testing
import Vapor

@testable import BelfryServer

@Suite("Fan-out's writes: time-ordered ids and bulk inserts")
struct BulkInsertTests {
    @Test("time-ordered ids are version 7, sort by their millisecond first, and keep random bits apart")
    func timeOrderedIDs() {
        var randomness = IDRandomness()
        // The middle of each millisecond, so that floating point never rounds into the one before.
        let milliseconds = (0..<1000).map { 1_800_000_000_123 + $0 }
        let ids = milliseconds.map {
            UUID.timeOrdered(at: Date(timeIntervalSince1970: (Double($0) + 0.5) / 1000), using: &randomness)
        }
        let start = Date(timeIntervalSince1970: 1_800_000_000.1235)
        #expect(Set(ids).count == 1000)
        for id in ids {
            let text = id.uuidString
            #expect(Array(text)[14] == "7", "version 7: \(text)")
            #expect("89AB".contains(Array(text)[19]), "the RFC's variant: \(text)")
        }
        // The first 48 bits are the Unix time in milliseconds.
        #expect(
            ids[0].uuidString.prefix(13)
                == String(format: "%08X-%04X", 1_800_000_000_123 >> 16, 1_800_000_000_123 & 0xFFFF))
        let prefixes = ids.map { $0.uuidString.prefix(13) }
        #expect(
            zip(prefixes, prefixes.dropFirst()).allSatisfy { $0 <= $1 },
            "a later millisecond sorts after an earlier one")
        #expect(Set(prefixes).count == 1000, "one millisecond each")
        #expect(UUID.timeOrdered(at: start) != UUID.timeOrdered(at: start))
    }

    @Test("upperCaseText is uuidString, which SQLite's driver stores")
    func upperCaseText() {
        for _ in 0..<200 {
            let id = UUID()
            #expect(id.upperCaseText == id.uuidString)
        }
        #expect(
            UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)).upperCaseText
                == UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)).uuidString)
    }

    @Test("ids read back from their text in either case, and nothing else passes for one")
    func canonicalText() {
        for _ in 0..<200 {
            let id = UUID()
            #expect(UUID(canonicalText: id.uuidString) == id)
            #expect(UUID(canonicalText: id.lowerCaseText) == id)
            #expect(UUID(sqliteData: .text(id.uuidString)) == id)
            #expect(UUID(sqliteData: id.sqliteData ?? .null) == id)
        }
        let text = "01A21B1F-4CA8-74C2-8A2A-B9E189FBB282"
        for wrong in [
            "", "01A21B1F-4CA8-74C2-8A2A-B9E189FBB28", "01A21B1F-4CA8-74C2-8A2A-B9E189FBB2822",
            "01A21B1F4CA8-74C2-8A2A-B9E189FBB282-", "01A21B1F-4CA8-74C2-8A2A-B9E189FBB28G",
            "01A21B1F 4CA8 74C2 8A2A B9E189FBB282",
        ] {
            #expect(UUID(canonicalText: wrong) == nil, "\(wrong)")
            #expect(UUID(sqliteData: .text(wrong)) == nil, "\(wrong)")
        }
        #expect(UUID(canonicalText: text)?.uuidString == text)
        #expect(UUID(sqliteData: .integer(1)) == nil)
        #expect(UUID(sqliteData: .null) == nil)
    }

    /// A moment with a fraction of a second, for dates to read back.
    static let instant = Date(timeIntervalSince1970: 1_800_000_000.25)

    /// A Belfry on `database` with one more table, `checks`, and its storage.
    static func withTable(
        _ database: TestDatabase, _ body: @escaping @Sendable (Application, BelfryDatabase) async throws -> Void
    ) async throws {
        try await withBelfry(database) { app in
            try await app.db.sql.raw(
                """
                CREATE TABLE checks (id UUID NOT NULL, other UUID, label TEXT, number BIGINT NOT NULL, \
                at TIMESTAMPTZ NOT NULL, flag BOOLEAN NOT NULL, maybe BOOLEAN)
                """
            ).run()
            try await body(app, BelfryDatabase(location: app.belfry.settings.database))
        }
    }

    @Test("on SQLite, a column with one value in every row is bound once and named by number")
    func sharedBinds() {
        let event = UUID()
        let rows: [[BulkValue]] = [
            [.text("a"), .id(event), .integer(nil), .integer(1)],
            [.text("b"), .id(event), .integer(nil), .integer(1)],
            [.text("c"), .id(event), .integer(nil), .integer(2)],
        ]
        let (values, binds) = BelfryDatabase.sqliteValues(rows[...], columnCount: 4)
        #expect(values == "(?3, ?1, ?2, ?4), (?5, ?1, ?2, ?6), (?7, ?1, ?2, ?8)")
        #expect(
            binds == [
                .text(event.uuidString), .null, .text("a"), .integer(1), .text("b"), .integer(1), .text("c"),
                .integer(2),
            ])
        // One row: every value is its own, once.
        let (single, singleBinds) = BelfryDatabase.sqliteValues(rows[2...], columnCount: 4)
        #expect(single == "(?1, ?2, ?3, ?4)")
        #expect(singleBinds == [.text("c"), .text(event.uuidString), .null, .integer(2)])
        // Numbers of one, two and three digits.
        let many = (1...120).map { [BulkValue.integer($0)] }
        let (numbered, numberedBinds) = BelfryDatabase.sqliteValues(many[...], columnCount: 1)
        #expect(numbered == (1...120).map { "(?\($0))" }.joined(separator: ", "))
        #expect(numberedBinds == (1...120).map { .integer($0) })
    }

    @Test(
        "a bulk insert reads back as the drivers' own writes do: nulls, escapes, dates",
        arguments: TestDatabase.allCases)
    func roundTrip(database: TestDatabase) async throws {
        try await Self.withTable(database) { app, storage in
            let at = Date(timeIntervalSince1970: 1_800_000_000.5)
            let rows: [[BulkValue]] = (0..<7).map { index in
                [
                    .id(UUID.timeOrdered(at: at)), .id(index.isMultiple(of: 2) ? UUID() : nil),
                    .text(
                        index.isMultiple(of: 3) ? nil : "row \(index) ✓ \"quoted\" back\\slash\nline\ttab\u{1}🔔 </x>"),
                    .integer(index), .date(at),
                    .bool(index.isMultiple(of: 2)),
                ]
            }
            try await storage.insert(
                into: "checks", columns: ["id", "other", "label", "number", "at", "flag"], rows: rows,
                rowsPerStatement: 3, on: app.db)
            let read = try await app.db.sql.select().columns("id", "other", "label", "number", "at", "flag")
                .from("checks").orderBy("number").all()
            #expect(read.count == 7)
            for (row, written) in zip(read, rows) {
                guard case .id(let id) = written[0], case .id(let other) = written[1],
                    case .text(let label) = written[2]
                else { continue }
                #expect(try row.decode(column: "id", as: UUID.self) == id)
                #expect(try row.decode(column: "other", as: UUID?.self) == other)
                #expect(try row.decode(column: "label", as: String?.self) == label)
                let number = try row.decode(column: "number", as: Int.self)
                #expect(try row.decode(column: "flag", as: Bool.self) == number.isMultiple(of: 2))
                #expect(abs(try row.decode(column: "at", as: Date.self).timeIntervalSince(at)) < 0.001)
            }
            // A row written by the driver's usual path is found by the same bound UUID.
            guard case .id(let first?) = rows[0][0] else { return }
            let found = try await app.db.sql.select().column("number").from("checks").where("id", .equal, first)
                .all()
            #expect(found.count == 1)

            // Microseconds are kept, as the driver keeps them.
            let precise = Date(timeIntervalSince1970: 1_800_000_000.123456)
            try await storage.insert(
                into: "checks", columns: ["id", "number", "at", "flag"],
                rows: [[.id(UUID()), .integer(100), .date(precise), .bool(true)]], rowsPerStatement: 1, on: app.db)
            let stored = try await app.db.sql.select().column("at").from("checks").where("number", .equal, 100).all()
            let storedAt = try #require(stored.first).decode(column: "at", as: Date.self)
            #expect(abs(storedAt.timeIntervalSince(precise)) < 0.000_002, "\(storedAt.timeIntervalSince1970)")
        }
    }

    @Test("on PostgreSQL, a bulk column of values of more than one kind is refused before it is sent")
    func mixedColumn() async throws {
        try await Self.withTable(.postgres) { app, storage in
            await #expect(throws: PostgresColumn.Mixed.self) {
                try await storage.insert(
                    into: "checks", columns: ["id", "number", "at", "flag"],
                    rows: [
                        [.id(UUID()), .integer(1), .date(Date()), .bool(true)],
                        [.id(UUID()), .text("2"), .date(Date()), .bool(true)],
                    ], rowsPerStatement: 2, on: app.db)
            }
            let rows = try await app.db.sql.select().column("id").from("checks").all()
            #expect(rows.isEmpty, "nothing was written")
        }
    }

    @Test(
        "direct rows read every column as SQLKit's rows do, binds of each type and NULL included",
        arguments: TestDatabase.allCases)
    func directRows(database: TestDatabase) async throws {
        try await Self.withTable(database) { app, storage in
            for index in 0..<4 {
                let other: UUID? = index.isMultiple(of: 2) ? UUID() : nil
                let label: String? = index == 3 ? nil : "row \(index) ✓ \"quoted\"\n🔔"
                let maybe: Bool? = index == 1 ? true : nil
                try await app.db.sql.insert(into: "checks")
                    .columns("id", "other", "label", "number", "at", "flag", "maybe")
                    .values(
                        SQLBind(UUID()), SQLBind(other), SQLBind(label), SQLBind(index - 2 + Int(Int32.max)),
                        SQLBind(Self.instant.addingTimeInterval(Double(index))), SQLBind(index.isMultiple(of: 2)),
                        SQLBind(maybe)
                    )
                    .run()
            }
            let query: SQLQueryString = """
                SELECT * FROM checks WHERE number > \(bind: 0) AND at >= \(bind: Self.instant) AND flag IN (\(bind: true), \(bind: false))
                  AND (other IS NULL OR other <> \(bind: UUID())) AND (label IS NULL OR label <> \(bind: "x"))
                  AND (maybe IS NULL OR maybe = \(bind: Bool?.some(true))) AND COALESCE(\(bind: String?.none), label, 'none') IS NOT NULL
                ORDER BY number
                """
            let direct = try await storage.rows(query, on: app.db.sql)
            let usual = try await app.db.sql.raw(query).all()
            #expect(direct.count == 4)
            #expect(usual.count == 4)
            for (row, expected) in zip(direct, usual) {
                #expect(try row.decode(column: "id", as: UUID.self) == expected.decode(column: "id", as: UUID.self))
                #expect(
                    try row.decode(column: "other", as: UUID?.self) == expected.decode(column: "other", as: UUID?.self))
                #expect(
                    try row.decode(column: "label", as: String?.self)
                        == expected.decode(column: "label", as: String?.self))
                #expect(
                    try row.decode(column: "number", as: Int.self) == expected.decode(column: "number", as: Int.self))
                #expect(try row.decode(column: "at", as: Date.self) == expected.decode(column: "at", as: Date.self))
                #expect(try row.decode(column: "flag", as: Bool.self) == expected.decode(column: "flag", as: Bool.self))
                #expect(
                    try row.decode(column: "maybe", as: Bool?.self) == expected.decode(column: "maybe", as: Bool?.self))
            }
            #expect(try direct[1].decode(column: "maybe", as: Bool?.self) == true)
            #expect(try direct[3].decode(column: "label", as: String?.self) == nil)
            // A missing column, a NULL asked for as a value, and a column of another type throw.
            #expect(throws: (any Error).self) { try direct[0].decode(column: "nowhere", as: String.self) }
            #expect(throws: (any Error).self) { try direct[0].decode(column: "nowhere", as: String?.self) }
            #expect(throws: (any Error).self) { try direct[3].decode(column: "label", as: String.self) }
            #expect(throws: (any Error).self) { try direct[0].decode(column: "label", as: UUID.self) }
        }
    }

    @Test("conflicting rows are skipped, and only the rows inserted come back", arguments: TestDatabase.allCases)
    func conflicts(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let storage = BelfryDatabase(location: app.belfry.settings.database)
            try await app.db.sql.raw("CREATE TABLE bulk_unique (id UUID NOT NULL, name TEXT NOT NULL UNIQUE)").run()
            func write(_ names: [String]) async throws -> [String] {
                try await storage.insert(
                    into: "bulk_unique", columns: ["id", "name"], rows: names.map { [.id(UUID()), .text($0)] },
                    rowsPerStatement: 2, ignoringConflictsOn: ["name"], returning: ["name"], on: app.db
                ).map { try $0.decode(column: "name", as: String.self) }
            }
            #expect(try await write(["a", "b", "c"]).sorted() == ["a", "b", "c"])
            #expect(try await write(["b", "d", "a", "e"]).sorted() == ["d", "e"], "b and a were there already")
            let stored = try await app.db.sql.select().column("name").from("bulk_unique").all()
            #expect(
                try stored.map { try $0.decode(column: "name", as: String.self) }.sorted() == ["a", "b", "c", "d", "e"])
            await #expect(throws: (any Error).self, "without a conflict target, a repeated row fails") {
                try await storage.insert(
                    into: "bulk_unique", columns: ["id", "name"], rows: [[.id(UUID()), .text("a")]],
                    rowsPerStatement: 1, on: app.db)
            }
        }
    }
}
