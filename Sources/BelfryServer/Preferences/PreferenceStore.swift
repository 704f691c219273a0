import BelfryCore
import Fluent
import Foundation
import SQLKit

/// A user's stored selections at one scope. Version 0 means nothing is stored yet.
struct StoredSelections: Sendable, Hashable {
    var version: Int
    var selections: PreferenceSelections

    static let empty = StoredSelections(version: 0, selections: PreferenceSelections())
}

/// What a client sees of one scope: the resolved preferences and their version.
struct PreferenceView: Sendable {
    var scope: PreferenceScope
    var resolved: ResolvedPreferences
    var etag: String

    var data: PreferenceData { PreferenceData(resolved) }
}

/// Reads and writes preference sets. A write locks the rows it depends on (the scopes it
/// changes and the user's defaults, which every tenant's view includes) in one fixed order,
/// checks the versions the caller read, applies the changes and bumps each version, all in
/// one transaction: concurrent writers queue instead of overwriting each other, and a change
/// to several scopes lands whole or not at all.
struct PreferenceStore: Sendable {
    let storage: BelfryDatabase
    let workspace: WorkspaceConfig
    /// A short digest of the workspace, part of every ETag, so a config change shows as a new version.
    let workspaceFingerprint: String
    let now: @Sendable () -> Date
    /// Reports each change to the workspace's `webhooks`, in the change's transaction.
    let statusEvents: StatusEvents
    /// One write per user at a time in this process, on PostgreSQL: a user's burst of changes
    /// queues here rather than on the row lock, holding one pooled connection, not all of them.
    let writers = KeyedTurns<UUID>()

    func view(userID: UUID, scope: PreferenceScope, on db: any Database) async throws -> PreferenceView {
        let stored = try await load(userID: userID, scopes: [scope, .userDefaults], on: db)
        return view(scope, stored)
    }

    /// Applies `changes` to every scope in `scopes`, all or nothing.
    ///
    /// - Parameter expected: ETags the caller read; if any scope has moved on, nothing is written (412).
    func change(
        userID: UUID,
        scopes: [PreferenceScope],
        changes: [PreferenceChange],
        expected: [PreferenceScope: String],
        also: [StatusEvent] = [],
        on db: any Database
    ) async throws -> [PreferenceView] {
        // Refuse bad changes before touching the database, with the same rules the write applies.
        var probe = PreferenceSelections()
        for change in changes {
            do { try probe.apply(change, in: workspace) } catch { throw BelfryError(error) }
        }
        let write = {
            try await storage.write(db) { tx in
                let views = try await self.applyLocked(
                    userID: userID, scopes: scopes, changes: changes, expected: expected, on: tx)
                try await self.statusEvents.queue(also.filter { self.statusEvents.wants($0.type) }, on: tx)
                return views
            }
        }
        // SQLite's writes already queue, without a connection, in the database's write gate.
        return storage.kind == .postgres ? try await writers.run(userID, write) : try await write()
    }

    private func applyLocked(
        userID: UUID,
        scopes: [PreferenceScope],
        changes: [PreferenceChange],
        expected: [PreferenceScope: String],
        on db: any Database
    ) async throws -> [PreferenceView] {
        // One order for every writer, so two requests never wait on each other's rows in a cycle.
        let locked = Set(scopes + [.userDefaults]).sorted { $0.key < $1.key }
        var stored = try await lockRows(userID: userID, scopes: locked, on: db)
        for (scope, header) in expected where !Self.matches(header, current: etag(scope, stored)) {
            let current = etag(scope, stored)
            throw BelfryError(
                .preconditionFailed,
                "the preferences for \(scope) have changed since you read them (current ETag \(current)); read them again and retry",
                .current(version: current))
        }
        let now = now()
        for scope in locked where scopes.contains(scope) {
            let old = stored[scope] ?? .empty
            var selections = old.selections
            for change in changes {
                do { try selections.apply(change, in: workspace) } catch { throw BelfryError(error) }
            }
            let updated = try await db.sql.update(PreferenceSetModel.schema)
                .set("selections", to: try Self.encode(selections))
                .set("version", to: old.version + 1)
                .set("updated_at", to: now)
                .where("user_id", .equal, userID)
                .where("scope", .equal, scope.key)
                .where("version", .equal, old.version)
                .returning("version")
                .all()
            // The row is locked by this transaction, so its version cannot have moved.
            guard updated.count == 1 else {
                throw BelfryError(.internalError, "a locked preference row changed underneath a write")
            }
            stored[scope] = StoredSelections(version: old.version + 1, selections: selections)
        }
        let views = scopes.map { view($0, stored) }
        if statusEvents.wants(.preferencesUpdated) {
            try await queueStatus(userID: userID, views: views, changes: changes, on: db)
        }
        return views
    }

