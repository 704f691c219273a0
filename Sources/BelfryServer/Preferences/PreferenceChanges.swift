import BelfryCore
import Fluent
import Foundation

/// Preference changes, committed and then told to the user's open streams (their other
/// devices and windows). The JSON API and the preference center both change preferences
/// through it.
struct PreferenceChanges: Sendable {
    let store: PreferenceStore
    let events: InboxEvents

    /// Applies `changes` to every scope in one transaction (see `PreferenceStore.change`).
    /// - Parameter also: status events to queue with the change, in its transaction (the
    ///   one-click unsubscribe's `email.unsubscribed`).
    func change(
        userID: UUID, scopes: [PreferenceScope], changes: [PreferenceChange], expected: [PreferenceScope: String],
        also: [StatusEvent] = [], on db: any Database
    ) async throws -> [PreferenceView] {
        let views = try await store.change(
            userID: userID, scopes: scopes, changes: changes, expected: expected, also: also, on: db)
        for view in views {
            let tenant: String? = if case .tenant(let id) = view.scope { id } else { nil }
            await events.preferencesChanged(user: userID, tenant: tenant, etag: view.etag, on: db)
        }
        return views
    }
}
