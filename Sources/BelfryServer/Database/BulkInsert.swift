import Fluent
import FluentSQLiteDriver
import Foundation
import NIOConcurrencyHelpers
import SQLKit

/// A value in a bulk insert: the few kinds fan-out writes. A missing text or id keeps its
/// type, which PostgreSQL needs for a NULL bound to a `uuid` column.
enum BulkValue: Sendable {
    case text(String?)
    case id(UUID?)
    case integer(Int?)
    case date(Date?)
    case bool(Bool?)
}

/// What a bulk insert does with a row whose unique key is already stored.
enum BulkConflict: Sendable {
    /// Updates the stored row with these assignments (SQL, naming the table's columns).
    case update(target: [String], set: String)
}

extension BelfryDatabase {
    /// Inserts `rows` (each a value per column) in few statements.
    ///
    /// Fan-out writes a few rows per recipient, so this is its hot path, and neither database
    /// goes through SQLKit's serializer and `Encodable` binds here (a dynamic cast and an
    /// encoder per value: that took more of fan-out's time than the database itself). SQLite
    /// gets the driver's own values in multi-row INSERTs of `rowsPerStatement` (its limit is
    /// 32 766 bound values per statement); PostgreSQL gets all the rows in one statement, as
    /// one JSON parameter that the server unpacks.
    /// - Parameters:
    ///   - conflictTarget: columns of a unique index; a row that would repeat a stored one is
    ///     skipped instead of failing the statement.
    ///   - onConflict: instead, what a row that would repeat a stored one does to it (an
    ///     assignment such as `count = t.count + 1`); the rows of one call must not repeat each other.
    ///   - returning: columns to read back from each row actually inserted (or updated).
    @discardableResult
    func insert(
        into table: String, columns: [String], rows: [[BulkValue]], rowsPerStatement: Int,
        ignoringConflictsOn conflictTarget: [String] = [], onConflict: BulkConflict? = nil, returning: [String] = [],
        on db: any Database
    ) async throws -> [any SQLRow] {
        guard !rows.isEmpty else { return [] }
        var tail = ""
        if case .update(let target, let assignments) = onConflict {
            tail += " ON CONFLICT (\(Self.quoted(target))) DO UPDATE SET \(assignments)"
        } else if !conflictTarget.isEmpty {
            tail += " ON CONFLICT (\(Self.quoted(conflictTarget))) DO NOTHING"
        }
        if !returning.isEmpty { tail += " RETURNING \(Self.quoted(returning))" }
        let into = Self.insertInto(table, columns)
        guard kind == .sqlite else {
            return try await db.sql.raw(Self.recordSet(into, columnCount: columns.count, rows: rows, tail: tail)).all()
        }
        var inserted: [any SQLRow] = []
        let head = into + " VALUES "
        let group = "(" + Array(repeating: "?", count: columns.count).joined(separator: ", ") + ")"
        for chunk in rows.chunked(rowsPerStatement) {
            let sql = head + Array(repeating: group, count: chunk.count).joined(separator: ", ") + tail
            var binds: [SQLiteData] = []
            binds.reserveCapacity(chunk.count * columns.count)
            for row in chunk {
                precondition(row.count == columns.count, "a bulk row has a value for each column")
                for value in row { binds.append(value.sqliteData) }
            }
            let rows = NIOLockedValueBox<[any SQLRow]>([])
            if let sqlite = db as? any SQLiteDatabase {
                // The driver's own values straight to the driver: SQLKit's encoder would cast
                // each one to find that it already is one (3 % of the push benchmark's CPU).
                try await sqlite.query(sql, binds) { row in rows.withLockedValue { $0.append(row.sql()) } }
            } else {
                try await db.sql.execute(sql: PreparedSQL(sql: sql, binds: binds)) { row in
                    rows.withLockedValue { $0.append(row) }
                }
            }
            inserted += rows.withLockedValue { $0 }
        }
        return inserted
    }

    /// Column (or table) names quoted and listed, for SQL.
    private static func quoted(_ names: [String]) -> String {
        names.map { "\"\($0)\"" }.joined(separator: ", ")
    }

    /// `INSERT INTO "table" ("column", ...)`.
    private static func insertInto(_ table: String, _ columns: [String]) -> String {
        "INSERT INTO \"\(table)\" (\(quoted(columns)))"
    }

    /// Rows for one table, for `insert(_:rowsPerStatement:on:)`.
    struct Rows: Sendable {
        var table: String
        var columns: [String]
        var rows: [[BulkValue]]
    }

