import Fluent
import Foundation
import NIOConcurrencyHelpers
import SQLKit

/// What an API key may do: `admin` everything; `publish` send events and manage topics'
/// subscribers; `read` read events' statuses and topics.
enum KeyScope: String, CaseIterable, Codable, Sendable {
    case admin, publish, read

    func permits(_ needed: KeyScope) -> Bool { self == .admin || self == needed }
}

/// An accepted API key: its name (for logs and the audit log), its scope and fingerprint.
struct KeyGrant: Sendable, Hashable {
    var name: String
    var scope: KeyScope
    var fingerprint: String

    /// A key of `BELFRY_API_KEY`: the bootstrap admin keys.
    static func environment(fingerprint: String) -> KeyGrant {
        KeyGrant(name: "environment", scope: .admin, fingerprint: fingerprint)
    }

    /// How the audit log names who used it.
    var actor: String { "key:\(name)" }
}

/// A stored key as `belfry keys list` and the console show it: never the key itself.
struct KeyRecord: Codable, Sendable, Hashable {
    var name: String
    var scope: KeyScope
    var fingerprint: String
    var createdAt: Date
    var lastUsedAt: Date?
    var revokedAt: Date?
}

/// API keys created at run time (`belfry keys create`), kept as SHA-256 digests in the database
/// so that every instance knows them. Each instance remembers a key's answer for `recheck`
/// seconds: a revoked key stops working everywhere within that, without a query per request.
/// `last_used_at` is written at most once a minute per key and instance.
final class KeyStore: Sendable {
    static let recheck: TimeInterval = 2
    static let usageInterval: TimeInterval = 60
    /// Generated keys start so; environment keys may be anything, and are checked first.
    static let prefix = "belfry_"
    /// Answers remembered at most: random wrong keys cannot grow the memory without bound.
    private static let remembered = 10_000
    static let nameRule = "1 to 64 letters, digits or any of _ . -"

    private struct Answer {
        var grant: KeyGrant?
        var checkedAt: Date
    }

    private let storage: BelfryDatabase
    private let now: @Sendable () -> Date
    private let answers = NIOLockedValueBox<[String: Answer]>([:])
    private let usageWritten = NIOLockedValueBox<[String: Date]>([:])

    init(storage: BelfryDatabase, now: @escaping @Sendable () -> Date) {
        self.storage = storage
        self.now = now
    }

    static func isValidName(_ name: String) -> Bool {
        (1...64).contains(name.count)
            && name.unicodeScalars.allSatisfy {
                CharacterSet.alphanumerics.contains($0) && $0.isASCII || "_.-".unicodeScalars.contains($0)
            }
    }

    /// The grant of `key`, if it is an active stored key.
    func grant(for key: String, on db: any Database) async throws -> KeyGrant? {
        guard key.hasPrefix(Self.prefix) else { return nil }
        let digest = APIKeys.digest(key).hexEncoded
        let time = now()
        if let answer = answers.withLockedValue({ $0[digest] }), time.timeIntervalSince(answer.checkedAt) < Self.recheck
        {
            return answer.grant
        }
        let row = try await db.sql.select().columns("name", "scope", "fingerprint").from(Tables.apiKeys)
            .where("digest", .equal, digest).where("revoked_at", .is, SQLLiteral.null).first()
        let grant = try row.flatMap { row -> KeyGrant? in
            guard let scope = KeyScope(rawValue: try row.decode(column: "scope", as: String.self)) else { return nil }
            return KeyGrant(
                name: try row.decode(column: "name", as: String.self), scope: scope,
                fingerprint: try row.decode(column: "fingerprint", as: String.self))
        }
        answers.withLockedValue { answers in
            if answers.count >= Self.remembered { answers.removeAll(keepingCapacity: true) }
            answers[digest] = Answer(grant: grant, checkedAt: time)
        }
        if grant != nil { try await noteUse(digest: digest, at: time, on: db) }
        return grant
    }

    private func noteUse(digest: String, at time: Date, on db: any Database) async throws {
        let due = usageWritten.withLockedValue { written in
            guard time.timeIntervalSince(written[digest] ?? .distantPast) >= Self.usageInterval else { return false }
            written[digest] = time
            return true
        }
        guard due else { return }
        try await storage.write(db) { tx in
            try await tx.sql.update(Tables.apiKeys).set("last_used_at", to: time).where("digest", .equal, digest).run()
        }
    }

    /// Whether the stored key with this fingerprint is still active (a console session's key).
    func isActive(fingerprint: String, on db: any Database) async throws -> Bool {
        try await db.sql.select().column("name").from(Tables.apiKeys).where("fingerprint", .equal, fingerprint)
            .where("revoked_at", .is, SQLLiteral.null).first() != nil
    }

    /// A new key: returned once, stored as its digest.
    func create(name: String, scope: KeyScope, on db: any Database) async throws -> (key: String, record: KeyRecord) {
        guard Self.isValidName(name), name != "environment" else {
            throw BelfryError.invalid(
                "a key's name must be \(Self.nameRule) and not \"environment\", got \"\(name.prefix(80))\"")
        }
        let key = APIKeys.generate()
        let record = KeyRecord(name: name, scope: scope, fingerprint: APIKeys.fingerprint(key), createdAt: now())
        try await storage.write(db) { tx in
            if try await tx.sql.select().column("name").from(Tables.apiKeys).where("name", .equal, name).first() != nil
            {
                throw BelfryError.invalid("there is a key named \"\(name)\" already; revoke it or choose another name")
            }
            try await tx.sql.insert(into: Tables.apiKeys)
                .columns("id", "name", "scope", "digest", "fingerprint", "created_at")
                .values(
                    SQLBind(UUID()), SQLBind(name), SQLBind(scope.rawValue), SQLBind(APIKeys.digest(key).hexEncoded),
                    SQLBind(record.fingerprint), SQLBind(record.createdAt)
                )
                .run()
        }
        return (key, record)
    }

    /// Every stored key, active ones first, by name.
    func list(on db: any Database) async throws -> [KeyRecord] {
        try await db.sql.select()
            .columns("name", "scope", "fingerprint", "created_at", "last_used_at", "revoked_at").from(Tables.apiKeys)
            .orderBy("name").all()
            .map { row in
                KeyRecord(
                    name: try row.decode(column: "name", as: String.self),
                    scope: KeyScope(rawValue: try row.decode(column: "scope", as: String.self)) ?? .read,
                    fingerprint: try row.decode(column: "fingerprint", as: String.self),
                    createdAt: try row.decode(column: "created_at", as: Date.self),
                    lastUsedAt: try row.decode(column: "last_used_at", as: Date?.self),
                    revokedAt: try row.decode(column: "revoked_at", as: Date?.self))
            }
            .sorted { ($0.revokedAt == nil ? 0 : 1, $0.name) < ($1.revokedAt == nil ? 0 : 1, $1.name) }
    }

    /// Revokes the key named `name`: every instance refuses it within `recheck` seconds.
    /// - Returns: whether an active key had that name.
    func revoke(name: String, on db: any Database) async throws -> Bool {
        let time = now()
        let revoked = try await storage.write(db) { tx in
            try await tx.sql.raw(
                """
                UPDATE api_keys SET revoked_at = \(bind: time) WHERE name = \(bind: name) AND revoked_at IS NULL \
                RETURNING digest
                """
            ).all().map { try $0.decode(column: "digest", as: String.self) }
        }
        // This instance refuses it at once.
        answers.withLockedValue { answers in for digest in revoked { answers[digest] = nil } }
        return !revoked.isEmpty
    }
}
