import NIOConcurrencyHelpers
import NIOCore

/// Runs tasks on one NIO event loop: a task that prefers it and awaits that loop's futures is
/// resumed on the loop without a hop to another thread and back.
///
/// The loop must outlive the tasks that prefer it: NIO drops a job for a loop that has shut
/// down (printing an error), and its task would never resume. Belfry's loops are the
/// process's shared group, which is never shut down.
@available(macOS 15.0, iOS 18.0, tvOS 18.0, watchOS 11.0, *)
public final class EventLoopTaskExecutor: TaskExecutor, Sendable {
    public let eventLoop: any EventLoop

    public init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    private static let byLoop = NIOLockedValueBox<[ObjectIdentifier: EventLoopTaskExecutor]>([:])

    /// The one executor of `loop`: a task that prefers it already, and asks for it again, stays
    /// where it runs instead of being enqueued on the loop anew.
    public static func of(_ loop: any EventLoop) -> EventLoopTaskExecutor {
        byLoop.withLockedValue { executors in
            if let executor = executors[ObjectIdentifier(loop)] { return executor }
            let executor = EventLoopTaskExecutor(loop)
            executors[ObjectIdentifier(loop)] = executor
            return executor
        }
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

/// Runs `body` on `loop` (through an ``EventLoopTaskExecutor``) where the platform has task
/// executors; without a loop, or on older Apple platforms, where the caller runs.
public func runningOn<T, Failure: Error>(
    _ loop: (any EventLoop)?, isolation: isolated (any Actor)? = #isolation,
    _ body: () async throws(Failure) -> T
) async throws(Failure) -> T {
    if #available(macOS 15, iOS 18, tvOS 18, watchOS 11, *), let loop {
        return try await withTaskExecutorPreference(
            EventLoopTaskExecutor.of(loop), isolation: isolation, operation: body)
    }
    return try await body()
}

extension DiscardingTaskGroup {
    /// Adds a child task that runs on `loop` from its start to its end (where the platform has
    /// task executors): work that sends on the loop and then only hands on its answer pays no
    /// hop to another thread and back.
    public mutating func addTask(runningOn loop: (any EventLoop)?, operation: sending @escaping () async -> Void) {
        if #available(macOS 15, iOS 18, tvOS 18, watchOS 11, *), let loop {
            addTask(executorPreference: EventLoopTaskExecutor.of(loop), operation: operation)
        } else {
            addTask(operation: operation)
        }
    }
}
