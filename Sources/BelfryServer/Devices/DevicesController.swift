import BelfryCore
import BelfryWebPush
import Fluent
import Foundation
import Vapor

/// The signed-in user's push devices: `POST`, `GET /v1/me/devices`, `DELETE /v1/me/devices/{id}`.
struct DevicesController: RouteCollection {
    /// The server's settings and shared parts (the clock, the workspace, the database).
    let context: BelfryContext
    let auditLog: AuditLog
    let devices: DeviceStore

    func boot(routes: any RoutesBuilder) throws {
        let devices = routes.grouped("v1", "me", "devices")
        devices.post(use: register)
        devices.get(use: list)
        devices.delete(":device_id", use: remove)
        routes.get("v1", "webpush", "vapid-public-key", use: vapidPublicKey)
    }

    /// The key browsers pass as `applicationServerKey` to `PushManager.subscribe`: the server's,
    /// or with `?app=` that web_push app's. No auth: it is public.
    @Sendable func vapidPublicKey(req: Request) async throws -> Response {
        struct Key: Encodable {
            var publicKey: String
            enum CodingKeys: String, CodingKey { case publicKey = "public_key" }
        }
        let settings = context.settings
        if let name = req.query[String.self, at: "app"] {
            let apps = settings.apps.filter { $0.platform == .webPush }
            guard let app = apps.first(where: { $0.id == name }), case .webPush(_, let pem) = app.credentials else {
                throw BelfryError(
                    .notFound,
                    "\"\(name)\" is not one of this server's web_push apps"
                        + (apps.isEmpty ? "" : " (\(apps.map(\.id).joined(separator: ", ")))"))
            }
            return try Response.json(Key(publicKey: try VAPIDKey(pemRepresentation: pem).publicKeyBase64URL))
        }
        guard settings.vapidSubject != nil else {
            throw BelfryError(
                .webPushOff,
                "this server does not send Web Push (the operator has not set \(ServerSetting.vapidSubject.environment))"
            )
        }
        return try Response.json(Key(publicKey: context.vapidKey.publicKeyBase64URL))
    }

    /// The preference page's token registers and removes its browser's Web Push subscription.
    @Sendable func register(req: Request) async throws -> Response {
        let subject = try await req.requireUserSubject(context.auth, page: .preferences)
        let user = try await req.user(for: subject)
        var body = try req.decodeBody(DeviceRegistration.self)
        if subject.page != nil, body.platform != .webPush {
            throw BelfryError(.forbidden, "a page's token registers only its browser's web_push subscription")
        }
        let settings = context.settings
        let app = try Self.app(of: body, settings: settings)
        if case .apns(_, let environment?) = app?.credentials, body.environment == nil {
            body.environment = environment
        }
        var registration = try Self.validate(body, allowingLoopback: settings.webPushAllowsLoopback)
        registration.app = app?.id
        try Self.checkTenants(allow: app?.id, user: try await user.tenantIDs(on: req.db), workspace: settings.workspace)
        let registered = try await self.devices.register(
            registration, userID: try user.requireID(), limit: context.settings.maxDevicesPerUser, on: req.db)
        let device = registered.device
        req.logger.info(
            "device registered",
            metadata: [
                "belfry.user": "\(user.externalID)", "belfry.device": "\(device.id)",
                "belfry.platform": "\(device.platform.rawValue)",
                "belfry.authorization": "\(device.authorization.rawValue)",
            ])
        if let previous = registered.movedFrom {
            let previousID = try await UserModel.find(previous, on: req.db)?.externalID ?? previous.uuidString
            req.logger.warning(
                "device moved between users",
                metadata: [
                    "belfry.user": "\(user.externalID)", "belfry.device": "\(device.id)",
                    "belfry.previous_user": "\(previousID)",
                ])
            try await self.auditLog.record(
                .deviceMoved, by: "user:\(user.externalID)", subject: device.id.uuidString.lowercased(),
                detail: "\(device.platform.rawValue) device moved from \(previousID) to \(user.externalID)", on: req.db)
        }
        return try Response.json(device.record, status: registered.created ? .created : .ok)
    }

    @Sendable func list(req: Request) async throws -> Response {
        let user = try await req.requireUser(context.auth)
        let devices = try await self.devices.devices(of: try user.requireID(), on: req.db)
        return try Response.json(DeviceList(devices: devices.map(\.record)))
    }

    @Sendable func remove(req: Request) async throws -> HTTPStatus {
        let user = try await req.requireUser(context.auth, page: .preferences)
        let text = req.parameters.get("device_id") ?? ""
        // Another user's device answers exactly like one that does not exist.
        guard let id = UUID(uuidString: text),
            try await self.devices.delete(id, userID: try user.requireID(), on: req.db)
        else {
            throw BelfryError(.deviceNotFound, "you have no device \"\(text)\"")
        }
        return .noContent
    }

    /// The app a registration is for: the one it names, else the platform's only one. `nil`:
    /// the platform's implicit app (the server settings), or none configured.
    static func app(of body: DeviceRegistration, settings: ServerConfiguration) throws -> PushApp? {
        let apps = settings.apps.filter { $0.platform == body.platform }
        let names = apps.map(\.id).joined(separator: ", ")
        guard let name = body.app else {
            if settings.hasImplicitApp(body.platform) || apps.isEmpty { return nil }
            if apps.count == 1 { return apps[0] }
            throw BelfryError.invalid(
                "field \"app\" is required: this server has several \(body.platform.rawValue) apps (\(names))")
        }
        guard let app = apps.first(where: { $0.id == name }) else {
            throw BelfryError.invalid(
                "field \"app\": \"\(name)\" is not one of this server's \(body.platform.rawValue) apps"
                    + (apps.isEmpty ? " (it has none)" : " (\(names))"))
        }
        return app
    }

