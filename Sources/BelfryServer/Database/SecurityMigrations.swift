import Fluent
import SQLKit

/// Server-side revocation of signed sessions: a user's browser sessions and page tokens carry
/// the user's `session_epoch`, a console session the epoch of its API key; raising an epoch ends
/// every session that carries an older one, on every instance, at its next request.
struct AddSessionEpochs: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.schema(UserModel.schema)
            .field("session_epoch", .int, .required, .sql(.default(0)))
            .update()
        try await database.schema(CredentialEpochs.schema)
            .field("credential", .string, .identifier(auto: false))
            .field("epoch", .int, .required)
            .create()
    }

    func revert(on database: any Database) async throws {
        try await database.schema(CredentialEpochs.schema).delete()
        try await database.schema(UserModel.schema).deleteField("session_epoch").update()
    }
}

/// API keys created with `belfry keys create`, each with a scope, kept as SHA-256 digests; and
/// the audit log of what operators and keys did.
struct CreateAPIKeysAndAuditLog: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.schema("api_keys")
            .id()
            .field("name", .string, .required)
            .field("scope", .string, .required)
            .field("digest", .string, .required)
            .field("fingerprint", .string, .required)
            .field("created_at", .datetime, .required)
            .field("last_used_at", .datetime)
            .field("revoked_at", .datetime)
            .unique(on: "name")
            .unique(on: "digest")
            .create()
        try await database.schema("audit_log")
            .id()
            .field("at", .datetime, .required)
            .field("actor", .string, .required)
            .field("action", .string, .required)
            .field("subject", .string)
            .field("detail", .string)
            .create()
        try await database.sql.raw("CREATE INDEX audit_log_at ON audit_log (at)").run()
    }

    func revert(on database: any Database) async throws {
        try await database.schema("audit_log").delete()
        try await database.schema("api_keys").delete()
    }
}