    /// `preferences.updated` for each scope written: the user, the tenant (`null`: the user's
    /// defaults), the changes as the API took them, and the new ETag.
    private func queueStatus(
        userID: UUID, views: [PreferenceView], changes: [PreferenceChange], on db: any Database
    ) async throws {
        let user = try await StatusEvents.externalID(of: userID, on: db)
        let changed = try JSONDecoder().decode(JSONValue.self, from: try JSONEncoder().encode(changes))
        let events = views.map { view in
            let tenant: JSONValue =
                switch view.scope {
                case .userDefaults: .null
                case .tenant(let id): .string(id)
                }
            return StatusEvent(
                type: .preferencesUpdated,
                data: [
                    "user": user.map(JSONValue.string) ?? .null, "tenant": tenant, "changes": changed,
                    "etag": .string(view.etag),
                ])
        }
        try await statusEvents.queue(events, on: db)
    }

    /// Creates missing rows (version 0, nothing chosen) and locks all of them for this transaction.
    private func lockRows(
        userID: UUID, scopes: [PreferenceScope], on db: any Database
    ) async throws
        -> [PreferenceScope: StoredSelections]
    {
        let empty = try Self.encode(PreferenceSelections())
        let now = now()
        let insert = db.sql.insert(into: PreferenceSetModel.schema)
            .columns("id", "user_id", "scope", "version", "selections", "updated_at")
        for scope in scopes {
            insert.values(UUID(), userID, scope.key, 0, empty, now)
        }
        try await insert.ignoringConflicts(with: ["user_id", "scope"]).run()
        // SQLite has no row locks and ignores FOR UPDATE: there the write already holds the database's write lock.
        let rows = try await db.sql.select()
            .columns("scope", "version", "selections")
            .from(PreferenceSetModel.schema)
            .where("user_id", .equal, userID)
            .where("scope", .in, scopes.map(\.key))
            .orderBy("scope")
            .for(.update)
            .all()
        var stored: [PreferenceScope: StoredSelections] = [:]
        for row in rows {
            let key = try row.decode(column: "scope", as: String.self)
            guard let scope = scopes.first(where: { $0.key == key }) else { continue }
            stored[scope] = StoredSelections(
                version: try row.decode(column: "version", as: Int.self),
                selections: try Self.decode(try row.decode(column: "selections", as: String.self)))
        }
        return stored
    }

    static func encode(_ selections: PreferenceSelections) throws -> String {
        String(decoding: try JSONEncoder().encode(selections), as: UTF8.self)
    }

    static func decode(_ json: String) throws -> PreferenceSelections {
        try JSONDecoder().decode(PreferenceSelections.self, from: Data(json.utf8))
    }

    func load(
        userID: UUID, scopes: [PreferenceScope], on db: any Database
    ) async throws
        -> [PreferenceScope: StoredSelections]
    {
        let byKey = Dictionary(scopes.map { ($0.key, $0) }, uniquingKeysWith: { first, _ in first })
        let rows = try await PreferenceSetModel.query(on: db)
            .filter(\.$user.$id == userID)
            .filter(\.$scope ~~ Array(byKey.keys))
            .all()
        var stored: [PreferenceScope: StoredSelections] = [:]
        for row in rows {
            guard let scope = byKey[row.scope] else { continue }
            let selections = try Self.decode(row.selections)
            stored[scope] = StoredSelections(version: row.version, selections: selections)
        }
        return stored
    }

    private func view(_ scope: PreferenceScope, _ stored: [PreferenceScope: StoredSelections]) -> PreferenceView {
        let defaults = stored[.userDefaults] ?? .empty
        let resolved: ResolvedPreferences
        switch scope {
        case .userDefaults:
            resolved = ResolvedPreferences(config: workspace, userDefaults: defaults.selections)
        case .tenant:
            resolved = ResolvedPreferences(
                config: workspace, userDefaults: defaults.selections,
                tenant: (stored[scope] ?? .empty).selections)
        }
        return PreferenceView(scope: scope, resolved: resolved, etag: etag(scope, stored))
    }

    /// A scope's version: the workspace, the user's defaults and, for a tenant, the tenant's own
    /// selections all shape what the client sees, so a change to any of them is a new ETag.
    private func etag(_ scope: PreferenceScope, _ stored: [PreferenceScope: StoredSelections]) -> String {
        let defaults = (stored[.userDefaults] ?? .empty).version
        switch scope {
        case .userDefaults:
            return "\"\(workspaceFingerprint)-d\(defaults)\""
        case .tenant:
            return "\"\(workspaceFingerprint)-d\(defaults)-t\((stored[scope] ?? .empty).version)\""
        }
    }

    /// Whether an `If-Match` value (one or more ETags, or `*`) matches the current ETag.
    static func matches(_ header: String, current: String) -> Bool {
        let candidates = header.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        return candidates.contains { candidate in
            candidate == "*" || candidate == current || candidate == "W/\(current)"
        }
    }
}
