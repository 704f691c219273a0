import Fluent
import SQLKit

/// Topics: who follows what (`topic_subscriptions`), an event's topic and how far its fan-out
/// has read the subscribers (`events.topic`, `events.topic_cursor`), and the users an event
/// leaves out (`event_exclusions`).
struct CreateTopics: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.schema("topic_subscriptions")
            .field("topic", .string, .required)
            .field("user_id", .uuid, .required, .references(UserModel.schema, .id, onDelete: .cascade))
            .field("created_at", .datetime, .required)
            .unique(on: "topic", "user_id")
            .create()
        // The unique constraint's index serves a topic's pages (topic, then user id); this one
        // serves a user's own list and erasure.
        try await database.sql.raw("CREATE INDEX topic_subscriptions_user ON topic_subscriptions (user_id)").run()
        try await database.schema("events").field("topic", .string).update()
        try await database.schema("events").field("topic_cursor", .uuid).update()
        try await database.schema("event_exclusions")
            .field("event_id", .uuid, .required, .references("events", .id, onDelete: .cascade))
            .field("external_id", .string, .required)
            .unique(on: "event_id", "external_id")
            .create()
    }

    func revert(on database: any Database) async throws {
        try await database.schema("event_exclusions").delete()
        try await database.schema("events").deleteField("topic_cursor").update()
        try await database.schema("events").deleteField("topic").update()
        try await database.schema("topic_subscriptions").delete()
    }
}
