import BelfryCore
import Fluent
import Foundation
import Vapor

/// Preference routes: the client's own (`/v1/me/preferences`, user token) and the
/// server's view of any user (`/v1/users/{user_id}/preferences`, API key or that user's token).
struct PreferencesController: RouteCollection {
    /// The server's settings and shared parts (the clock, the workspace, the database).
    let context: BelfryContext
    let preferenceChanges: PreferenceChanges
    let preferenceStore: PreferenceStore

    func boot(routes: any RoutesBuilder) throws {
        let me = routes.grouped("v1", "me", "preferences")
        me.get(use: { req in try await show(req, user: try await req.requireUser(context.auth, page: .preferences)) })
        me.patch(
            "categories", ":category",
            use: { req in
                let user = try await req.requireUser(context.auth, page: .preferences)
                let change = PreferenceChange.category(
                    try req.pathParameter("category"),
                    try req.decodeBody(PreferenceBody<PreferenceOptions>.self).preference)
                return try await patch(req, user: user, change: change)
            })
        me.patch(
            "categories", ":category", "channels", ":channel",
            use: { req in
                let user = try await req.requireUser(context.auth, page: .preferences)
                let change = PreferenceChange.channelInCategory(
                    channel: try req.pathParameter("channel"), category: try req.pathParameter("category"),
                    try req.decodeBody(PreferenceBody<PreferenceOptions>.self).preference)
                return try await patch(req, user: user, change: change)
            })
        me.patch(
            "channels", ":channel",
            use: { req in
                let user = try await req.requireUser(context.auth, page: .preferences)
                let change = PreferenceChange.overallChannel(
                    try req.pathParameter("channel"),
                    try req.decodeBody(PreferenceBody<ChannelLevelPreferenceOptions>.self)
                        .preference)
                return try await patch(req, user: user, change: change)
            })
        me.post(
            "changes",
            use: { req in try await changeMany(req, user: try await req.requireUser(context.auth, page: .preferences)) }
        )

        let server = routes.grouped("v1", "users", ":user_id", "preferences")
        server.get(use: { req in
            try await show(req, user: try await req.requireServerOrPathUser(context.auth))
        })
        server.post(
            "changes",
            use: { req in
                try await changeMany(
                    req, user: try await req.requireServerOrPathUser(context.auth))
            })
    }

    struct PreferenceBody<Value: Decodable>: Decodable, RequestFields {
        var preference: Value

        enum CodingKeys: String, CodingKey, CaseIterable {
            case preference
        }

        static var fields: Set<String> { CodingKeys.names }
    }

    private func store(_ req: Request) -> PreferenceStore {
        self.preferenceStore
    }

    func show(_ req: Request, user: UserModel) async throws -> Response {
        let scope = try req.preferenceScope(in: context.workspace)
        let view = try await store(req).view(userID: try user.requireID(), scope: scope, on: req.db)
        if let ifNoneMatch = req.headers.first(name: .ifNoneMatch),
            PreferenceStore.matches(ifNoneMatch, current: view.etag)
        {
            return Response(status: .notModified, headers: ["ETag": view.etag])
        }
        return try Response.json(view.data, headers: ["ETag": view.etag])
    }

    func patch(_ req: Request, user: UserModel, change: PreferenceChange) async throws -> Response {
        let scope = try req.preferenceScope(in: context.workspace)
        let expected = req.headers.first(name: .ifMatch).map { [scope: $0] } ?? [:]
        let views = try await self.preferenceChanges.change(
            userID: try user.requireID(), scopes: [scope], changes: [change], expected: expected, on: req.db)
        log(req, user: user, scopes: [scope], count: 1)
        return try Response.json(views[0].data, headers: ["ETag": views[0].etag])
    }

    func changeMany(_ req: Request, user: UserModel) async throws -> Response {
        let body = try req.decodeBody(PreferenceChangesRequest.self)
        let workspace = context.workspace
        guard (1...100).contains(body.changes.count) else {
            throw BelfryError.invalid("field \"changes\" must hold 1 to 100 changes, got \(body.changes.count)")
        }
        let tenants = body.tenants ?? []
        if tenants.count > workspace.tenants.count || Set(tenants).count != tenants.count {
            throw BelfryError.invalid("field \"tenants\" must list each tenant at most once")
        }
        for tenant in tenants where workspace.tenant(tenant) == nil {
            throw BelfryError(.tenantNotFound, "no tenant \"\(tenant)\" in this workspace")
        }
        var scopes = tenants.map(PreferenceScope.tenant)
        if body.defaults == true { scopes.append(.userDefaults) }
        if scopes.isEmpty { scopes = [.tenant(workspace.defaultTenant)] }
        var expected: [PreferenceScope: String] = [:]
        for (key, etag) in body.ifMatch ?? [:] {
            let scope: PreferenceScope = key == "defaults" ? .userDefaults : .tenant(key)
            guard scopes.contains(scope) else {
                throw BelfryError.invalid(
                    "field \"if_match\" names \"\(key)\", which this request does not change")
            }
            expected[scope] = etag
        }
        let views = try await self.preferenceChanges.change(
            userID: try user.requireID(), scopes: scopes, changes: body.changes, expected: expected, on: req.db)
        log(req, user: user, scopes: scopes, count: body.changes.count)
        let results = views.map { view in
            let tenant: String? = if case .tenant(let id) = view.scope { id } else { nil }
            return PreferenceChangesResponse.Result(tenant: tenant, etag: view.etag, preferences: view.data)
        }
        return try Response.json(PreferenceChangesResponse(results: results))
    }

    private func log(_ req: Request, user: UserModel, scopes: [PreferenceScope], count: Int) {
        req.logger.info(
            "preferences changed",
            metadata: [
                "belfry.user": "\(user.externalID)",
                "belfry.scopes": "\(scopes.map(\.key).joined(separator: ","))",
                "belfry.changes": "\(count)",
            ])
    }
}

extension Request {
    /// The scope a preference request reads or writes: `?tenant=` (the workspace default
    /// tenant when absent), or `?scope=defaults` for the user's own defaults.
    func preferenceScope(in workspace: WorkspaceConfig) throws -> PreferenceScope {
        let tenant = query[String.self, at: "tenant"]
        switch query[String.self, at: "scope"] {
        case nil:
            break
        case "defaults":
            guard tenant == nil else {
                throw BelfryError.invalid("give either \"tenant\" or \"scope=defaults\", not both")
            }
            return .userDefaults
        case let other?:
            throw BelfryError.invalid("query parameter \"scope\" must be \"defaults\", got \"\(other)\"")
        }
        let id = tenant ?? workspace.defaultTenant
        guard workspace.tenant(id) != nil else {
            throw BelfryError(.tenantNotFound, "no tenant \"\(id)\" in this workspace")
        }
        return .tenant(id)
    }

    func pathParameter(_ name: String) throws -> String {
        guard let value = parameters.get(name), !value.isEmpty else {
            throw BelfryError.badRequest("the path needs a \(name)")
        }
        return value
    }
}
