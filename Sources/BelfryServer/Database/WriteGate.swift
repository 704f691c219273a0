import Fluent
import NIOConcurrencyHelpers

/// Runs this process's SQLite writes, many to a transaction (group commit). SQLite has a single
/// writer, and every commit waits for the disk: the write-ahead log is synced at each one. So
/// writes that arrive while a transaction runs wait here, without holding a pooled connection,
/// and all of them then share the next transaction; a write that fails fails alone (see
/// `BelfryDatabase.write`). Every caller returns only once the transaction that holds its write
/// has committed. PostgreSQL does not need the gate.
final class WriteGate: Sendable {
    typealias Write = @Sendable (_ connection: any Database) async throws -> Void
    /// Runs writes in one transaction: each one's error (or nil) in order, or throws when the
    /// transaction as a whole failed to begin or to commit.
    typealias Transaction = GroupCommit<Write>.Commit

    private let writes: GroupCommit<Write>

    /// - Parameter maxGroup: the most writes one transaction takes, so that a crowd of writers
    ///   is not one huge rollback.
    init(maxGroup: Int = 256) {
        writes = GroupCommit(maxGroup: maxGroup)
    }

    /// Runs `body` in a transaction shared with the writes waiting beside it.
    func run<T: Sendable>(
        _ body: @escaping @Sendable (any Database) async throws -> T, in transaction: Transaction
    ) async throws -> T {
        let result = NIOLockedValueBox<[T]>([])
        let write: Write = { connection in
            let value = try await body(connection)
            result.withLockedValue { $0 = [value] }
        }
        try await writes.run(write, commit: transaction)
        guard let value = result.withLockedValue({ $0.first }) else {
            preconditionFailure("a write that did not throw has stored its result")
        }
        return value
    }
}
