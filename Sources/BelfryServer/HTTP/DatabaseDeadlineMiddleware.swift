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
        let failure = DeadlineExceeded(what: "a request on a troubled database", seconds: TimeInterval(seconds))
        return request.answer(from: next, within: seconds, expired: { monitor.noteFailure(failure) }) {
            // A deadline is always one of `DatabaseFailure`'s: the 503 with its `Retry-After`.
            monitor.isTroubled ? DatabaseFailure.answer(for: failure) : nil
        }
    }
}
