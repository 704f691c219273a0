import Fluent
import NIOConcurrencyHelpers

/// Runs this process's SQLite writes, many to a transaction (group commit). SQLite has a single
/// writer, and every commit waits for the disk: the write-ahead log is synced at each one. So
/// writes queue here, without holding a pooled connection, and whoever waits when a transaction
/// ends goes in the next one; a write that fails fails alone (see `BelfryDatabase.write`).
/// Every caller returns only once the transaction that holds its write has committed.
///
/// The transactions of a busy spell run one after another in one session on the writer's
/// connection: each statement is a trip to the driver's thread and back, and asking the pool
/// for the connection cost as much as a transaction's statements. A session ends when no
/// write waits.
/// PostgreSQL does not need the gate.
final class WriteGate: Sendable {
    typealias Write = @Sendable (_ connection: any Database) async throws -> Void
    /// Runs writes in one transaction on the session's connection: each one's error (or nil) in
    /// order, or throws when the transaction as a whole failed to begin or to commit.
    typealias Transaction = @Sendable (_ writes: [Write], _ connection: any Database) async throws -> [(any Error)?]
    /// Holds a connection, set up for writing, while `body` runs on it.
    typealias Session = @Sendable (_ body: @escaping @Sendable (any Database) async throws -> Void) async throws -> Void

    private struct Waiter {
        let write: Write
        let done: CheckedContinuation<(any Error)?, Never>
    }

    private struct State {
        var writing = false
        var waiting: [Waiter] = []
    }

    private let state = NIOLockedValueBox(State())
    /// The most writes one transaction takes, so that a crowd of writers is not one huge rollback.
    let maxGroup: Int

    init(maxGroup: Int = 256) {
        self.maxGroup = maxGroup
    }

    /// Writes waiting for their transaction.
    var waiting: Int { state.withLockedValue { $0.waiting.count } }

    /// Runs `body` in a transaction shared with the writes waiting beside it. The first caller
    /// of a busy spell opens the session (through `session`) that the others' writes join.
    func run<T: Sendable>(
        _ body: @escaping @Sendable (any Database) async throws -> T, session: @escaping Session,
        transaction: @escaping Transaction
    ) async throws -> T {
        let result = NIOLockedValueBox<[T]>([])
        let write: Write = { connection in
            let value = try await body(connection)
            result.withLockedValue { $0 = [value] }
        }
        let error = await withCheckedContinuation { (continuation: CheckedContinuation<(any Error)?, Never>) in
            let opens = state.withLockedValue { state -> Bool in
                state.waiting.append(Waiter(write: write, done: continuation))
                guard !state.writing else { return false }
                state.writing = true
                return true
            }
            // The session is no caller's: a caller returns once its own write has committed.
            if opens { Task { await self.write(session, transaction) } }
        }
        if let error { throw error }
        guard let value = result.withLockedValue({ $0.first }) else {
            preconditionFailure("a write that did not throw has stored its result")
        }
        return value
    }

    /// Sessions, one after another, until no write waits.
    private func write(_ session: Session, _ transaction: @escaping Transaction) async {
        while true {
            do {
                try await session { connection in
                    while let group = self.nextGroup() {
                        let errors: [(any Error)?]
                        do {
                            errors = try await transaction(group.map(\.write), connection)
                        } catch {
                            errors = Array(repeating: error, count: group.count)
                        }
                        for (waiter, error) in zip(group, errors) { waiter.done.resume(returning: error) }
                    }
                }
            } catch {
                // No connection for a session: the writes waiting now fail with that error.
                let failed = state.withLockedValue { state -> [Waiter] in
                    defer { state.waiting = [] }
                    return state.waiting
                }
                for waiter in failed { waiter.done.resume(returning: error) }
            }
            let done = state.withLockedValue { state -> Bool in
                guard state.waiting.isEmpty else { return false }
                state.writing = false
                return true
            }
            if done { return }
        }
    }

    /// The writes of the next transaction, or nil when none waits.
    private func nextGroup() -> [Waiter]? {
        state.withLockedValue { state in
            guard !state.waiting.isEmpty else { return nil }
            let group = Array(state.waiting.prefix(maxGroup))
            state.waiting.removeFirst(group.count)
            return group
        }
    }
}
