import BelfryCore
import Fluent
import Foundation
import Vapor

/// The signed-in user's push devices: `POST`, `GET /v1/me/devices`, `DELETE /v1/me/devices/{id}`.
struct DevicesController: RouteCollection {
    func boot(routes: any RoutesBuilder) throws {
        let devices = routes.grouped("v1", "me", "devices")
        devices.post(use: register)
        devices.get(use: list)
        devices.delete(":device_id", use: remove)
    }

    @Sendable func register(req: Request) async throws -> Response {
        let user = try await req.requireUser()
        let body = try req.decodeBody(
            DeviceRegistration.self,
            keys: [
                "platform", "token", "environment", "topic", "authorization", "settings", "locale", "app_version",
                "subscription", "user_agent",
            ],
            nested: ["settings": ["alert", "sound", "badge"], "subscription": ["endpoint", "keys", "expirationTime"]])
        let registration = try Self.validate(body)
        let (device, created) = try await DeviceStore(context: req.belfry).register(
            registration, userID: try user.requireID(), on: req.db)
        req.logger.info(
            "device registered",
            metadata: [
                "belfry.user": "\(user.externalID)", "belfry.device": "\(device.id)",
                "belfry.platform": "\(device.platform.rawValue)",
                "belfry.authorization": "\(device.authorization.rawValue)",
            ])
        return try Response.json(device.record, status: created ? .created : .ok)
    }

    @Sendable func list(req: Request) async throws -> Response {
        let user = try await req.requireUser()
        let devices = try await DeviceStore(context: req.belfry).devices(of: try user.requireID(), on: req.db)
        return try Response.json(DeviceList(devices: devices.map(\.record)))
    }

    @Sendable func remove(req: Request) async throws -> HTTPStatus {
        let user = try await req.requireUser()
        let text = req.parameters.get("device_id") ?? ""
        // Another user's device answers exactly like one that does not exist.
        guard let id = UUID(uuidString: text),
            try await DeviceStore(context: req.belfry).delete(id, userID: try user.requireID(), on: req.db)
        else {
            throw BelfryError.notFound("device_not_found", "you have no device \"\(text)\"")
        }
        return .noContent
    }

    /// Checks a registration and turns it into what is stored.
    static func validate(_ body: DeviceRegistration) throws -> DeviceStore.Registration {
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
        case .apns:
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
        case .webPush:
            throw BelfryError.invalid("web_push devices are not accepted yet: this server has no Web Push channel")
        }
    }
}
