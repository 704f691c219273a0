import BelfryJSON
import Fluent
import FluentSQLiteDriver
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import PostgresNIO
import SQLKit

/// A value in a bulk insert: the few kinds fan-out writes. A missing text or id keeps its
/// type, which PostgreSQL needs for a NULL bound to a `uuid` column.
enum BulkValue: Sendable, Equatable {
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
    /// one array a column (``PostgresColumn``).
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
        for chunk in rows.chunked(rowsPerStatement) {
            let (values, binds) = Self.sqliteValues(chunk, columnCount: columns.count)
            let sql = into + " VALUES " + values + tail
            if let sqlite = db as? any SQLiteDatabase {
                // The driver's own values straight to the driver: SQLKit's encoder would cast
                // each one to find that it already is one (3 % of the push benchmark's CPU).
                inserted += try await sqlite.rowsInPlace(sql, binds).map { $0.sql() }
            } else {
                let rows = NIOLockedValueBox<[any SQLRow]>([])
                try await db.sql.execute(sql: PreparedSQL(sql: sql, binds: binds)) { row in
                    rows.withLockedValue { $0.append(row) }
                }
                inserted += rows.withLockedValue { $0 }
            }
        }
        return inserted
    }

    /// SQLite's `VALUES` list for `rows`, and its binds. A column that holds the same value in
    /// every row (an event's id, a channel, a status) is bound once and named by its number in
    /// each row. Fan-out's rows share most of their columns, and each text bound costs the
    /// driver two copies (a C string, then SQLite's own): with a bind a value, the push
    /// benchmark's server made 200 allocations a push.
    static func sqliteValues(_ rows: ArraySlice<[BulkValue]>, columnCount: Int) -> (String, [SQLiteData]) {
        precondition(rows.allSatisfy { $0.count == columnCount }, "a bulk row has a value for each column")
        guard let first = rows.first else { return ("", []) }
        var binds: [SQLiteData] = []
        var shared: [Int?] = Array(repeating: nil, count: columnCount)
        for column in 0..<columnCount where rows.allSatisfy({ $0[column] == first[column] }) {
            binds.append(first[column].sqliteData)
            shared[column] = binds.count
        }
        // Written as bytes: appending each `?N` to a `String` was most of this function's time,
        // and it was 3 % of the push benchmark's samples.
        var sql: [UInt8] = []
        sql.reserveCapacity(rows.count * columnCount * 7)
        for (index, row) in rows.enumerated() {
            sql.append(contentsOf: index == 0 ? Self.openRow : Self.nextRow)
            for column in 0..<columnCount {
                if column > 0 { sql.append(contentsOf: Self.separator) }
                if let number = shared[column] {
                    Self.appendParameter(number, to: &sql)
                } else {
                    binds.append(row[column].sqliteData)
                    Self.appendParameter(binds.count, to: &sql)
                }
            }
            sql.append(UInt8(ascii: ")"))
        }
        return (String(decoding: sql, as: UTF8.self), binds)
    }

    private static let openRow = Array("(".utf8)
    private static let nextRow = Array(", (".utf8)
    private static let separator = Array(", ".utf8)

    /// `?N`, SQLite's numbered parameter `number` (at least 1).
    private static func appendParameter(_ number: Int, to sql: inout [UInt8]) {
        sql.append(UInt8(ascii: "?"))
        var place = 1
        while place <= number / 10 { place *= 10 }
        var rest = number
        while place > 0 {
            sql.append(UInt8(ascii: "0") + UInt8(rest / place))
            rest %= place
            place /= 10
        }
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

    /// PostgreSQL's `into` (`INSERT INTO t (columns)`) of `rows`, each column bound as one array
    /// (``PostgresColumn``) that `unnest` turns back into rows, in order.
    private static func recordSet(
        _ into: String, columnCount: Int, rows: [[BulkValue]], tail: String
    ) -> SQLQueryString {
        var columns = Array(repeating: [BulkValue](), count: columnCount)
        for index in columns.indices { columns[index].reserveCapacity(rows.count) }
        for row in rows {
            precondition(row.count == columnCount, "a bulk row has a value for each column")
            for (position, value) in row.enumerated() { columns[position].append(value) }
        }
        let arrays = columns.map { column -> SQLQueryString in "\(bind: PostgresColumn(values: column))" }
        return "\(unsafeRaw: into) SELECT * FROM unnest(" + arrays.joined(separator: ", ") + ") AS rows"
            + "\(unsafeRaw: tail)"
    }
}

