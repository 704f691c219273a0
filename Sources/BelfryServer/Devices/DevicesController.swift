import BelfryCore
import BelfryWebPush
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
        routes.get("v1", "webpush", "vapid-public-key", use: vapidPublicKey)
    }

    /// The key browsers pass as `applicationServerKey` to `PushManager.subscribe`. No auth: it is public.
    @Sendable func vapidPublicKey(req: Request) async throws -> Response {
        guard req.belfry.settings.vapidSubject != nil else {
            throw BelfryError(
                .webPushOff, "this server does not send Web Push (the operator has not set BELFRY_VAPID_SUBJECT)")
        }
        struct Key: Encodable {
            var publicKey: String
            enum CodingKeys: String, CodingKey { case publicKey = "public_key" }
        }
        return try Response.json(Key(publicKey: req.belfry.vapidKey.publicKeyBase64URL))
    }

    /// The preference page's token registers and removes its browser's Web Push subscription.
    @Sendable func register(req: Request) async throws -> Response {
        let subject = try await req.requireUserSubject(page: .preferences)
        let user = try await req.user(for: subject)
        let body = try req.decodeBody(
            DeviceRegistration.self,
            keys: [
                "platform", "token", "environment", "topic", "authorization", "settings", "locale", "app_version",
                "subscription", "user_agent",
            ],
            nested: [
                "settings": ["alert", "sound", "badge", "notification_center"],
                "subscription": ["endpoint", "keys", "expirationTime"], "subscription.keys": ["p256dh", "auth"],
            ])
        if subject.page != nil, body.platform != .webPush {
            throw BelfryError(.forbidden, "a page's token registers only its browser's web_push subscription")
        }
        let registration = try Self.validate(body, allowingLoopback: req.belfry.settings.webPushAllowsLoopback)
        let registered = try await req.belfry.deviceStore.register(
            registration, userID: try user.requireID(), limit: req.belfry.settings.maxDevicesPerUser, on: req.db)
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
            try await req.belfry.auditLog.record(
                .deviceMoved, by: "user:\(user.externalID)", subject: device.id.uuidString.lowercased(),
                detail: "\(device.platform.rawValue) device moved from \(previousID) to \(user.externalID)", on: req.db)
        }
        return try Response.json(device.record, status: registered.created ? .created : .ok)
    }

    @Sendable func list(req: Request) async throws -> Response {
        let user = try await req.requireUser()
        let devices = try await req.belfry.deviceStore.devices(of: try user.requireID(), on: req.db)
        return try Response.json(DeviceList(devices: devices.map(\.record)))
    }

    @Sendable func remove(req: Request) async throws -> HTTPStatus {
        let user = try await req.requireUser(page: .preferences)
        let text = req.parameters.get("device_id") ?? ""
        // Another user's device answers exactly like one that does not exist.
        guard let id = UUID(uuidString: text),
            try await req.belfry.deviceStore.delete(id, userID: try user.requireID(), on: req.db)
        else {
            throw BelfryError(.deviceNotFound, "you have no device \"\(text)\"")
        }
        return .noContent
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
        case .fcm:
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
        case .webPush:
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
}
