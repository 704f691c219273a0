import Fluent
import FluentSQLiteDriver
import Foundation
import SQLKit

/// A value in a bulk insert: the few kinds fan-out writes. A missing text or id keeps its
/// type, which PostgreSQL needs for a NULL bound to a `uuid` column.
enum BulkValue: Sendable {
    case text(String?)
    case id(UUID?)
    case integer(Int)
    case date(Date)
    case bool(Bool)
}

extension BelfryDatabase {
    /// Inserts `rows` (each a value per column) with multi-row INSERTs of `rowsPerStatement`.
    ///
    /// Fan-out writes a few rows per recipient. On SQLite this hands the driver its own values
    /// and the statement text directly: going through SQLKit's serializer and `Encodable` binds
    /// (a dynamic cast and an encoder per value, and Foundation's C formatting of every UUID as
    /// text) took more of fan-out's time than SQLite itself. PostgreSQL takes the usual way.
    func insert(
        into table: String, columns: [String], rows: [[BulkValue]], rowsPerStatement: Int, on db: any Database
    ) async throws {
        guard kind == .sqlite, let sqlite = db as? any SQLiteDatabase else {
            for chunk in rows.chunked(rowsPerStatement) {
                let insert = db.sql.insert(into: table).columns(columns)
                for row in chunk { insert.values(row.map(\.encodable)) }
                try await insert.run()
            }
            return
        }
        let head = "INSERT INTO \"\(table)\" (\(columns.map { "\"\($0)\"" }.joined(separator: ", "))) VALUES "
        let group = "(" + Array(repeating: "?", count: columns.count).joined(separator: ", ") + ")"
        for chunk in rows.chunked(rowsPerStatement) {
            let sql = head + Array(repeating: group, count: chunk.count).joined(separator: ", ")
            var binds: [SQLiteData] = []
            binds.reserveCapacity(chunk.count * columns.count)
            for row in chunk {
                precondition(row.count == columns.count, "a bulk row has a value for each column")
                for value in row { binds.append(value.sqliteData) }
            }
            _ = try await sqlite.query(sql, binds)
        }
    }
}

extension BulkValue {
    /// As SQLite's driver stores each kind: a UUID as its upper-case text, a date as seconds
    /// since 1970, a Bool as 0 or 1.
    fileprivate var sqliteData: SQLiteData {
        switch self {
        case .text(let value): value.map(SQLiteData.text) ?? .null
        case .id(let value): value.map { .text($0.upperCaseText) } ?? .null
        case .integer(let value): .integer(value)
        case .date(let value): .float(value.timeIntervalSince1970)
        case .bool(let value): .integer(value ? 1 : 0)
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
}
