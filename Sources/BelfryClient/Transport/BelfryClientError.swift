import Foundation

/// An error from the Belfry SDK: a stable `code`, a message for people, and what caused it.
///
/// Server errors keep the server's `{"error": {"code", "message"}}`; codes this SDK version
/// does not know are kept as they are, so newer servers never break older apps.
public struct BelfryClientError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A stable, machine-readable error code.
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        /// The code as the server or the SDK writes it.
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        /// The code of a server's answer, as the server spells it.
        public init(_ code: ErrorCode) { self.rawValue = code.rawValue }
        public var description: String { rawValue }

        /// The request never got an answer (offline, timed out, connection lost).
        public static let network = Code(rawValue: "network")
        /// The answer was not what the API describes.
        public static let invalidResponse = Code(rawValue: "invalid_response")
        /// No token was available, or the server refused it even after a refresh.
        public static let unauthorized = Code(ErrorCode.unauthorized)
        /// The user token expired; the SDK asks the provider for a new one once.
        public static let tokenExpired = Code(ErrorCode.tokenExpired)
        /// The server does not accept the user token.
        public static let invalidToken = Code(ErrorCode.invalidToken)
        /// The item cannot be changed by users (refused locally, without a request).
        public static let notEditable = Code(ErrorCode.notEditable)
        /// Someone else changed the preferences first (HTTP 412).
        public static let preconditionFailed = Code(ErrorCode.preconditionFailed)
        /// The thing asked for does not exist (or belongs to another user).
        public static let notFound = Code(ErrorCode.notFound)
        /// A value was refused, or the SDK was used out of order; the message says which.
        public static let invalidRequest = Code(ErrorCode.invalidRequest)
        /// The OS gave no device token for push, though permission was granted.
        public static let pushTokenUnavailable = Code(rawValue: "push_token_unavailable")
    }

    /// What went wrong, for code to act on.
    public var code: Code
    /// What went wrong, for people.
    public var message: String
    /// The HTTP status, when the server answered.
    public var status: Int?
    /// What caused it, such as a `URLError`.
    public var underlying: (any Error & Sendable)?

    /// Makes an error; the SDK's own are made for you.
    public init(code: Code, message: String, status: Int? = nil, underlying: (any Error & Sendable)? = nil) {
        self.code = code
        self.message = message
        self.status = status
        self.underlying = underlying
    }

    public var description: String {
        status.map { "\(code) (HTTP \($0)): \(message)" } ?? "\(code): \(message)"
    }

    /// Equal when code, message and status are; the underlying error is not compared.
    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.code == rhs.code && lhs.message == rhs.message && lhs.status == rhs.status
    }

    /// The error a server answer carries, from its JSON error body when it has one.
    static func server(status: Int, body: Data) -> BelfryClientError {
        struct Body: Decodable {
            struct Inner: Decodable {
                var code: String
                var message: String
            }
            var error: Inner
        }
        if let decoded = try? JSONDecoder().decode(Body.self, from: body) {
            return BelfryClientError(
                code: Code(rawValue: decoded.error.code), message: decoded.error.message, status: status)
        }
        let text = String(decoding: body.prefix(200), as: UTF8.self)
        return BelfryClientError(
            code: .invalidResponse, message: "HTTP \(status)\(text.isEmpty ? "" : ": \(text)")", status: status)
    }
}
