import Fluent
import FluentPostgresDriver
import FluentSQLiteDriver
import Foundation
import NIOConcurrencyHelpers
import PostgresNIO
import SQLKit
import Vapor

/// The database in use and how to write to it safely.
struct BelfryDatabase: Sendable {
    /// Fluent's name for it, to replace its connection pool after an outage.
    var id: DatabaseID { kind == .sqlite ? .sqlite : .psql }

    enum Kind: Sendable { case sqlite, postgres }

    let kind: Kind
    let location: DatabaseLocation
    private let gate: WriteGate?
    /// SQLite's writer, once registered with an application.
    private let writer = NIOLockedValueBox<SQLiteWriter?>(nil)

    init(location: DatabaseLocation) {
        self.location = location
        switch location {
        case .sqlite:
            kind = .sqlite
            gate = WriteGate()
        case .postgres:
            kind = .postgres
            gate = nil
        }
    }

    /// Registers the database with Fluent.
    func register(on app: Application) throws {
        switch location {
        case .sqlite(let path):
            let directory = URL(fileURLWithPath: path).deletingLastPathComponent()
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            // Statements carry user data as bound values: SQL logging stays off (SQLite) or at trace (PostgreSQL).
            app.databases.use(.sqlite(.file(path), sqlLogLevel: nil), as: .sqlite)
            app.databases.use(
                .sqlite(.file(path), maxConnectionsPerEventLoop: 1, sqlLogLevel: nil), as: .sqliteWriter,
                isDefault: false)
            let (databases, loop, logger) = (app.databases, app.eventLoopGroup.any(), app.logger)
            let writer = SQLiteWriter(executor: WriterExecutor(threadPool: app.threadPool)) {
                guard let database = databases.database(.sqliteWriter, logger: logger, on: loop) else {
                    preconditionFailure("the writer's database is registered with the readers'")
                }
                return database
            }
            self.writer.withLockedValue { $0 = writer }
        case .postgres(let url):
            var configuration = try SQLPostgresConfiguration(url: url)
            configuration.searchPath = nil
            app.databases.use(
                .postgres(
                    configuration: configuration, maxConnectionsPerEventLoop: 4,
                    // Under heavy contention (writers queued on one locked row) a request may wait
                    // this long for a connection, then answers 503. While the database is in
                    // trouble, `DatabaseDeadlineMiddleware` answers sooner.
                    connectionPoolTimeout: .seconds(10), sqlLogLevel: .trace), as: .psql)
        }
    }

    /// Settings that must hold before the first query: SQLite's write-ahead log lets
    /// readers go on while one writer writes. The mode is kept in the file itself, so one
    /// connection setting it is enough. `synchronous` stays at SQLite's default (FULL):
    /// a write Belfry accepted must survive a power loss.
    func prepare(_ database: any Database) async throws {
        guard kind == .sqlite, let sql = database as? any SQLDatabase else { return }
        try await sql.raw("PRAGMA journal_mode=WAL").run()
    }

    /// Runs `body` in a write transaction.
    ///
    /// On SQLite the transaction begins `IMMEDIATE`, taking the database's single write lock
    /// at once: a deferred transaction that reads and then writes fails with `SQLITE_BUSY`
    /// when another connection wrote in between, instead of waiting. Writes of this process
    /// queue in the gate, and those that queued together share one transaction and its one
    /// sync to disk (should one fail, each runs again alone, so that only it fails).
    func write<T: Sendable>(
        _ database: any Database, _ body: @escaping @Sendable (any Database) async throws -> T
    ) async throws -> T {
        guard let gate else { return try await database.transaction(body) }
        let writer = self.writer.withLockedValue { $0 }
        return try await gate.run(
            body,
            session: { session in
                guard let writer else {
                    // Not registered with an application: any connection of `database`'s.
                    return try await database.withConnection { connection in
                        try await SQLiteWriter.prepare(connection)
                        try await session(connection)
                    }
                }
                try await writer.session(session)
            },
            transaction: { writes, connection in try await Self.sqliteTransaction(writes, on: connection) })
    }

    /// One SQLite transaction holding `writes`. They run one after another with nothing between
    /// them: a savepoint each would double the statements, and each statement is a trip to the
    /// driver's thread and back. Should one fail, the transaction rolls back and each write runs
    /// again in a transaction of its own, so that only the failing one fails (a write may run
    /// twice, its first run undone; none keeps state of its own between runs, or it sets that
    /// state anew when it runs again, as fan-out's reservations of the queue's room do).
    private static func sqliteTransaction(
        _ writes: [WriteGate.Write], on connection: any Database
    ) async throws -> [(any Error)?] {
        let sql = connection.sql
        if let failure = try await transaction(writes, on: sql, connection) {
            guard writes.count > 1 else { return [failure] }
            var errors: [(any Error)?] = []
            for write in writes {
                // Each alone: one that cannot even begin or commit fails, not the others.
                do {
                    errors.append(try await transaction([write], on: sql, connection))
                } catch {
                    errors.append(error)
                }
            }
            return errors
        }
        return Array(repeating: nil, count: writes.count)
    }

