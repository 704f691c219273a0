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

/// Reads and writes preference sets. Every write is a compare-and-swap on the set's
/// version inside one transaction, so concurrent writers never overwrite each other
/// silently, and a change to several scopes lands whole or not at all.
struct PreferenceStore: Sendable {
    let context: BelfryContext

    /// How often a write without `If-Match` is retried when another writer got there first.
    private static let attempts = 8

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
        on db: any Database
    ) async throws -> [PreferenceView] {
        // Refuse bad changes before touching the database, with the same rules the write applies.
        var probe = PreferenceSelections()
        for change in changes {
            do { try probe.apply(change, in: context.workspace) } catch { throw BelfryError(error) }
        }
        for attempt in 1...Self.attempts {
            do {
                return try await context.database.write(db) { tx in
                    try await self.applyOnce(
                        userID: userID, scopes: scopes, changes: changes, expected: expected, on: tx)
                }
            } catch is VersionConflict {
                // Another writer committed between our read and our write. With an ETag the
                // caller asked us not to guess; without one, read again and re-apply their intent.
                if !expected.isEmpty || attempt == Self.attempts {
                    throw BelfryError(
                        .preconditionFailed, "version_conflict",
                        "the preferences were changed by another request at the same time; read them again and retry")
                }
            }
        }
        preconditionFailure("the retry loop always returns or throws")
    }

    private struct VersionConflict: Error {}

    private func applyOnce(
        userID: UUID,
        scopes: [PreferenceScope],
        changes: [PreferenceChange],
        expected: [PreferenceScope: String],
        on db: any Database
    ) async throws -> [PreferenceView] {
        var stored = try await load(userID: userID, scopes: scopes + [.userDefaults], on: db)
        for (scope, header) in expected where !Self.matches(header, current: etag(scope, stored)) {
            throw BelfryError(
                .preconditionFailed, "precondition_failed",
                "the preferences for \(scope) have changed since you read them (current ETag \(self.etag(scope, stored))); read them again and retry",
                headers: ["ETag": self.etag(scope, stored)])
        }
        let now = context.now()
        for scope in scopes {
            let old = stored[scope] ?? .empty
            var selections = old.selections
            for change in changes {
                do { try selections.apply(change, in: context.workspace) } catch { throw BelfryError(error) }
            }
            try await save(userID: userID, scope: scope, old: old, new: selections, now: now, on: db)
            stored[scope] = StoredSelections(version: old.version + 1, selections: selections)
        }
        return scopes.map { view($0, stored) }
    }

    private func save(
        userID: UUID, scope: PreferenceScope, old: StoredSelections, new: PreferenceSelections, now: Date,
        on db: any Database
    ) async throws {
        let json = String(decoding: try JSONEncoder().encode(new), as: UTF8.self)
        if old.version == 0 {
            let row = PreferenceSetModel()
            row.$user.id = userID
            row.scope = scope.key
            row.version = 1
            row.selections = json
            row.updatedAt = now
            do {
                try await row.create(on: db)
            } catch  where error.isConstraintFailure {
                throw VersionConflict()
            }
            return
        }
        let updated = try await db.sql.update(PreferenceSetModel.schema)
            .set("selections", to: json)
            .set("version", to: old.version + 1)
            .set("updated_at", to: now)
            .where("user_id", .equal, userID)
            .where("scope", .equal, scope.key)
            .where("version", .equal, old.version)
            .returning("version")
            .all()
        if updated.isEmpty { throw VersionConflict() }
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
            let selections = try JSONDecoder().decode(PreferenceSelections.self, from: Data(row.selections.utf8))
            stored[scope] = StoredSelections(version: row.version, selections: selections)
        }
        return stored
    }

    private func view(_ scope: PreferenceScope, _ stored: [PreferenceScope: StoredSelections]) -> PreferenceView {
        let defaults = stored[.userDefaults] ?? .empty
        let resolved: ResolvedPreferences
        switch scope {
        case .userDefaults:
            resolved = ResolvedPreferences(config: context.workspace, userDefaults: defaults.selections)
        case .tenant:
            resolved = ResolvedPreferences(
                config: context.workspace, userDefaults: defaults.selections,
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
            return "\"\(context.workspaceFingerprint)-d\(defaults)\""
        case .tenant:
            return "\"\(context.workspaceFingerprint)-d\(defaults)-t\((stored[scope] ?? .empty).version)\""
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
