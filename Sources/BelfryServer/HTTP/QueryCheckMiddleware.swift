import Vapor

/// Refuses a request whose query string cannot be decoded (400). Vapor's query reader skips such a
/// value as if it were absent, so `?tenant=%FF` would act on the default tenant.
struct QueryCheckMiddleware: AsyncMiddleware {
    func respond(to request: Request, chainingTo next: any AsyncResponder) async throws -> Response {
        if let query = request.url.query {
            do {
                _ = try URLEncoded.pairs(Substring(query))
            } catch {
                let message = "The query string has \"\(error.part)\", which is not percent-encoded UTF-8."
                // The JSON API answers in JSON; the pages a browser opens answer with a page.
                guard request.url.path.hasPrefix("/v1/") else {
                    return WebResponse.error(status: .badRequest, message: message)
                }
                throw BelfryError.badRequest(message)
            }
        }
        return try await next.respond(to: request)
    }
}
