import NIOConcurrencyHelpers
import Vapor

/// While the database is in trouble (the monitor's `isTroubled`: it failed someone in the last
/// 30 s), a request still waiting for its answer after `seconds` is answered 503
/// `database_unavailable` with `Retry-After`, and the monitor hears of it. A query lost with its
/// connection never ends, and its request would otherwise wait for the request deadline. A
/// request that is merely slow while the database is well waits as long as it needs.
struct DatabaseDeadlineMiddleware: Middleware {
    let seconds: Int64

    func respond(to request: Request, chainingTo next: any Responder) -> EventLoopFuture<Response> {
        guard let monitor = request.application.databaseMonitor else { return next.respond(to: request) }
        let answer = request.eventLoop.makePromise(of: Response.self)
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
        let deadline = request.eventLoop.scheduleTask(in: .seconds(seconds)) {
            guard monitor.isTroubled else { return }
            let failure = DeadlineExceeded(what: "a request on a troubled database", seconds: TimeInterval(seconds))
            if finish(.failure(DatabaseFailure.answer(for: failure) ?? failure)) { monitor.noteFailure(failure) }
        }
        next.respond(to: request).whenComplete { result in
            _ = finish(result)
            deadline.cancel()
        }
        return answer.futureResult
    }
}
