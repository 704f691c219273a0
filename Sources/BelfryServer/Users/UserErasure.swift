import BelfryCore
import Fluent
import Foundation
import SQLKit

/// Erasing a user: the user and everything stored about them, in one transaction. The users
/// API (`DELETE /v1/users/{id}`) and `belfry users delete` both call it.
enum UserErasure {
    /// - Throws: `userNotFound` when there is no such user.
    static func erase(_ externalID: String, storage: BelfryDatabase, on db: any Database) async throws {
        try await storage.write(db) { db in
            let user = try await UserModel.find(externalID: externalID, on: db)
            let userID = try user.requireID()
            // Deleted explicitly as well as by the foreign keys' cascade, so erasure
            // does not depend on the database enforcing them.
            let sql = db.sql
            try await storage.deleteDeliveries(where: "user_id = \(bind: userID)", on: sql)
            try await sql.raw(
                """
                DELETE FROM notification_actions \
                WHERE notification_id IN (SELECT id FROM notifications WHERE user_id = \(bind: userID))
                """
            ).run()
            try await sql.delete(from: Tables.notifications).where("user_id", .equal, userID).run()
            try await sql.delete(from: Tables.devices).where("user_id", .equal, userID).run()
            // Status events about them, sent or still queued: they name the user and what they did.
            try await sql.delete(from: Tables.statusEvents).where("user_external_id", .equal, externalID).run()
            try await StatusEventReports.erase(user: externalID, on: sql)
            try await sql.delete(from: Tables.topicSubscriptions).where("user_id", .equal, userID).run()
            try await sql.delete(from: Tables.throttleState).where("user_id", .equal, userID).run()
            try await sql.raw(
                "DELETE FROM batch_items WHERE batch_id IN (SELECT id FROM batches WHERE user_id = \(bind: userID))"
            ).run()
            try await sql.delete(from: Tables.batches).where("user_id", .equal, userID).run()
            try await PreferenceSetModel.query(on: db).filter(\.$user.$id == userID).delete()
            try await UserTenantModel.query(on: db).filter(\.$user.$id == userID).delete()
            // An event for this user alone says what it said to them: its content goes too (the
            // event stays, counted, for its statuses). Shared events keep theirs.
            try await sql.raw(
                """
                UPDATE events SET title = '', body = '', url = NULL, image_url = NULL, data = NULL \
                WHERE recipients = 1 AND id IN \
                (SELECT event_id FROM event_recipients WHERE external_id = \(bind: externalID))
                """
            ).run()
            // A topic event part-way through its subscribers remembers the last one done: the
            // subscriber before this user serves as well, and keeps no trace of the user's id.
            try await sql.raw(
                """
                UPDATE events SET topic_cursor = COALESCE(\
                (SELECT s.user_id FROM topic_subscriptions s \
                WHERE s.topic = events.topic AND s.user_id < \(bind: userID) ORDER BY s.user_id DESC LIMIT 1), \
                \(bind: Fanout.beforeEveryUser)) \
                WHERE topic_cursor = \(bind: userID)
                """
            ).run()
            // Events not yet fanned out would otherwise create the user again; fanned-out ones
            // need their recipient lists no more.
            try await sql.delete(from: Tables.eventRecipients).where("external_id", .equal, externalID).run()
            try await sql.delete(from: Tables.eventExclusions).where("external_id", .equal, externalID).run()
            try await user.delete(on: db)
            // A fan-out writing for the user holds them (`NotificationRows.holdUsers`): the
            // delete above waited for it to commit, and this sees what it wrote. (SQLite has one
            // writer at a time; on PostgreSQL no foreign key takes those notifications along.)
            if storage.kind == .postgres {
                try await sql.delete(from: Tables.notifications).where("user_id", .equal, userID).run()
            }
        }
    }
}
