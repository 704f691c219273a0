import BelfryCore
import Fluent
import Foundation
import Vapor

/// A user's quiet hours: `/v1/me/quiet-hours` (user token) and `/v1/users/{user_id}/quiet-hours`
/// (API key or that user's token).
struct QuietHoursController: RouteCollection {
    /// The server's settings and shared parts (the clock, the workspace, the database).
    let context: BelfryContext
    func boot(routes: any RoutesBuilder) throws {
        for route in [["v1", "me", "quiet-hours"], ["v1", "users", ":user_id", "quiet-hours"]] {
            let path = route.map { PathComponent(stringLiteral: $0) }
            routes.get(path) { req in try show(try await owner(req)) }
            routes.put(path) { req in try await update(req, try await owner(req)) }
            routes.delete(path) { req in try await clear(req, try await owner(req)) }
        }
    }

    private func owner(_ req: Request) async throws -> UserModel {
        req.parameters.get("user_id") == nil
            ? try await req.requireUser(context.auth) : try await req.requireServerOrPathUser(context.auth)
    }

    private func show(_ user: UserModel) throws -> Response {
        guard let hours = user.quietHours else {
            throw BelfryError(.quietHoursNotSet, "no quiet hours are set; PUT them to start")
        }
        return try Response.json(hours)
    }

    private func update(_ req: Request, _ user: UserModel) async throws -> Response {
        let hours = try req.decodeBody(QuietHours.self)
        let problems = hours.problems
        guard problems.isEmpty else { throw BelfryError.invalid(problems.joined(separator: "; ")) }
        user.quietStart = hours.start
        user.quietEnd = hours.end
        user.quietTimeZone = hours.timeZone
        user.updatedAt = context.now()
        try await context.database.write(req.db) { db in try await user.save(on: db) }
        return try Response.json(hours)
    }

    private func clear(_ req: Request, _ user: UserModel) async throws -> HTTPStatus {
        user.quietStart = nil
        user.quietEnd = nil
        user.quietTimeZone = nil
        user.updatedAt = context.now()
        try await context.database.write(req.db) { db in try await user.save(on: db) }
        return .noContent
    }
}
