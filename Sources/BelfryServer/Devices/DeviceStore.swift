import BelfryCore
import Fluent
import Foundation
import SQLKit

/// Push devices: registration, listing, retirement, and what fan-out and the push channels read.
struct DeviceStore: Sendable {
    let storage: BelfryDatabase
    let now: @Sendable () -> Date

    static let columns = [
        "id", "user_id", "platform", "address", "environment", "topic", "p256dh", "auth_secret", "authorization",
        "alert_setting", "sound_setting", "badge_setting", "locale", "app_version", "user_agent", "created_at",
        "updated_at", "retired_at", "retired_reason", "notification_center_setting", "app",
    ]

    /// A device as the push channels need it.
    struct Device: Sendable {
        var id: UUID
        var userID: UUID
        var platform: DevicePlatform
        /// The APNs or FCM token, or the Web Push endpoint.
        var address: String
        var environment: APNsEnvironment?
        var topic: String? = nil
        var p256dh: String? = nil
        var authSecret: String? = nil
        var authorization: PushAuthorization
        var settings: PushSettings
        var locale: String? = nil
        var appVersion: String? = nil
        var userAgent: String? = nil
        var createdAt: Date
        var updatedAt: Date
        var retiredAt: Date? = nil
        var retiredReason: String? = nil
        /// The app it belongs to; `nil`: the platform's one app from the server settings.
        var app: String? = nil

        var record: DeviceRecord {
            DeviceRecord(
                id: id, platform: platform, token: platform == .webPush ? nil : address, environment: environment,
                topic: topic, endpoint: platform == .webPush ? address : nil, authorization: authorization,
                settings: settings, locale: locale, appVersion: appVersion, userAgent: userAgent,
                createdAt: createdAt, updatedAt: updatedAt, retiredAt: retiredAt, retiredReason: retiredReason,
                app: app)
        }
    }

    /// A validated registration, ready to store.
    struct Registration: Sendable {
        var platform: DevicePlatform
        var address: String
        var environment: APNsEnvironment?
        var topic: String?
        var p256dh: String?
        var authSecret: String?
        var authorization: PushAuthorization
        var settings: PushSettings
        var locale: String?
        var appVersion: String?
        var userAgent: String?
        var app: String? = nil
    }

    /// What a registration did.
    struct Registered: Sendable {
        var device: Device
        var created: Bool
        /// The user the token or subscription belonged to before, when it moved to this user.
        var movedFrom: UUID?
    }

    /// Stores a registration: a new device, or the same token's device updated (and active again
    /// if it had been retired). A token another user registered moves to `userID` as a new
    /// device, the old one removed, so that nothing queued for its previous owner reaches the
    /// new one; a Web Push subscription moves only with its keys, which only its browser has.
    /// A user holds at most `limit` active devices.
    func register(
        _ registration: Registration, userID: UUID, limit: Int, on db: any Database
    ) async throws -> Registered {
        let now = now()
        let newID = UUID()
        let kind = storage.kind
        let (id, movedFrom): (UUID, UUID?) = try await storage.write(db) { tx in
            if kind == .postgres {
                // Concurrent registrations of one user count their devices one after another.
                try await tx.sql.raw("SELECT id FROM users WHERE id = \(bind: userID) FOR UPDATE").run()
            }
            let current = try await tx.sql.select().columns("id", "user_id", "p256dh", "auth_secret").from(
                Tables.devices
            )
            .where("platform", .equal, registration.platform.rawValue)
            .where("address", .equal, registration.address).first()
            var movedFrom: UUID?
            if let current, let owner = try current.decode(column: "user_id", as: UUID?.self), owner != userID {
                if registration.platform == .webPush {
                    let keys = (
                        try current.decode(column: "p256dh", as: String?.self),
                        try current.decode(column: "auth_secret", as: String?.self)
                    )
                    guard keys.0 == registration.p256dh, keys.1 == registration.authSecret else {
                        throw BelfryError.invalid(
                            "field \"subscription\": this endpoint is registered with other keys; "
                                + "subscribe again in this browser for a new endpoint")
                    }
                }
                try await tx.sql.delete(from: Tables.devices)
                    .where("id", .equal, try current.decode(column: "id", as: UUID.self)).run()
                movedFrom = owner
            }
            if current == nil || movedFrom != nil {
                let row = try await tx.sql.select().column(SQLFunction("COUNT", args: SQLLiteral.all), as: "count")
                    .from(Tables.devices).where("user_id", .equal, userID).where("retired_at", .is, SQLLiteral.null)
                    .first()
                if try row?.decode(column: "count", as: Int.self) ?? 0 >= limit {
                    throw BelfryError(
                        .deviceLimitReached,
                        "a user may register at most \(limit) devices (max_devices_per_user); "
                            + "remove one with DELETE /v1/me/devices/{device_id} first")
                }
            }
            let row = try await tx.sql.insert(into: Tables.devices)
                .columns(Self.columns)
                .values(
                    newID, userID, registration.platform.rawValue, registration.address,
                    registration.environment?.rawValue, registration.topic, registration.p256dh,
                    registration.authSecret, registration.authorization.rawValue,
                    registration.settings.alert.rawValue, registration.settings.sound.rawValue,
                    registration.settings.badge.rawValue, registration.locale, registration.appVersion,
                    registration.userAgent, now, now, Date?.none, String?.none,
                    registration.settings.notificationCenter.rawValue, registration.app
                )
                .onConflict(with: ["platform", "address"]) { update in
                    Self.columns.filter { !["id", "user_id", "platform", "address", "created_at"].contains($0) }
                        .reduce(update) { $0.set(excludedValueOf: $1) }
                }
                .returning("id")
                .first()
            guard let row else {
                throw BelfryError(.internalError, "the device was not stored")
            }
            return (try row.decode(column: "id", as: UUID.self), movedFrom)
        }
        guard let device = try await device(id, on: db) else {
            throw BelfryError(.internalError, "the device was not stored")
        }
        return Registered(device: device, created: id == newID, movedFrom: movedFrom)
    }

