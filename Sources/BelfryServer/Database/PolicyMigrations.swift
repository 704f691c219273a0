import Fluent
import SQLKit

/// Delivery policies: the condition of a delayed channel on its delivery (`read` or `seen`),
/// and the throttle's record per user and category. Also a device's Notification Center
/// setting (absent for devices registered before: taken as on).
struct AddDeliveryPolicies: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.schema("deliveries").field("condition", .string).update()
        try await database.schema("devices").field("notification_center_setting", .string).update()
        try await database.schema("throttle_state")
            .field("user_id", .uuid, .required, .references(UserModel.schema, .id, onDelete: .cascade))
            .field("category", .string, .required)
            // The times (seconds since 1970) of the notifications let through in the window, as JSON.
            .field("times", .string, .required)
            .unique(on: "user_id", "category")
            .create()
    }

    func revert(on database: any Database) async throws {
        try await database.schema("throttle_state").delete()
        try await database.schema("deliveries").deleteField("condition").update()
        try await database.schema("devices").deleteField("notification_center_setting").update()
    }
}

/// Batches (digests): the open and closed batches, the first events of each, a batch's
/// notification's `batch` JSON, and the per-event count of recipients batched.
struct AddBatches: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.schema("batches")
            .id()
            .field("user_id", .uuid, .required, .references(UserModel.schema, .id, onDelete: .cascade))
            .field("category", .string, .required)
            .field("tenant", .string, .required)
            .field("batch_key", .string, .required)
            // "user|category|tenant|key" while open, NULL once closed: events add to the one open
            // batch with an upsert on it, atomically on both databases.
            .field("open_key", .string)
            .field("first_event_id", .uuid, .required, .references("events", .id, onDelete: .cascade))
            .field("count", .int, .required)
            .field("opened_at", .datetime, .required)
            .field("closes_at", .datetime, .required)
            .field("closed_at", .datetime)
            .field("notification_id", .uuid)
            .unique(on: "open_key")
            .create()
        try await database.sql.raw("CREATE INDEX batches_due ON batches (closes_at) WHERE open_key IS NOT NULL").run()
        try await database.schema("batch_items")
            .field("batch_id", .uuid, .required, .references("batches", .id, onDelete: .cascade))
            .field("position", .int, .required)
            .field("event_id", .uuid, .required)
            .field("title", .string, .required)
            .field("body", .string, .required)
            .field("url", .string)
            .field("data", .string)
            .field("created_at", .datetime, .required)
            .compositeIdentifier(over: "batch_id", "position")
            .create()
        try await database.schema("notifications").field("batch", .string).update()
        try await database.schema("events").field("batched", .int, .required, .sql(.default(0))).update()
    }

    func revert(on database: any Database) async throws {
        try await database.schema("events").deleteField("batched").update()
        try await database.schema("notifications").deleteField("batch").update()
        try await database.schema("batch_items").delete()
        try await database.schema("batches").delete()
    }
}
