import FluentKit
import FluentSQLiteDriver
import Foundation
import NIOConcurrencyHelpers
import PostgresNIO
import SQLKit

/// A column type each driver converts itself: PostgreSQL's cell decoding, SQLite's value
/// conversion, no `Codable` decoder in between.
protocol DirectColumn: PostgresDecodable, SQLiteDataConvertible, Decodable, Sendable {}

extension String: DirectColumn {}
extension UUID: DirectColumn {}
extension Int: DirectColumn {}
extension Date: DirectColumn {}
extension Bool: DirectColumn {}

/// A row of `BelfryDatabase.rows(_:on:)`, read straight from the driver's row.
///
/// SQLKit's rows decode each column through a `Codable` decoder: a coding path and a dynamic
/// cast of the type for every value (a few percent of the machine on PostgreSQL, where the
/// queue reads some thirty columns of each claimed delivery). Here the type is known at compile
/// time and the driver converts the cell itself; the values are the same.
struct DirectRow: Sendable {
    fileprivate enum Cells: Sendable {
        case postgres(PostgresRandomAccessRow)
        case sqlite(SQLiteRow)
        /// Any other database (a connection that is neither driver's): SQLKit's own row.
        case other(any SQLRow)
    }

    fileprivate let cells: Cells

    struct Missing: Error, CustomStringConvertible {
        let column: String
        let type: String
        var description: String { "column \"\(column)\" is missing or not a \(type)" }
    }

    /// The column's value; throws when the row has no such column, or it holds NULL or another
    /// type.
    func decode<T: DirectColumn>(column: String, as type: T.Type) throws -> T {
        switch cells {
        case .postgres(let row):
            guard row.contains(column) else { throw Missing(column: column, type: "\(T.self)") }
            return try row[column].decode(T.self)
        case .sqlite(let row):
            guard let data = row.column(column), let value = T(sqliteData: data) else {
                throw Missing(column: column, type: "\(T.self)")
            }
            return value
        case .other(let row):
            return try row.decode(column: column, as: T.self)
        }
    }

    /// A column that may be NULL: nil, or its value.
    func decode<T: DirectColumn>(column: String, as type: T?.Type) throws -> T? {
        switch cells {
        case .postgres(let row):
            guard row.contains(column) else { throw Missing(column: column, type: "\(T.self)?") }
            let cell = row[column]
            return cell.bytes == nil ? nil : try cell.decode(T.self)
        case .sqlite(let row):
            guard let data = row.column(column) else { throw Missing(column: column, type: "\(T.self)?") }
            if case .null = data { return nil }
            guard let value = T(sqliteData: data) else { throw Missing(column: column, type: "\(T.self)?") }
            return value
        case .other(let row):
            return try row.decode(column: column, as: T?.self)
        }
    }
}

extension BelfryDatabase {
    /// Runs `query` on `database` and returns its rows as ``DirectRow``s: through the driver's
    /// own query call where `database` is a PostgreSQL or SQLite one (a Fluent database or
    /// connection, in a transaction or not), else through SQLKit.
    func rows(_ query: any SQLExpression, on database: any SQLDatabase) async throws -> [DirectRow] {
        var serializer = SQLSerializer(database: database)
        query.serialize(to: &serializer)
        if let postgres = database as? any PostgresDatabase, let binds = Self.postgresBindings(serializer.binds) {
            let statement = PostgresQuery(unsafeSQL: serializer.sql, binds: binds)
            // As PostgresKit logs each statement (the configuration sets it at trace).
            database.logger.trace("Executing query", metadata: ["sql": "\(serializer.sql)"])
            let result = try await postgres.withConnection { $0.query(statement, logger: database.logger) }.get()
            return result.rows.map { DirectRow(cells: .postgres($0.makeRandomAccess())) }
        }
        if let sqlite = database as? any SQLiteDatabase {
            let binds = try serializer.binds.map(Self.sqliteData)
            return try await sqlite.rowsInPlace(serializer.sql, binds).map { DirectRow(cells: .sqlite($0)) }
        }
        return try await database.sqlKitRows(query)
    }

    /// A bind as SQLite's value: the usual types directly, anything else through SQLiteKit's
    /// encoder (which casts each value to find out whether it converts itself).
    private static func sqliteData(_ value: any Encodable & Sendable) throws -> SQLiteData {
        switch value {
        case let value as UUID: value.sqliteData ?? .null
        case let value as String: .text(value)
        case let value as Int: .integer(value)
        case let value as Date: value.sqliteData ?? .null
        case let value as Bool: .integer(value ? 1 : 0)
        default: try SQLiteDataEncoder().encode(value)
        }
    }

    /// The binds as PostgreSQL's own values; nil when one is of a type this does not know (the
    /// caller then goes through SQLKit, which knows every type).
    private static func postgresBindings(_ values: [any Encodable & Sendable]) -> PostgresBindings? {
        var bindings = PostgresBindings(capacity: values.count)
        for value in values {
            switch value {
            case let value as UUID: bindings.append(value)
            case let value as String: bindings.append(value)
            case let value as Int: bindings.append(value)
            case let value as Date: bindings.append(value)
            case let value as Bool: bindings.append(value)
            case let value as Double: bindings.append(value)
            default:
                let mirror = Mirror(reflecting: value)
                guard mirror.displayStyle == .optional, mirror.children.isEmpty else { return nil }
                bindings.appendNull()
            }
        }
        return bindings
    }
}

extension SQLiteDatabase {
    /// `sql`'s rows, gathered on SQLite's thread as the statement steps.
    ///
    /// A Fluent SQLite database's own `query` hands each row to the event loop as a task of its
    /// own, and completes once all of them ran: a wake-up of the loop (an `eventfd` write), a
    /// future and a closure for every row. With one row a delivery read back by each of the
    /// queue's statements, that was a few percent of the push benchmark's server CPU. The
    /// connection's own `query` calls back on the thread that steps the statement.
    func rowsInPlace(_ sql: String, _ binds: [SQLiteData]) async throws -> [SQLiteRow] {
        try await withConnection { connection in try await connection.query(sql, binds) }
    }
}

extension SQLDatabase {
    /// `query`'s rows through SQLKit, as ``DirectRow``s.
    fileprivate func sqlKitRows(_ query: any SQLExpression) async throws -> [DirectRow] {
        let rows = NIOLockedValueBox<[DirectRow]>([])
        try await execute(sql: query) { row in rows.withLockedValue { $0.append(DirectRow(cells: .other(row))) } }
        return rows.withLockedValue { $0 }
    }
}
