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
        return try await withTaskExecutorPreference(EventLoopTaskExecutor(loop), isolation: isolation, operation: body)
    }
    return try await body()
}
