import NIOConcurrencyHelpers
import Vapor

/// Answers 408 when a request is not read and answered within `seconds`: a client that
/// announces a body and stops sending it (or sends it a byte at a time) gets an answer
/// instead of holding the request open forever. Streams are unaffected: their answer starts
/// at once and goes on afterwards. The connection itself is closed by the server's idle
/// timeout once nothing more arrives.
struct RequestDeadlineMiddleware: Middleware {
    let seconds: Int

    func respond(to request: Request, chainingTo next: any Responder) -> EventLoopFuture<Response> {
        request.answer(from: next, within: Int64(seconds)) {
            request.logger.notice(
                "request not read within the deadline", metadata: ["belfry.timeout_seconds": "\(seconds)"])
            return BelfryError(
                .requestTimeout,
                "the request was not received within \(seconds) s (\(ServerSetting.requestTimeout.environment)); send it again"
            )
        }
    }
}

extension Request {
    /// `next`'s answer, unless `seconds` pass first and `expire` then gives an error to answer
    /// with instead (nil: keep waiting for `next`). `expired` runs when that error was the answer.
    /// The handler goes on either way: one waiting on a body that never comes ends when the idle
    /// timeout closes the connection.
    func answer(
        from next: any Responder, within seconds: Int64, expired: @escaping @Sendable () -> Void = {},
        orElse expire: @escaping @Sendable () -> (any Error)?
    ) -> EventLoopFuture<Response> {
        let answer = eventLoop.makePromise(of: Response.self)
        let answered = NIOLockedValueBox(false)
        @Sendable func finish(_ result: Result<Response, any Error>) -> Bool {
            guard
                answered.withLockedValue({ done in
                    defer { done = true }; return !done
                })
            else { return false }
            answer.completeWith(result)
            return true
        }
        let deadline = eventLoop.scheduleTask(in: .seconds(seconds)) {
            if let error = expire(), finish(.failure(error)) { expired() }
        }
        next.respond(to: self).whenComplete { result in
            _ = finish(result)
            deadline.cancel()
        }
        return answer.futureResult
    }
}
