import Foundation

/// How the background services wait. The server's sleeps for real; tests use `TestClock`
/// (BelfryTestSupport), which returns when the test moves time past the deadline, so that no
/// test sleeps. The time itself comes from the `now` closures every part already takes.
package protocol ServiceClock: Sendable {
    /// Returns after `seconds`, or throws `CancellationError` once the task is cancelled.
    func sleep(for seconds: TimeInterval) async throws
}

/// Real sleeps.
package struct ServerClock: ServiceClock {
    package init() {}

    package func sleep(for seconds: TimeInterval) async throws {
        try await Task.sleep(for: .seconds(seconds))
    }
}
