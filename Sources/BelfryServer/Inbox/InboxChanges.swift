import BelfryCore
import Fluent
import Foundation

/// Changes to a user's inbox, each committed and then told to the open streams (this
/// instance's and, on PostgreSQL, the others'). The JSON API and the web pages both change the
/// inbox through it; fan-out publishes new notifications through `InboxEvents` after its batch.
struct InboxChanges: Sendable {
    let store: InboxStore
    let events: InboxEvents

    /// Marks one notification; `nil` when the user has no such notification.
    func mark(
        _ id: UUID, _ mark: InboxStore.Mark, userID: UUID, on db: any Database
    ) async throws
        -> InboxNotification?
    {
        guard let item = try await store.mark(id, mark, userID: userID, on: db) else { return nil }
        await events.updated(item, user: userID, on: db)
        return item
    }

    /// Records a custom action chosen on a notification (and queues it for the webhook).
    func respond(
        to id: UUID, action: String, userID: UUID, on db: any Database
    ) async throws -> InboxStore.ActionOutcome {
        let outcome = try await store.respond(to: id, action: action, userID: userID, on: db)
        if case .recorded(let item, _, _) = outcome { await events.updated(item, user: userID, on: db) }
        return outcome
    }

    /// Marks every matching notification; returns how many changed.
    func markAll(
        _ mark: InboxStore.Mark, userID: UUID, tenant: String?, category: String?, on db: any Database
    ) async throws -> Int {
        let updated = try await store.markAll(mark, userID: userID, tenant: tenant, category: category, on: db)
        await events.countsChanged(user: userID, on: db)
        return updated
    }
}
