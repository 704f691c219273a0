import Fluent
import SQLKit

/// The revocation epochs of credentials that live in signed cookies rather than in the
/// database (a console session names its API key's fingerprint): a session is good while it
/// carries its credential's current epoch, and signing out raises it.
enum CredentialEpochs {
    static let schema = "credential_epochs"

    /// The console sessions of the API key with `fingerprint`.
    static func console(_ fingerprint: String) -> String { "console:\(fingerprint)" }

    static func current(_ credential: String, on db: any Database) async throws -> Int {
        let row = try await db.sql.raw(
            "SELECT epoch FROM credential_epochs WHERE credential = \(bind: credential)"
        ).first()
        return try row?.decode(column: "epoch", as: Int.self) ?? 0
    }

    /// Ends every session of `credential` carrying the epoch before.
    @discardableResult
    static func raise(_ credential: String, on db: any Database) async throws -> Int {
        let row = try await db.sql.raw(
            """
            INSERT INTO credential_epochs (credential, epoch) VALUES (\(bind: credential), 1)
            ON CONFLICT (credential) DO UPDATE SET epoch = credential_epochs.epoch + 1
            RETURNING epoch
            """
        ).first()
        return try row?.decode(column: "epoch", as: Int.self) ?? 1
    }
}
