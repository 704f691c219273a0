import BelfryCore
import Foundation

/// An error a client is told about: a stable code, a message naming what was wrong, and what
/// the answer needs beside them (the current version of what a writer must read again, when to
/// retry). Stores and services throw it without knowing HTTP; the HTTP edge
/// (``BelfryErrorMiddleware``, through ``ErrorAnswer``) and the CLI each turn it into their
/// answer, once.
public struct BelfryError: Error, Sendable, CustomStringConvertible {
    /// What the answer carries beside the code and the message.
    enum Detail: Sendable {
        /// The version the writer's precondition did not match (an ETag).
        case current(version: String)
        /// When to try again, in seconds.
        case retryAfter(seconds: Int)
        /// How to authenticate (a bearer token, and what was wrong with the one given).
        case challenge(String)
        /// The methods the path takes.
        case allowed([String])
        /// When to try again, and the rate limit's own fields (its policy and what is left).
        case rateLimited(retryAfter: Int, fields: [(name: String, value: String)])
    }

    let code: ErrorCode
    public var message: String
    var detail: Detail?

    init(_ code: ErrorCode, _ message: String, _ detail: Detail? = nil) {
        self.code = code
        self.message = message
        self.detail = detail
    }

    public var description: String { "\(code.rawValue): \(message)" }

    static func badRequest(_ message: String) -> Self { .init(.badRequest, message) }
    static func invalid(_ message: String) -> Self { .init(.invalidRequest, message) }
}

extension BelfryError {
    init(_ error: PreferenceChangeError) {
        self.init(error.code, error.message)
    }
}
