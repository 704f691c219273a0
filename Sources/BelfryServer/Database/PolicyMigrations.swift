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
