import NIOCore

/// Runs tasks on one NIO event loop: a task that prefers it and awaits that loop's futures is
/// resumed on the loop without a hop to another thread and back.
final class EventLoopTaskExecutor: TaskExecutor, Sendable {
    let eventLoop: any EventLoop

    init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
