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
        let answer = request.eventLoop.makePromise(of: Response.self)
        let answered = NIOLockedValueBox(false)
        @Sendable func finish(_ result: Result<Response, any Error>) {
            guard
                answered.withLockedValue({ done in
                    defer { done = true }; return !done
                })
            else { return }
            answer.completeWith(result)
        }
        let deadline = request.eventLoop.scheduleTask(in: .seconds(Int64(seconds))) {
            request.logger.notice(
                "request not read within the deadline", metadata: ["belfry.timeout_seconds": "\(seconds)"])
            finish(
                .failure(
                    BelfryError(
                        .requestTimeout,
                        "the request was not received within \(seconds) s (BELFRY_REQUEST_TIMEOUT); send it again")))
        }
        // The handler goes on: one waiting on a body that never comes ends when the idle timeout
        // closes the connection.
        next.respond(to: request).whenComplete { result in
            finish(result)
            deadline.cancel()
        }
        return answer.futureResult
    }
}