    /// Inserts rows into several tables, in order (a table named after another may refer to
    /// its rows). On PostgreSQL it is one statement, the earlier inserts as data-modifying
    /// `WITH` queries, so that it is atomic on its own: no transaction to begin and commit,
    /// one round trip instead of four for an event and its recipients. On SQLite each goes in
    /// turn, `rowsPerStatement` rows a statement; atomic only in the caller's transaction.
    func insert(_ tables: [Rows], rowsPerStatement: Int, on db: any Database) async throws {
        let tables = tables.filter { !$0.rows.isEmpty }
        guard kind == .postgres, let last = tables.last else {
            for table in tables {
                try await insert(
                    into: table.table, columns: table.columns, rows: table.rows, rowsPerStatement: rowsPerStatement,
                    on: db)
            }
            return
        }
        func statement(_ table: Rows) -> SQLQueryString {
            Self.recordSet(
                Self.insertInto(table.table, table.columns), columnCount: table.columns.count, rows: table.rows,
                tail: "")
        }
        var with: SQLQueryString?
        for (index, table) in tables.dropLast().enumerated() {
            let part: SQLQueryString =
                "\(unsafeRaw: index == 0 ? "WITH" : ",") inserted\(unsafeRaw: String(index)) AS (" + statement(table)
                + ")"
            with = with.map { $0 + part } ?? part
        }
        try await db.sql.raw(with.map { $0 + " " + statement(last) } ?? statement(last)).run()
    }

    /// PostgreSQL's `into` (`INSERT INTO t (columns)`) of `rows`, from one JSON array of arrays
    /// bound as text. Each position
    /// is cast to the kind of the first row's value there (a missing value keeps its kind).
    /// Dates travel as seconds since 1970, which `to_timestamp` turns back with microseconds kept.
    private static func recordSet(
        _ into: String, columnCount: Int, rows: [[BulkValue]], tail: String
    ) -> SQLQueryString {
        var json: [UInt8] = [UInt8(ascii: "[")]
        json.reserveCapacity(rows.count * columnCount * 24)
        for (index, row) in rows.enumerated() {
            precondition(row.count == columnCount, "a bulk row has a value for each column")
            if index > 0 { json.append(UInt8(ascii: ",")) }
            json.append(UInt8(ascii: "["))
            for (position, value) in row.enumerated() {
                if position > 0 { json.append(UInt8(ascii: ",")) }
                value.appendJSON(to: &json)
            }
            json.append(UInt8(ascii: "]"))
        }
        json.append(UInt8(ascii: "]"))
        // jsonb_array_elements keeps the rows in order; ->> reads each position as text, cast
        // to the column's type.
        let values = rows[0].enumerated().map { position, value in value.postgresValue("row ->> \(position)") }
        return """
            \(unsafeRaw: into) SELECT \(unsafeRaw: values.joined(separator: ", ")) \
            FROM jsonb_array_elements(\(bind: String(decoding: json, as: UTF8.self))::jsonb) AS rows(row)\(unsafeRaw: tail)
            """
    }
}

extension BulkValue {
    /// As SQLite's driver stores each kind: a UUID as its upper-case text, a date as seconds
    /// since 1970, a Bool as 0 or 1.
    fileprivate var sqliteData: SQLiteData {
        switch self {
        case .text(let value): value.map(SQLiteData.text) ?? .null
        case .id(let value): value.map { .text($0.upperCaseText) } ?? .null
        case .integer(let value): value.map(SQLiteData.integer) ?? .null
        case .date(let value): value.map { .float($0.timeIntervalSince1970) } ?? .null
        case .bool(let value): value.map { .integer($0 ? 1 : 0) } ?? .null
        }
    }

    fileprivate var encodable: any Encodable & Sendable {
        switch self {
        case .text(let value): value
        case .id(let value): value
        case .integer(let value): value
        case .date(let value): value
        case .bool(let value): value
        }
    }

    /// This value as JSON, for PostgreSQL's record set.
    fileprivate func appendJSON(to json: inout [UInt8]) {
        switch self {
        case .text(let value?): JSONText.appendString(value, to: &json)
        case .id(let value?): JSONText.appendString(value.upperCaseText, to: &json)
        case .text(nil), .id(nil), .integer(nil), .date(nil), .bool(nil): json.append(contentsOf: "null".utf8)
        case .integer(let value?): json.append(contentsOf: String(value).utf8)
        case .date(let value?): json.append(contentsOf: "\(value.timeIntervalSince1970)".utf8)
        case .bool(let value?): json.append(contentsOf: (value ? "true" : "false").utf8)
        }
    }

    /// The SQL that reads this kind of value from `text`, a JSON element read as text.
    fileprivate func postgresValue(_ text: String) -> String {
        switch self {
        case .text: "(\(text))"
        case .id: "(\(text))::uuid"
        case .integer: "(\(text))::bigint"
        case .date: "to_timestamp((\(text))::double precision)"
        case .bool: "(\(text))::boolean"
        }
    }
}

/// SQL text with its `?` placeholders written, and a value for each.
private struct PreparedSQL: SQLExpression {
    let sql: String
    let binds: [any Encodable & Sendable]

    func serialize(to serializer: inout SQLSerializer) {
        serializer.write(sql)
        serializer.binds += binds
    }
}

/// The driver's own values pass SQLiteKit's encoder as they are.
extension SQLiteData: @retroactive SQLiteDataConvertible {
    public init?(sqliteData: SQLiteData) { self = sqliteData }
    public var sqliteData: SQLiteData? { self }
}
