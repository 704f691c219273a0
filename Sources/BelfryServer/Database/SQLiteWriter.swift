import Fluent
import FluentSQLiteDriver
import NIOConcurrencyHelpers

/// SQLite's single writer: a connection of its own, on one event loop, set up for writing once.
/// The readers' connections (one per event loop) are never held by a session of writes, and a
/// session never waits for a reader to give a connection back.
final class SQLiteWriter: Sendable {
    /// Where the sessions run: the driver's threads.
    let executor: WriterExecutor
    private let database: @Sendable () -> any Database
    /// The connection last set up for writing, held so that it is set up once.
    private let prepared = NIOLockedValueBox<SQLiteConnection?>(nil)

    init(executor: WriterExecutor, database: @escaping @Sendable () -> any Database) {
        self.executor = executor
        self.database = database
    }

    /// Runs a session of writes on the writer's connection.
    func session(_ body: @escaping @Sendable (any Database) async throws -> Void) async throws {
        try await database().withConnection { connection in
            try await self.executor.run {
                try await self.prepareOnce(connection)
                try await body(connection)
            }
        }
    }

    /// Sets up the connection, unless it is the one set up last (the pool replaces a
    /// connection that failed).
    private func prepareOnce(_ connection: any Database) async throws {
        guard let sqlite = connection as? any SQLiteDatabase else { return try await Self.prepare(connection) }
        let underlying = try await sqlite.withConnection { $0 }
        if prepared.withLockedValue({ $0 === underlying }) { return }
        try await Self.prepare(connection)
        prepared.withLockedValue { $0 = underlying }
    }

    /// Sets up a connection for writing.
    static func prepare(_ connection: any Database) async throws {
        let sql = connection.sql
        // Another process (`belfry send`, `belfry token`) may hold the write lock: wait for
        // it, sleeping, instead of the driver's default of retrying in a busy loop.
        try await sql.raw("PRAGMA busy_timeout = 10000").run()
        // A multi-row insert inside a transaction keeps a statement journal (to undo just that
        // statement on a constraint failure): in memory, not in a temporary file written
        // through the kernel page by page. Fan-out spent a tenth of its time there.
        try await sql.raw("PRAGMA temp_store = MEMORY").run()
        // The writer's page cache holds up to 64 MiB (SQLite's default is 2 MiB). The queue's
        // hot pages (deliveries, their indexes, the attempt log) outgrew 2 MiB within 20 000
        // deliveries, and the writer read 0.9 pages a push back from the file, a system call
        // each. Other connections' caches are dropped whenever the writer commits, so only the
        // writer's is worth growing.
        try await sql.raw("PRAGMA cache_size = -65536").run()
    }
}