    /// Runs `writes` in one transaction: nil once it committed, or the error of the write that
    /// failed, after rolling back. Throws when the transaction itself cannot begin or commit.
    private static func transaction(
        _ writes: [WriteGate.Write], on sql: any SQLDatabase, _ connection: any Database
    ) async throws -> (any Error)? {
        try await sql.raw("BEGIN IMMEDIATE TRANSACTION").run()
        do {
            for write in writes {
                do {
                    try await write(connection)
                } catch {
                    // SQLite may have rolled back already (a full disk): the write's error is the news.
                    try? await sql.raw("ROLLBACK TRANSACTION").run()
                    return error
                }
            }
            try await sql.raw("COMMIT TRANSACTION").run()
            return nil
        } catch {
            try? await sql.raw("ROLLBACK TRANSACTION").run()
            throw error
        }
    }
}

extension DatabaseID {
    /// SQLite's writer: a connection of its own (see `SQLiteWriter`).
    static let sqliteWriter = DatabaseID(string: "sqlite-writer")
}

extension BelfryDatabase {
    /// Locks the selected rows for this transaction, skipping rows another transaction holds,
    /// so several instances can take work from one table. SQLite has no row locks: there the
    /// write transaction already holds the database's single write lock.
    func lockingSkipLocked(_ select: SQLSelectBuilder) -> SQLSelectBuilder {
        kind == .postgres ? select.lockingClause(SQLRaw("FOR UPDATE SKIP LOCKED")) : select
    }

    /// ` FOR KEY SHARE` on PostgreSQL (the rows cannot be deleted until this transaction
    /// ends), nothing on SQLite.
    var forKeyShare: String { kind == .postgres ? " FOR KEY SHARE" : "" }

    /// Joins `table` (under its own name) on `condition`, a lookup by key for each row.
    /// PostgreSQL's planner, costing an index lookup as a read from disk and its statistics
    /// behind a table filled a moment ago, would otherwise hash the whole table to join a page
    /// of rows: 20 000 fresh users took 4.5 ms a statement against 0.3 ms for 128 lookups. The
    /// lateral subquery (kept apart by `OFFSET 0`) leaves it only the lookup. SQLite's planner
    /// looks rows up by key already.
    func keyJoin(_ table: String, on condition: String, optional: Bool = false) -> String {
        let join = optional ? "LEFT JOIN" : "JOIN"
        guard kind == .postgres else { return "\(join) \(table) ON \(condition)" }
        return "\(join) LATERAL (SELECT * FROM \(table) WHERE \(condition) OFFSET 0) AS \(table) ON true"
    }

    /// Deletes the deliveries `condition` selects (on `deliveries`), and their attempts, in the
    /// caller's transaction: erasure and inbox retention. On PostgreSQL no foreign key takes
    /// the attempts along (`DropHotForeignKeys`), so the deliveries are held first: a result
    /// being recorded meanwhile commits its attempt rows before the next statement, which then
    /// sees and deletes them.
    func deleteDeliveries(where condition: SQLQueryString, on sql: any SQLDatabase) async throws {
        for statement in deliveryDeletes(where: condition) { try await sql.raw(statement).run() }
    }

    /// The statements of ``deleteDeliveries(where:on:)``, in order.
    func deliveryDeletes(where condition: SQLQueryString) -> [SQLQueryString] {
        let held: [SQLQueryString] =
            kind == .postgres ? ["SELECT id FROM deliveries WHERE " + condition + " FOR UPDATE"] : []
        return held + [
            "DELETE FROM delivery_attempts WHERE delivery_id IN (SELECT id FROM deliveries WHERE " + condition + ")",
            "DELETE FROM deliveries WHERE " + condition,
        ]
    }
}

extension Application {
    /// A database handle that logs nothing, for reading and writing Belfry's own secrets:
    /// Fluent and the drivers log bound values at debug and trace levels.
    var silentDatabase: any Database {
        var logger = Logger(label: "belfry.secrets")
        logger.logLevel = .critical
        guard let database = databases.database(logger: logger, on: eventLoopGroup.any()) else {
            preconditionFailure("the database is registered by configure before any secret is read")
        }
        return database
    }
}

extension Database {
    /// The SQLKit view of this database; both supported drivers provide one.
    var sql: any SQLDatabase {
        guard let sql = self as? any SQLDatabase else {
            preconditionFailure("Belfry runs on SQLite or PostgreSQL, whose Fluent drivers are SQL databases")
        }
        return sql
    }
}

extension Error {
    /// Whether this is the database refusing a write for a unique or foreign key constraint.
    var isConstraintFailure: Bool {
        (self as? any DatabaseError)?.isConstraintFailure ?? false
    }
}

/// The PostgreSQL connection a piece of work runs on, so that a deadline can tell a slow query
/// from one lost with its connection (which never ends): the work may still end while it waits
/// for a connection (the pool has a timeout of its own) or while its connection is open.
final class ConnectionWatch: Sendable {
    private let connection = NIOLockedValueBox<PostgresConnection?>(nil)

    /// Notes the connection `database` runs on, if it is one PostgreSQL connection.
    func note(_ database: any Database) async {
        guard let postgres = database as? any PostgresDatabase else { return }
        let underlying = try? await postgres.withConnection { $0.eventLoop.makeSucceededFuture($0) }.get()
        connection.withLockedValue { $0 = underlying }
    }

    /// Whether the work may still end.
    var mayEnd: Bool { connection.withLockedValue { $0.map { !$0.isClosed } ?? true } }
}
