import BelfryCore
import BelfryHTTP2
import Foundation
import NIOCore

/// What the push benchmarks (`APNsBenchmark`, `FCMBenchmark`, `WebPushBenchmark`) share: the
/// message they send and the loop that keeps a fixed number of sends in flight.
package enum PushBenchmark {
    /// What an HTTP/2 provider's benchmark sent, and how fast.
    package struct Result: Sendable {
        package var sent: Int
        package var failed: Int
        package var seconds: Double
        /// What was sent, so another client can send the same: path, headers and body.
        package var path: String
        package var headers: [(String, String)]
        package var payload: Data
    }

    /// A typical notification: a mention, with a link.
    static func sampleContent() -> DeliveryContent {
        DeliveryContent(
            deliveryID: UUID(), notificationID: UUID(), category: WorkspaceConfig.demo.mentionCategory,
            tenant: "enwiki", title: "Ada mentioned you", body: "in Talk:Bell tower: what do you think, @Grace?",
            url: "https://en.example.org/wiki/Talk:Bell_tower", createdAt: Date())
    }

    /// Runs `send` `count` times with at most `concurrency` at once, all on `loop` when given
    /// (and task executors exist): the loop that sends them also starts the next, as h2load's
    /// one thread does.
    /// - Returns: how many answered `true`, and the seconds taken.
    static func run(
        count: Int, concurrency: Int, on loop: (any EventLoop)? = nil,
        _ send: @escaping @Sendable () async throws -> Bool
    ) async throws -> (succeeded: Int, seconds: Double) {
        let started = ContinuousClock.now
        let succeeded = try await runningOn(loop) { try await drive(count: count, concurrency: concurrency, send) }
        return (succeeded, seconds(since: started))
    }

    private static func drive(
        count: Int, concurrency: Int, _ send: @escaping @Sendable () async throws -> Bool
    ) async throws -> Int {
        try await withThrowingTaskGroup(of: Bool.self) { group in
            var next = 0
            var succeeded = 0
            while next < min(concurrency, count) {
                group.addTask(operation: send)
                next += 1
            }
            while let ok = try await group.next() {
                if ok { succeeded += 1 }
                if next < count {
                    group.addTask(operation: send)
                    next += 1
                }
            }
            return succeeded
        }
    }

    static func seconds(since start: ContinuousClock.Instant) -> Double {
        start.duration(to: .now).inSeconds
    }
}

extension WorkspaceConfig {
    /// The demo's `mention` category, which the benchmarks send.
    var mentionCategory: CategoryDefinition {
        guard let category = category("mention") else {
            preconditionFailure("the built-in demo workspace has a \"mention\" category; its tests check it")
        }
        return category
    }
}
