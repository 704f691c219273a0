import Fluent
import SQLKit

/// What the operator console's charts read: attempts by the time they finished, and the queue's
/// depth sampled once a minute.
struct AddConsoleHistory: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.sql.raw("CREATE INDEX delivery_attempts_finished ON delivery_attempts (finished_at)").run()
        try await database.schema("queue_samples")
            .field("minute", .int64, .identifier(auto: false))
            .field("depth", .int, .required)
            .create()
    }

    func revert(on database: any Database) async throws {
        try await database.schema("queue_samples").delete()
        try await database.sql.raw("DROP INDEX delivery_attempts_finished").run()
    }
}
