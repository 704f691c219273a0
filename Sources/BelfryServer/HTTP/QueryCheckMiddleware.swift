import Vapor

/// Refuses a request whose query string cannot be decoded (400). Vapor's query reader skips such a
/// value as if it were absent, so `?tenant=%FF` would act on the default tenant.
struct QueryCheckMiddleware: Middleware {
    func respond(to request: Request, chainingTo next: any Responder) -> EventLoopFuture<Response> {
        if let query = request.url.query {
            do {
                _ = try URLEncoded.pairs(Substring(query))
            } catch {
                let message = "The query string has \"\(error.part)\", which is not percent-encoded UTF-8."
                // The pages a browser opens answer with a page; everything else in JSON.
                if Self.isPage(request.url.path) {
                    return request.eventLoop.makeSucceededFuture(
                        WebResponse.error(status: .badRequest, message: message))
                }
                return request.eventLoop.makeFailedFuture(BelfryError.badRequest(message))
            }
        }
        return next.respond(to: request)
    }

    static func isPage(_ path: String) -> Bool {
        ["/preferences", "/inbox", "/unsubscribe", "/admin"].contains { page in
            path == page || path.hasPrefix(page + "/")
        }
    }
}