/// One column of a bulk insert, bound to PostgreSQL as an array in its binary form: the server
/// copies each element as it is, with no text to parse and no cast a value. (The rows went as
/// one JSON parameter before, which the server parsed while planning each statement: 247–273 ms
/// of its time for the webhook benchmark's 100 000 rows, against 10 ms now; BENCHMARKS.md.) Its
/// element type is the kind of its first value: a missing value keeps its kind.
struct PostgresColumn: PostgresThrowingDynamicTypeEncodable, Encodable, Sendable {
    let values: [BulkValue]

    /// A value of another kind than the column's first.
    struct Mixed: Error, CustomStringConvertible {
        var description: String { "a bulk insert's column holds values of more than one kind" }
    }

    /// The array's type and its elements'.
    private var types: (array: PostgresDataType, element: PostgresDataType) {
        switch values.first {
        case .id: (.uuidArray, .uuid)
        case .integer: (.int8Array, .int8)
        case .date: (.timestamptzArray, .timestamptz)
        case .bool: (.boolArray, .bool)
        case .text, nil: (.textArray, .text)
        }
    }

    var psqlType: PostgresDataType { types.array }
    var psqlFormat: PostgresFormat { .binary }

    /// PostgreSQL's binary array: one dimension, whether any element is NULL, the elements'
    /// type, the dimension's length and lower bound, then each element's length (-1: NULL) and
    /// bytes.
    func encode<JSONEncoder: PostgresJSONEncoder>(
        into buffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>
    ) throws {
        buffer.writeInteger(Int32(1))
        buffer.writeInteger(Int32(values.contains(where: \.isNull) ? 1 : 0))
        buffer.writeInteger(types.element.rawValue)
        buffer.writeInteger(Int32(values.count))
        buffer.writeInteger(Int32(1))
        let element = types.element
        for value in values { try value.writeElement(to: &buffer, as: element) }
    }

    /// Bound only to PostgreSQL, whose driver takes it through `encode(into:context:)`.
    func encode(to encoder: any Encoder) throws {
        throw EncodingError.invalidValue(
            values.count,
            .init(codingPath: encoder.codingPath, debugDescription: "a bulk insert's column binds to PostgreSQL only"))
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

    fileprivate var isNull: Bool {
        switch self {
        case .text(nil), .id(nil), .integer(nil), .date(nil), .bool(nil): true
        default: false
        }
    }

    /// This value as an element of PostgreSQL's binary array of `element`s: its length and
    /// bytes, or -1 for NULL. A date is microseconds since 2000, rounded as `to_timestamp` does.
    fileprivate func writeElement(to buffer: inout ByteBuffer, as element: PostgresDataType) throws {
        switch (self, element) {
        case (.text(let value?), .text):
            buffer.writeInteger(Int32(value.utf8.count))
            buffer.writeString(value)
        case (.id(let value?), .uuid):
            buffer.writeInteger(Int32(16))
            withUnsafeBytes(of: value.uuid) { buffer.writeBytes($0) }
        case (.integer(let value?), .int8):
            buffer.writeInteger(Int32(8))
            buffer.writeInteger(Int64(value))
        case (.date(let value?), .timestamptz):
            buffer.writeInteger(Int32(8))
            buffer.writeInteger(
                Int64(((value.timeIntervalSince1970 - 946_684_800) * 1_000_000).rounded(.toNearestOrEven)))
        case (.bool(let value?), .bool):
            buffer.writeInteger(Int32(1))
            buffer.writeInteger(UInt8(value ? 1 : 0))
        case (.text(nil), .text), (.id(nil), .uuid), (.integer(nil), .int8), (.date(nil), .timestamptz),
            (.bool(nil), .bool):
            buffer.writeInteger(Int32(-1))
        default:
            throw PostgresColumn.Mixed()
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
