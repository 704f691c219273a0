import Fluent
import Foundation

/// Secrets Belfry makes for itself when the operator gives none, kept in the database so
/// that restarts and every instance sharing a PostgreSQL database use the same ones.
enum ServerSecrets {
    static let developmentKeyDigest = "development_api_key_sha256"
    static let tokenSecret = "user_token_secret"
    static let vapidPrivateKey = "vapid_private_key_pem"

    /// The stored secret `name`, or a new one from `make` if there is none yet.
    /// - Returns: the value, and whether this call created it.
    static func value(
        named name: String, on db: any Database, now: Date, make: () -> String
    ) async throws -> (value: String, created: Bool) {
        if let existing = try await find(name, on: db) { return (existing, false) }
        let value = make()
        do {
            try await ServerSecretModel(name: name, value: value, now: now).create(on: db)
            return (value, true)
        } catch  where error.isConstraintFailure {
            // Another instance created it first: use theirs.
            guard let existing = try await find(name, on: db) else { throw error }
            return (existing, false)
        }
    }

    /// The stored secret `name`, if there is one.
    static func find(_ name: String, on db: any Database) async throws -> String? {
        try await ServerSecretModel.query(on: db).filter(\.$name == name).first()?.value
    }
}
