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
    typealias Transaction = @Sendable (_ writes: [Write]) async throws -> [(any Error)?]

    private enum Turn: Sendable {
        /// Run the next transaction: this caller's write and those waiting.
        case lead
        /// The transaction holding this caller's write has ended, with this write's error if any.
        case done((any Error)?)
    }

    private struct Waiter {
        let write: Write
        let turn: CheckedContinuation<Turn, Never>
    }

    private struct State {
        var busy = false
        var waiting: [Waiter] = []
    }

    private let state = NIOLockedValueBox(State())
    /// The most writes one transaction takes, so that a crowd of writers is not one huge rollback.
    let maxGroup: Int

    init(maxGroup: Int = 256) {
        self.maxGroup = maxGroup
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
        let turn = await withCheckedContinuation { (continuation: CheckedContinuation<Turn, Never>) in
            let leads = state.withLockedValue { state -> Bool in
                guard state.busy else {
                    state.busy = true
                    return true
                }
                state.waiting.append(Waiter(write: write, turn: continuation))
                return false
            }
            if leads { continuation.resume(returning: .lead) }
        }
        let error: (any Error)? =
            switch turn {
            case .done(let error): error
            case .lead: await lead(with: write, transaction)
            }
        if let error { throw error }
        guard let value = result.withLockedValue({ $0.first }) else {
            preconditionFailure("a write that did not throw has stored its result")
        }
        return value
    }

    /// Runs `own` and the writes waiting in one transaction, tells their callers, and hands the
    /// gate to the next caller waiting (or leaves it free).
    private func lead(with own: @escaping Write, _ transaction: Transaction) async -> (any Error)? {
        let others = state.withLockedValue { state -> [Waiter] in
            let group = Array(state.waiting.prefix(maxGroup - 1))
            state.waiting.removeFirst(group.count)
            return group
        }
        let errors: [(any Error)?]
        do {
            errors = try await transaction([own] + others.map(\.write))
        } catch {
            errors = Array(repeating: error, count: others.count + 1)
        }
        for (waiter, error) in zip(others, errors.dropFirst()) { waiter.turn.resume(returning: .done(error)) }
        let next = state.withLockedValue { state -> Waiter? in
            guard !state.waiting.isEmpty else {
                state.busy = false
                return nil
            }
            return state.waiting.removeFirst()
        }
        // The gate stays busy: it passes straight to the next caller, who leads the next group.
        next?.turn.resume(returning: .lead)
        return errors[0]
    }
}
