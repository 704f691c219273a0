import Foundation
import Vapor

/// Times every request into `belfry_http_request_duration_seconds`. It runs outermost, so it
/// sees the status the client gets, errors included.
struct MetricsMiddleware: Middleware {
    let metrics: BelfryMetrics

    func respond(to request: Request, chainingTo next: any Responder) -> EventLoopFuture<Response> {
        let started = ContinuousClock.now
        // Routing runs before the middleware: a request no route matched has no pattern.
        let route = request.route.map { "/" + $0.path.map(\.description).joined(separator: "/") } ?? "unmatched"
        return next.respond(to: request).always { result in
            let status =
                switch result {
                case .success(let response): response.status.code
                case .failure(let error): BelfryErrorMiddleware.classify(error).status.code
                }
            metrics.answered(
                route: route, method: request.method.rawValue, status: Int(status), after: ContinuousClock.now - started
            )
        }
    }
}
