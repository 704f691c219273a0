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
