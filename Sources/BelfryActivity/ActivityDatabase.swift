import Foundation
import GRDB

/// Opens the SQLite databases of this module.
enum ActivityDatabase {
    /// Opens the database at `path` (in memory when `nil`) and runs `migrator` on it.
    /// - Parameter name: the store, for the error message.
    /// - Throws: `ActivityError` with `.storeUnavailable`.
    static func open(path: String?, migrator: DatabaseMigrator, name: String) throws(ActivityError) -> DatabaseQueue {
        do {
            let dbQueue = try path.map { try DatabaseQueue(path: $0) } ?? DatabaseQueue()
            try migrator.migrate(dbQueue)
            return dbQueue
        } catch {
            throw .wrapping(
                error, code: .storeUnavailable, "Could not open the \(name) \(path.map { "at \($0)" } ?? "in memory").")
        }
    }
}
