import ArgumentParser
import BelfryCore
import Foundation
import Vapor

/// `belfry keys`: API keys with scopes, kept in the database as digests. The keys of
/// `BELFRY_API_KEY` stay the bootstrap admin keys beside them.
struct KeysCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keys", abstract: "Create, list and revoke API keys with scopes.",
        subcommands: [Create.self, List.self, Revoke.self], defaultSubcommand: List.self)

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a key and print it, this once: admin (everything), publish (send events, manage "
                + "topic subscribers) or read (event statuses, topics).")

        @ArgumentParser.Argument(help: "The key's name: \(KeyStore.nameRule).")
        var name: String

        @ArgumentParser.Option(help: "admin, publish or read.")
        var scope: String

        @OptionGroup var storage: StorageOptions

        func validate() throws {
            guard KeyScope(rawValue: scope) != nil else {
                throw ValidationError("--scope must be admin, publish or read, got \"\(scope)\"")
            }
            guard KeyStore.isValidName(name) else {
                throw ValidationError("the name must be \(KeyStore.nameRule), got \"\(name)\"")
            }
        }

        func run() async throws {
            let (name, scope) = (name, KeyScope(rawValue: scope) ?? .read)
            let created = try await withKeys(storage) { belfry in
                let created = try await belfry.context.keyStore.create(name: name, scope: scope, on: belfry.db)
                try await belfry.services.auditLog.record(
                    .keyCreated, by: "cli", subject: name,
                    detail: "scope \(scope.rawValue), fingerprint \(created.record.fingerprint)", on: belfry.db)
                return created
            }
            FileHandle.standardError.write(
                Data("Created the \(scope.rawValue) key \"\(name)\". It is shown only this once:\n".utf8))
            say(created.key)
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Keys one a line: name, scope, fingerprint, created, last used, revoked.")

        @OptionGroup var storage: StorageOptions
        @OptionGroup var output: ListOutput

        func run() async throws {
            let keys = try await withKeys(storage) { belfry in try await belfry.context.keyStore.list(on: belfry.db) }
            output.say(
                keys.map { key in
                    [
                        key.name, key.scope.rawValue, key.fingerprint, key.createdAt.ISO8601Format(),
                        key.lastUsedAt.map { "used \($0.ISO8601Format())" } ?? "never used",
                        key.revokedAt.map { "revoked \($0.ISO8601Format())" } ?? "active",
                    ]
                }, columns: ["name", "scope", "fingerprint", "created_at", "last_used", "state"],
                empty: "no keys (the \(ServerSetting.apiKeys.environment) keys are not listed)")
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Revoke a key: every instance refuses it within seconds, and its console sessions end.")

        @ArgumentParser.Argument(help: "The key's name.")
        var name: String

        @OptionGroup var storage: StorageOptions

        func run() async throws {
            let name = name
            let revoked = try await withKeys(storage) { belfry in
                let revoked = try await belfry.context.keyStore.revoke(name: name, on: belfry.db)
                if revoked {
                    try await belfry.services.auditLog.record(.keyRevoked, by: "cli", subject: name, on: belfry.db)
                }
                return revoked
            }
            guard revoked else { throw CommandFailure("there is no active key named \"\(name)\"") }
            say("revoked \(name)")
        }
    }
}

/// `belfry audit`: the audit log, newest first.
struct AuditCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "audit",
        abstract: "The audit log, newest first: time, actor, action, subject, detail.")

    @ArgumentParser.Option(help: "How many (1 to 10000).")
    var limit = 100

    @OptionGroup var storage: StorageOptions
    @OptionGroup var output: ListOutput

    func validate() throws {
        guard (1...10_000).contains(limit) else { throw ValidationError("--limit must be from 1 to 10000") }
    }

    func run() async throws {
        let limit = limit
        let page = try await withKeys(storage) { belfry in
            try await belfry.services.auditLog.entries(limit: limit, before: nil, on: belfry.db)
        }
        output.say(
            page.entries.map { entry in
                [entry.at.ISO8601Format(), entry.actor, entry.action, entry.subject ?? "-", entry.detail ?? ""]
            }, columns: ["at", "actor", "action", "subject", "detail"], empty: "no entries")
    }
}

/// Runs `body` on the configured database, a refused name reported as a usage error.
private func withKeys<T>(
    _ storage: StorageOptions, _ body: @escaping (CommandScope) async throws -> T
) async throws -> T {
    try await withStorage(storage, failures: [.invalidRequest], body)
}
