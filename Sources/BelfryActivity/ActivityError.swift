import Foundation

/// An error from activity insights: a stable `code`, a message for people, and what caused it.
public struct ActivityError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A stable, machine-readable error code.
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        /// The code as written in logs and reports.
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// A store's database could not be opened or its schema could not be brought up to date.
        public static let storeUnavailable = Code(rawValue: "store_unavailable")
        /// Reading the saved-articles store failed.
        public static let readFailed = Code(rawValue: "read_failed")
        /// Writing the saved-articles store failed.
        public static let writeFailed = Code(rawValue: "write_failed")
        /// Reading the legacy store failed.
        public static let legacyReadFailed = Code(rawValue: "legacy_read_failed")
        /// Writing the legacy store failed.
        public static let legacyWriteFailed = Code(rawValue: "legacy_write_failed")
        /// A value was refused; the message names it.
        public static let invalidArgument = Code(rawValue: "invalid_argument")
    }

    /// What went wrong, for code to act on.
    public var code: Code
    /// What went wrong, for people.
    public var message: String
    /// What caused it, such as a `DatabaseError`.
    public var underlying: (any Error & Sendable)?

    /// Makes an error; the module's own are made for you.
    public init(code: Code, message: String, underlying: (any Error & Sendable)? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }

    public var description: String {
        underlying.map { "\(code): \(message) (\($0))" } ?? "\(code): \(message)"
    }

    /// Equal when code and message are; the underlying error is not compared.
    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.code == rhs.code && lhs.message == rhs.message
    }

    /// Wraps what a database call threw; an `ActivityError` passes through unchanged.
    static func wrapping(_ error: any Error, code: Code, _ message: String) -> ActivityError {
        if let error = error as? ActivityError { return error }
        return ActivityError(code: code, message: message, underlying: error)
    }
}