    func device(_ id: UUID, on db: any Database) async throws -> Device? {
        let select = db.sql.select().columns(Self.columns).from(Tables.devices).where("id", .equal, id).limit(1)
        return try await storage.rows(select.query, on: db.sql).first.map { try Self.device($0) }
    }

    /// The user's devices, newest first, retired ones included.
    func devices(of userID: UUID, on db: any Database) async throws -> [Device] {
        let select = db.sql.select().columns(Self.columns).from(Tables.devices).where("user_id", .equal, userID)
            .orderBy("created_at", .descending).orderBy("id", .descending)
        return try await storage.rows(select.query, on: db.sql).map { try Self.device($0) }
    }

    /// The devices that may be notified, of many users at once (for a fan-out batch).
    func deliverableDevices(of users: [UUID], on sql: any SQLDatabase) async throws -> [UUID: [Device]] {
        guard !users.isEmpty else { return [:] }
        let select = sql.select().columns(Self.columns).from(Tables.devices)
            .where("user_id", .in, users).where("retired_at", .is, SQLLiteral.null)
            .where(
                "authorization", .in,
                PushAuthorization.allCases.filter(\.allowsDelivery).map(\.rawValue)
            )
        let rows = try await storage.rows(select.query, on: sql)
        return Dictionary(grouping: try rows.map { try Self.device($0) }, by: \.userID)
    }

    /// Removes one of the user's devices; `false` when they have no such device.
    func delete(_ id: UUID, userID: UUID, on db: any Database) async throws -> Bool {
        try await storage.write(db) { tx in
            try await tx.sql.delete(from: Tables.devices).where("id", .equal, id).where("user_id", .equal, userID)
                .returning("id").all().count == 1
        }
    }

    /// Marks a device gone, as the push service said, in the caller's transaction; it gets
    /// nothing more until registered again.
    func retire(_ id: UUID, reason: String, now: Date, on sql: any SQLDatabase) async throws {
        try await sql.update(Tables.devices)
            .set("retired_at", to: now).set("retired_reason", to: reason).set("updated_at", to: now)
            .where("id", .equal, id).where("retired_at", .is, SQLLiteral.null)
            .run()
    }

    /// A device from a query that selected its columns beside another table's, named
    /// `<prefix><column>` (see `prefixedColumns`): how the delivery queue reads a claimed push's
    /// device in the same query as its delivery.
    func device(_ row: DirectRow, prefix: String) throws -> Device {
        try Self.device(PrefixedRow(row: row, prefix: prefix))
    }

    /// A device from a row of `columns`.
    private static func device(_ row: DirectRow) throws -> Device {
        try device(PrefixedRow(row: row, prefix: ""))
    }

    /// The device columns of `table`, named `<prefix><column>` in the result.
    func prefixedColumns(of table: String, prefix: String) -> String {
        Self.columns.map { "\(table).\($0) AS \(prefix)\($0)" }.joined(separator: ", ")
    }

    private struct PrefixedRow {
        let row: DirectRow
        let prefix: String

        func decode<D: DirectColumn>(column: String, as type: D.Type) throws -> D {
            try row.decode(column: prefix + column, as: type)
        }

        /// A column that may be NULL.
        func decode<D: DirectColumn>(column: String, as type: D?.Type) throws -> D? {
            try row.decode(column: prefix + column, as: type)
        }
    }

    private static func device(_ row: PrefixedRow) throws -> Device {
        func setting(_ column: String) throws -> PushSetting {
            PushSetting(rawValue: try row.decode(column: column, as: String.self)) ?? .enabled
        }
        return Device(
            id: try row.decode(column: "id", as: UUID.self),
            userID: try row.decode(column: "user_id", as: UUID.self),
            platform: DevicePlatform(rawValue: try row.decode(column: "platform", as: String.self)) ?? .apns,
            address: try row.decode(column: "address", as: String.self),
            environment: try row.decode(column: "environment", as: String?.self).flatMap(APNsEnvironment.init),
            topic: try row.decode(column: "topic", as: String?.self),
            p256dh: try row.decode(column: "p256dh", as: String?.self),
            authSecret: try row.decode(column: "auth_secret", as: String?.self),
            authorization: PushAuthorization(rawValue: try row.decode(column: "authorization", as: String.self))
                ?? .notDetermined,
            settings: PushSettings(
                alert: try setting("alert_setting"), sound: try setting("sound_setting"),
                badge: try setting("badge_setting"),
                notificationCenter: try row.decode(column: "notification_center_setting", as: String?.self)
                    .flatMap(PushSetting.init(rawValue:)) ?? .enabled),
            locale: try row.decode(column: "locale", as: String?.self),
            appVersion: try row.decode(column: "app_version", as: String?.self),
            userAgent: try row.decode(column: "user_agent", as: String?.self),
            createdAt: try row.decode(column: "created_at", as: Date.self),
            updatedAt: try row.decode(column: "updated_at", as: Date.self),
            retiredAt: try row.decode(column: "retired_at", as: Date?.self),
            retiredReason: try row.decode(column: "retired_reason", as: String?.self),
            app: try row.decode(column: "app", as: String?.self))
    }
}

extension DevicePlatform {
    /// The kind of channel that delivers to devices of this platform.
    var channelKind: ChannelKind {
        switch self {
        case .apns: .apns
        case .fcm: .fcm
        case .webPush: .webPush
        }
    }
}
