import Foundation

/// Time for the SDK: debounce windows, backoff and reconnects all wait on it, so tests drive
/// them with a manual clock instead of sleeping.
public protocol ClientClock: Sendable {
    func now() -> Date
    /// Waits until `deadline`; throws `CancellationError` when the task is cancelled.
    func sleep(until deadline: Date) async throws
}

extension ClientClock {
    /// Waits `seconds`; throws `CancellationError` when the task is cancelled.
    public func sleep(for seconds: TimeInterval) async throws {
        try await sleep(until: now().addingTimeInterval(seconds))
    }
}

/// The real clock.
public struct SystemClock: ClientClock {
    /// The system's clock.
    public init() {}

    public func now() -> Date { Date() }

    public func sleep(until deadline: Date) async throws {
        let seconds = deadline.timeIntervalSinceNow
        if seconds > 0 { try await Task.sleep(nanoseconds: UInt64(seconds * 1_000_000_000)) }
        try Task.checkCancellation()
    }
}
