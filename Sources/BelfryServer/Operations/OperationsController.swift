import BelfryCore
import Crypto
import Foundation
import SQLKit
import Vapor

/// `/healthz`, `/readyz`, `/metrics`, `/openapi.yaml` and `GET /v1/config`.
struct OperationsController: RouteCollection {
    /// The server's settings and shared parts (the clock, the workspace, the database).
    let context: BelfryContext
    let auditLog: AuditLog

    func boot(routes: any RoutesBuilder) throws {
        routes.get("healthz", use: health)
        routes.get("readyz", use: ready)
        routes.get("metrics", use: metrics)
        routes.get("openapi.yaml", use: openAPI)
        routes.get("v1", "config", use: config)
        routes.get("v1", "audit", use: audit)
    }

    struct Status: Encodable {
        var status: String
        var database: String?
    }

    /// The process is up.
    @Sendable func health(req: Request) async throws -> Response {
        try Response.json(Status(status: "ok"))
    }

    /// The process can serve: its database answers. Under `belfry serve` the database monitor
    /// already knows when it does not, and this answers at once; else it asks, for a second at most.
    @Sendable func ready(req: Request) async throws -> Response {
        let kind = context.database.kind == .sqlite ? "sqlite" : "postgres"
        do {
            if let monitor = req.application.databaseMonitor, !monitor.isReady {
                throw DeadlineExceeded(what: "the database monitor's last check", seconds: 0)
            }
            let db = req.db
            try await withDeadline(1, "the readiness query") { try await db.sql.raw("SELECT 1").run() }
        } catch {
            req.logger.warning("database not ready", metadata: ["belfry.error": "\(String(reflecting: error))"])
            throw BelfryError(.notReady, "the \(kind) database does not answer")
        }
        return try Response.json(Status(status: "ready", database: kind))
    }

    /// Prometheus's text format. Open unless a metrics token is configured: then only that token, as a bearer.
    @Sendable func metrics(req: Request) async throws -> Response {
        if let token = context.settings.metricsToken {
            // Digests compare in constant time, so the answer's timing tells nothing of the token.
            guard let given = req.headers.bearerAuthorization?.token,
                SHA256.hash(data: Data(given.utf8)) == SHA256.hash(data: Data(token.utf8))
            else {
                throw BelfryError(
                    .unauthorized, "send the metrics token as \"Authorization: Bearer <token>\"", .challenge("Bearer"))
            }
        }
        let text = try await context.metrics.exposition(
            channels: context.workspace.channels.map(\.id), openStreams: context.inboxHub.openStreams,
            now: context.now(), on: req.db.sql)
        var headers = HTTPHeaders()
        headers.replaceOrAdd(name: .contentType, value: "text/plain; version=0.0.4; charset=utf-8")
        return Response(status: .ok, headers: headers, body: .init(string: text))
    }

    @Sendable func openAPI(req: Request) async throws -> Response {
        var headers = HTTPHeaders()
        headers.contentType = HTTPMediaType(type: "application", subType: "yaml")
        return Response(status: .ok, headers: headers, body: .init(string: OpenAPIDocument.text))
    }

    /// `GET /v1/audit?limit=&before=` (an admin key): the audit log, newest first.
    @Sendable func audit(req: Request) async throws -> Response {
        try await req.requireServer(context.auth)
        let limit = try req.query.get(Int?.self, at: "limit") ?? 100
        guard (1...1000).contains(limit) else {
            throw BelfryError.invalid("query \"limit\" must be from 1 to 1000, got \(limit)")
        }
        var before: UUID?
        if let text = try req.query.get(String?.self, at: "before") {
            guard let id = UUID(uuidString: text) else {
                throw BelfryError.invalid("query \"before\" must be an entry's id (a UUID), got \"\(text.prefix(40))\"")
            }
            before = id
        }
        let page = try await self.auditLog.entries(limit: limit, before: before, on: req.db)
        return try Response.json(page)
    }

    /// The workspace in force: channels, sections, categories (their actions and push hints)
    /// and tenants, no secret among them, so any authenticated caller may read it. Apps read
    /// it with a user token to register the categories and actions with the OS; the ETag lets
    /// them keep a copy and ask again cheaply.
    @Sendable func config(req: Request) async throws -> Response {
        _ = try await req.principal(context.auth)
        let etag = "\"\(context.workspaceFingerprint)\""
        if let ifNoneMatch = req.headers.first(name: .ifNoneMatch),
            PreferenceStore.matches(ifNoneMatch, current: etag)
        {
            return Response(status: .notModified, headers: ["ETag": etag])
        }
        return try Response.json(context.workspace, headers: ["ETag": etag])
    }
}

enum OpenAPIDocument {
    /// The OpenAPI document served at `/openapi.yaml`, a resource of this target.
    static let text: String = {
        guard let url = Bundle.module.url(forResource: "openapi", withExtension: "yaml", subdirectory: "Resources"),
            let text = try? String(contentsOf: url, encoding: .utf8)
        else {
            fatalError("openapi.yaml is missing from the BelfryServer bundle")
        }
        return text
    }()
}
