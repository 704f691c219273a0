import NIOPosix

/// Runs the SQLite writer's sessions on the driver's own threads. Each statement is a trip to
/// those threads and back; back on Swift's shared threads, the session would queue behind every
/// request being answered, and the single writer, which every write waits for, would wait
/// longest of all. Here the session's next step goes into the driver's queue as its statement
/// ends, and a driver thread, often the one that ran the statement, takes it up.
final class WriterExecutor: Sendable {
    private let threadPool: NIOThreadPool

    /// - Parameter threadPool: the pool SQLite's connections run their statements on.
    init(threadPool: NIOThreadPool) {
        self.threadPool = threadPool
    }

    /// Runs `operation` with the driver's threads preferred for its code.
    func run<T: Sendable>(_ operation: @Sendable () async throws -> T) async throws -> T {
        if #available(macOS 15.0, iOS 18.0, *) {
            return try await withTaskExecutorPreference(self) { try await operation() }
        }
        return try await operation()
    }
}

@available(macOS 15.0, iOS 18.0, *)
extension WriterExecutor: TaskExecutor {
    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        threadPool.submit { state in
            guard case .active = state else {
                // A pool shut down calls this at once, inside `enqueue`: the job goes to Swift's
                // shared threads instead, as an executor must not run a job as it is enqueued.
                globalConcurrentExecutor.enqueue(ExecutorJob(job))
                return
            }
            job.runSynchronously(on: self.asUnownedTaskExecutor())
        }
    }
}
