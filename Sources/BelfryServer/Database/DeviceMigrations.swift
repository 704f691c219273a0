import Fluent
import SQLKit

/// Push devices: APNs device tokens and browsers' Web Push subscriptions, one table for both.
/// `address` is what the push service knows the device by (the token, or the endpoint URL),
/// unique per platform so that registering it again updates the row.
struct CreateDevices: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.schema("devices")
            .id()
            .field("user_id", .uuid, .required, .references(UserModel.schema, .id, onDelete: .cascade))
            .field("platform", .string, .required)
            .field("address", .string, .required)
            .field("environment", .string)
            .field("topic", .string)
            .field("p256dh", .string)
            .field("auth_secret", .string)
            .field("authorization", .string, .required)
            .field("alert_setting", .string, .required)
            .field("sound_setting", .string, .required)
            .field("badge_setting", .string, .required)
            .field("locale", .string)
            .field("app_version", .string)
            .field("user_agent", .string)
            .field("created_at", .datetime, .required)
            .field("updated_at", .datetime, .required)
            .field("retired_at", .datetime)
            .field("retired_reason", .string)
            .unique(on: "platform", "address")
            .create()
        try await database.sql.raw("CREATE INDEX devices_user ON devices (user_id)").run()
    }

    func revert(on database: any Database) async throws {
        try await database.schema("devices").delete()
    }
}

/// An event's media (push notifications show it through a service extension) and how long
/// push services keep it undelivered, overriding the category's.
struct AddEventPushOptions: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.schema("events").field("image_url", .string).update()
        try await database.schema("events").field("ttl_seconds", .int).update()
    }

    func revert(on database: any Database) async throws {
        try await database.schema("events").deleteField("image_url").update()
        try await database.schema("events").deleteField("ttl_seconds").update()
    }
}

/// Devices of several apps per platform: the app a device registered with (`nil`: the
/// platform's one app from the server settings).
struct AddDeviceApps: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.schema("devices").field("app", .string).update()
    }

    func revert(on database: any Database) async throws {
        try await database.schema("devices").deleteField("app").update()
    }
}
