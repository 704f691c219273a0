import BelfryCore
import Fluent
import Foundation
import SQLKit

/// Topics: named audiences (the watchers of a page, the members of a project) that an event
/// can name instead of a list of recipients. A subscription is one row; fan-out reads a
/// topic's subscribers a page at a time.
struct TopicStore: Sendable {
    let storage: BelfryDatabase
    let now: @Sendable () -> Date
    /// Users per call of the server API.
    static let maxUsersPerCall = 10_000
    /// Rows per INSERT: well under SQLite's bound-parameter limit.
    static let insertBatch = 500

    /// Subscribes `externalIDs` to `topic`, creating users Belfry does not know yet; users
    /// already subscribed stay as they are.
    /// - Returns: how many subscriptions are new.
    @discardableResult
    func subscribe(_ externalIDs: [String], to topic: String, on db: any Database) async throws -> Int {
        let now = self.now()
        return try await storage.write(db) { tx in
            let ids = try await Self.ensureUsers(externalIDs, now: now, storage: storage, on: tx)
            let inserted = try await storage.insert(
                into: Tables.topicSubscriptions, columns: ["topic", "user_id", "created_at"],
                rows: ids.map { [.text(topic), .id($0), .date(now)] }, rowsPerStatement: Self.insertBatch,
                ignoringConflictsOn: ["topic", "user_id"], returning: ["user_id"], on: tx)
            return inserted.count
        }
    }

    /// Ends these users' subscriptions to `topic`; unknown users and non-subscribers are ignored.
    /// - Returns: how many subscriptions ended.
    @discardableResult
    func unsubscribe(_ externalIDs: [String], from topic: String, on db: any Database) async throws -> Int {
        try await storage.write(db) { tx in
            var removed = 0
            for chunk in externalIDs.chunked(Self.insertBatch) {
                removed += try await tx.sql.delete(from: Tables.topicSubscriptions)
                    .where("topic", .equal, topic)
                    .where(
                        "user_id", .in,
                        SQLSubquery.select {
                            $0.column("id").from(UserModel.schema).where("external_id", .in, Array(chunk))
                        }
                    )
                    .returning("user_id").all().count
            }
            return removed
        }
    }

    func subscribe(userID: UUID, to topic: String, on db: any Database) async throws {
        let now = self.now()
        try await storage.write(db) { tx in
            _ = try await storage.insert(
                into: Tables.topicSubscriptions, columns: ["topic", "user_id", "created_at"],
                rows: [[.text(topic), .id(userID), .date(now)]], rowsPerStatement: 1,
                ignoringConflictsOn: ["topic", "user_id"], returning: ["user_id"], on: tx)
        }
    }

    func unsubscribe(userID: UUID, from topic: String, on db: any Database) async throws {
        try await storage.write(db) { tx in
            try await tx.sql.delete(from: Tables.topicSubscriptions).where("topic", .equal, topic)
                .where("user_id", .equal, userID).run()
        }
    }

    func subscribers(of topic: String, on db: any Database) async throws -> Int {
        try await db.sql.select().column(SQLFunction("COUNT", args: SQLLiteral.all), as: "n")
            .from(Tables.topicSubscriptions).where("topic", .equal, topic).first()?.decode(column: "n", as: Int.self)
            ?? 0
    }

    func topics(of userID: UUID, on db: any Database) async throws -> [String] {
        try await db.sql.select().column("topic").from(Tables.topicSubscriptions).where("user_id", .equal, userID)
            .orderBy("topic").all().map { try $0.decode(column: "topic", as: String.self) }
    }

    /// Every topic with its number of subscribers, for the command line.
    func all(on db: any Database) async throws -> [TopicSummary] {
        try await db.sql.select().column("topic").column(SQLFunction("COUNT", args: SQLLiteral.all), as: "n")
            .from(Tables.topicSubscriptions).groupBy("topic").orderBy("topic").all()
            .map {
                TopicSummary(
                    topic: try $0.decode(column: "topic", as: String.self),
                    subscribers: try $0.decode(column: "n", as: Int.self))
            }
    }

    /// The internal ids of `externalIDs`, creating the users that do not exist yet.
    static func ensureUsers(
        _ externalIDs: [String], now: Date, storage: BelfryDatabase, on db: any Database
    ) async throws -> [UUID] {
        var randomness = IDRandomness()
        // Sorted, so that two writers creating the same users take their locks in the same order.
        let unique = Array(Set(externalIDs)).sorted()
        _ = try await storage.insert(
            into: UserModel.schema, columns: ["id", "external_id", "created_at", "updated_at"],
            rows: unique.map {
                [.id(UUID.timeOrdered(at: now, using: &randomness)), .text($0), .date(now), .date(now)]
            },
            rowsPerStatement: insertBatch, ignoringConflictsOn: ["external_id"], returning: ["id"], on: db)
        var ids: [UUID] = []
        for chunk in unique.chunked(insertBatch) {
            ids += try await db.sql.select().column("id").from(UserModel.schema).where("external_id", .in, Array(chunk))
                .all()
                .map { try $0.decode(column: "id", as: UUID.self) }
        }
        return ids
    }
}

/// The shape of a topic name: the same as a user id.
enum TopicName {
    static let rule = UserID.rule

    static func isValid(_ name: String) -> Bool { UserID.isValid(name) }
}
