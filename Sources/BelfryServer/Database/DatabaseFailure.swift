import AsyncKit
import Foundation
import NIOCore
import PostgresNIO
import SQLiteNIO

/// Errors that say the database cannot be used right now, as opposed to a statement it refused:
/// PostgreSQL stopped or unreachable (a refused or lost connection, a server shutting down or
/// starting, no pooled connection in time, a query lost with its connection), or a SQLite file
/// that cannot be written (disk full, read-only, I/O error). The API answers them 503 with
/// `Retry-After`: nothing was acknowledged, and the client sends again.
enum DatabaseFailure {
    /// Seconds a client is asked to wait before it sends again.
    static let retryAfterSeconds = 2

    /// The answer for `error`, if it is such a failure.
    static func answer(for error: any Error) -> BelfryError? {
        if isStorageFull(error) {
            return BelfryError(
                .storageUnavailable,
                "the server cannot write to its database (the disk is full or read-only); nothing was saved, "
                    + "send the request again later", .retryAfter(seconds: retryAfterSeconds * 5))
        }
        guard isUnavailable(error) else { return nil }
        return BelfryError(
            .databaseUnavailable,
            "the database is not answering and the request was not completed; send it again shortly "
                + "(an event with the same Idempotency-Key, so that it is stored once)",
            .retryAfter(seconds: retryAfterSeconds))
    }

    /// PostgreSQL, or the way to it, is not answering.
    static func isUnavailable(_ error: any Error) -> Bool {
        switch error {
        case let error as PSQLError:
            switch error.code {
            case .connectionError, .serverClosedConnection, .clientClosedConnection, .uncleanShutdown, .poolClosed:
                return true
            case .server:
                // Class 08: connection exceptions; 57P01-57P03: the server shutting down, crashed,
                // or not yet accepting connections; 53300: no connection slot left.
                let state = error.serverInfo?[.sqlState] ?? ""
                return state.hasPrefix("08") || state.hasPrefix("57P") || state == "53300"
            default:
                return false
            }
        case is ConnectionPoolTimeoutError, is ConnectionPoolError, is DeadlineExceeded, is ChannelError,
            is NIOConnectionError:
            return true
        case let error as IOError:
            return [ECONNREFUSED, ECONNRESET, EPIPE, ETIMEDOUT, EHOSTUNREACH, ENETUNREACH].contains(error.errnoCode)
        default:
            return false
        }
    }

    /// The SQLite file cannot take writes now.
    static func isStorageFull(_ error: any Error) -> Bool {
        guard let error = error as? SQLiteError else { return false }
        switch error.reason {
        case .full, .readOnly, .ioError, .cantOpen, .ioErrorFailedWrite, .ioErrorFailedSync, .ioErrorFailedTruncate,
            .readonlyDirectory, .readonlyCantLock:
            return true
        default:
            return false
        }
    }
}