    /// Refuses an app that none of the user's tenants (the default tenant, for a user without
    /// any) lets its users' devices use.
    static func checkTenants(allow app: String?, user tenants: [String], workspace: WorkspaceConfig) throws {
        let tenants = (tenants.isEmpty ? [workspace.defaultTenant] : tenants).compactMap(workspace.tenant)
        guard !tenants.isEmpty, !tenants.contains(where: { $0.allows(app: app) }) else { return }
        let named = app.map { "app \"\($0)\"" } ?? "the server's own app (no \"app\" given)"
        let allowed = Set(tenants.flatMap { $0.apps ?? [] }).sorted().joined(separator: ", ")
        throw BelfryError.invalid(
            "\(named) is not one of the apps of tenant \(tenants.map { "\"\($0.id)\"" }.joined(separator: ", ")) "
                + "(\(allowed))")
    }

    /// Checks a registration and turns it into what is stored. `allowingLoopback` lets Web Push
    /// endpoints point at loopback IP addresses, for tests.
    static func validate(_ body: DeviceRegistration, allowingLoopback: Bool) throws -> DeviceStore.Registration {
        func check(_ value: String?, _ field: String, max: Int) throws {
            guard let value else { return }
            guard !value.isEmpty, value.count <= max else {
                throw BelfryError.invalid("field \"\(field)\" must be 1 to \(max) characters long")
            }
        }
        try check(body.topic, "topic", max: 255)
        try check(body.locale, "locale", max: 35)
        try check(body.appVersion, "app_version", max: 64)
        try check(body.userAgent, "user_agent", max: 512)
        switch body.platform {
        case .apns: return try apns(body)
        case .fcm: return try fcm(body)
        case .webPush: return try webPush(body, allowingLoopback: allowingLoopback)
        }
    }

    private static func apns(_ body: DeviceRegistration) throws -> DeviceStore.Registration {
        guard let token = body.token else {
            throw BelfryError.invalid("field \"token\" is required for apns devices")
        }
        guard token.count % 2 == 0, (64...200).contains(token.count), token.allSatisfy(\.isHexDigit) else {
            throw BelfryError.invalid(
                "field \"token\" must be an even number (64 to 200) of hex digits, got \(token.count) characters")
        }
        guard let environment = body.environment else {
            throw BelfryError.invalid(
                "field \"environment\" is required for apns devices: \"sandbox\" or \"production\"")
        }
        guard let authorization = body.authorization else {
            throw BelfryError.invalid(
                "field \"authorization\" is required for apns devices: "
                    + PushAuthorization.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", "))
        }
        guard body.subscription == nil else {
            throw BelfryError.invalid("field \"subscription\" is for web_push devices")
        }
        return DeviceStore.Registration(
            platform: .apns, address: token.lowercased(), environment: environment, topic: body.topic,
            authorization: authorization, settings: body.settings ?? PushSettings(), locale: body.locale,
            appVersion: body.appVersion, userAgent: body.userAgent)
    }

    private static func fcm(_ body: DeviceRegistration) throws -> DeviceStore.Registration {
        guard let token = body.token else {
            throw BelfryError.invalid(
                "field \"token\" is required for fcm devices: the app's FCM registration token")
        }
        guard (20...4096).contains(token.utf8.count),
            token.unicodeScalars.allSatisfy({
                $0.isASCII && ($0.properties.isAlphabetic || "0123456789-_:.".unicodeScalars.contains($0))
            })
        else {
            throw BelfryError.invalid(
                "field \"token\" must be an FCM registration token: 20 to 4096 letters, digits, "
                    + "\"-\", \"_\", \":\" or \".\", got \(token.count) characters")
        }
        for (value, field) in [(body.environment?.rawValue, "environment"), (body.topic, "topic")]
        where value != nil {
            throw BelfryError.invalid("field \"\(field)\" is for apns devices")
        }
        guard body.subscription == nil else {
            throw BelfryError.invalid("field \"subscription\" is for web_push devices")
        }
        // Android asks for the notification permission only from version 13 on: an app that
        // does not say has it.
        return DeviceStore.Registration(
            platform: .fcm, address: token, authorization: body.authorization ?? .authorized,
            settings: body.settings ?? PushSettings(), locale: body.locale, appVersion: body.appVersion,
            userAgent: body.userAgent)
    }

    private static func webPush(
        _ body: DeviceRegistration, allowingLoopback: Bool
    ) throws -> DeviceStore.Registration {
        guard let subscription = body.subscription else {
            throw BelfryError.invalid(
                "field \"subscription\" is required for web_push devices: the browser's PushSubscription.toJSON()")
        }
        if body.token != nil { throw BelfryError.invalid("field \"token\" is for apns and fcm devices") }
        if body.environment != nil { throw BelfryError.invalid("field \"environment\" is for apns devices") }
        let endpoint = subscription.endpoint
        if let problem = PushEndpoint.problem(with: endpoint, allowingLoopback: allowingLoopback) {
            throw BelfryError.invalid("field \"subscription.endpoint\" \(problem)")
        }
        do {
            _ = try WebPushSubscriberKeys(p256dh: subscription.keys.p256dh, auth: subscription.keys.auth)
        } catch {
            throw BelfryError.invalid("field \"subscription.\(error.field)\": \(error.description)")
        }
        return DeviceStore.Registration(
            platform: .webPush, address: endpoint, p256dh: subscription.keys.p256dh,
            authSecret: subscription.keys.auth, authorization: body.authorization ?? .authorized,
            settings: body.settings ?? PushSettings(), locale: body.locale, appVersion: body.appVersion,
            userAgent: body.userAgent)
    }
}
