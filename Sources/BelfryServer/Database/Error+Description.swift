import FluentPostgresDriver
import Foundation

extension Error {
    /// What went wrong, for an operator reading an event's status. PostgreSQL's errors describe
    /// themselves only generically (to keep bound values out of logs): this takes the server's
    /// own message and detail instead, which name the table or constraint, never the values.
    var operatorDescription: String {
        guard let error = self as? PSQLError, let info = error.serverInfo, let message = info[.message] else {
            return "\(self)"
        }
        let detail = info[.detail].map { " (\($0))" } ?? ""
        return "PostgreSQL: \(message)\(detail)"
    }
}
