import BelfryCore
import BelfryJSON
import Fluent
import Foundation
import SQLKit
import Vapor

/// `POST /v1/events` (trigger) and `GET /v1/events/{event_id}` (fan-out and delivery status), API key:
/// decodes and authenticates; `EventIntake` checks and stores.
struct EventsController: RouteCollection {
    let auth: Authenticator
    let eventIntake: EventIntake
    let eventStatuses: EventStatusQuery

    func boot(routes: any RoutesBuilder) throws {
        // 10 000 recipients of up to 128 characters need more than the default body limit.
        routes.on(.POST, "v1", "events", bodyLimit: "2mb", use: trigger)
        routes.get("v1", "events", ":event_id", use: status)
    }

    @Sendable func trigger(req: Request) async throws -> Response {
        try await req.requireServer(auth, .publish)
        var event = try req.decodeBody(EventRequest.self)
        if let header = req.headers.first(name: "Idempotency-Key") {
            if let key = event.idempotencyKey, key != header {
                throw BelfryError.invalid("the Idempotency-Key header and \"idempotency_key\" differ; send one")
            }
            event.idempotencyKey = header
        }
        let accepted = try await self.eventIntake.accept(event, on: req.db)
        req.logger.info(
            "event accepted",
            metadata: [
                "belfry.event.id": "\(accepted.id)", "belfry.category": "\(event.category)",
                "belfry.recipients": "\(accepted.recipients)", "belfry.replayed": "\(accepted.replayed)",
            ])
        let id = accepted.id.upperCaseText
        var headers: HTTPHeaders = ["Location": "/v1/events/\(id)"]
        if accepted.replayed { headers.add(name: "Idempotent-Replayed", value: "true") }
        headers.contentType = .json
        return Response(status: .accepted, headers: headers, body: .init(string: Self.acceptedBody(id)))
    }

    /// `EventAccepted` as `Response.json` writes it, without an encoder: this is the busiest
    /// answer, and `JSONEncoder` was a tenth of the handler's time in the intake benchmark.
    static func acceptedBody(_ id: String) -> String {
        #"{"event_id":""# + id + #""}"#
    }

    @Sendable func status(req: Request) async throws -> Response {
        try await req.requireServer(auth, .read, .publish)
        guard let id = req.parameters.get("event_id").flatMap(UUID.init(uuidString:)) else {
            throw BelfryError(.eventNotFound, "no event \"\(req.parameters.get("event_id") ?? "")\"")
        }
        guard let status = try await self.eventStatuses.status(of: id, on: req.db) else {
            throw BelfryError(.eventNotFound, "no event \"\(id)\"")
        }
        return try Response.json(status)
    }
}
