import Foundation

/// A clock that moves only when told to, for tests and previews of code using the SDK:
/// debounce windows, backoff and reconnects wait on it, and wake when `advance` passes their deadline.
public final class ManualClock: ClientClock, @unchecked Sendable {
    // @unchecked: all state is under `lock`.
    private let lock = NSLock()
    private var current: Date
    private var sleepers: [(deadline: Date, id: UUID, continuation: CheckedContinuation<Void, any Error>)] = []

    /// - Parameter start: the time the clock starts at.
    public init(_ start: Date = Date(timeIntervalSince1970: 1_800_000_000)) {
        current = start
    }

    public func now() -> Date {
        lock.lock()
        defer { lock.unlock() }
        return current
    }

    /// Tasks waiting on this clock.
    public var sleeperCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return sleepers.count
    }

    public func sleep(until deadline: Date) async throws {
        let id = UUID()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                lock.lock()
                if Task.isCancelled {
                    lock.unlock()
                    continuation.resume(throwing: CancellationError())
                    return
                }
                if deadline <= current {
                    lock.unlock()
                    continuation.resume()
                    return
                }
                sleepers.append((deadline, id, continuation))
                lock.unlock()
            }
        } onCancel: {
            lock.lock()
            let cancelled = sleepers.filter { $0.id == id }
            sleepers.removeAll { $0.id == id }
            lock.unlock()
            cancelled.forEach { $0.continuation.resume(throwing: CancellationError()) }
        }
    }

    /// Moves time on and wakes the sleepers whose deadline passed, then lets them run.
    public func advance(by seconds: TimeInterval) async {
        let due = lock.withLock {
            current.addTimeInterval(seconds)
            let due = sleepers.filter { $0.deadline <= current }
            sleepers.removeAll { $0.deadline <= current }
            return due
        }
        due.forEach { $0.continuation.resume() }
        for _ in 0..<20 { await Task.yield() }
    }
}
