import Foundation

/// The time and the waits of the background services. The server's is the wall clock; unit
/// tests drive a manual one, so that no test sleeps.
protocol ServiceClock: Sendable {
    var now: Date { get }
    /// Returns after `seconds`, or throws `CancellationError` once the task is cancelled.
    func sleep(for seconds: TimeInterval) async throws
}

/// The wall clock (or the one `ConfigureOptions.now` gives), with real sleeps.
struct ServerClock: ServiceClock {
    let current: @Sendable () -> Date

    var now: Date { current() }

    func sleep(for seconds: TimeInterval) async throws {
        try await Task.sleep(for: .seconds(seconds))
    }
}
