import BelfryCore
import Vapor

/// An error a client is told about: a stable code, a message naming what was wrong, and any
/// headers the answer needs (`ETag`, `WWW-Authenticate`). The code decides the status.
public struct BelfryError: AbortError, Sendable, CustomStringConvertible {
    let code: ErrorCode
    public var message: String
    public var headers: HTTPHeaders
    /// Only for a framework error passed through with a status no code has (say, 414).
    private var statusOverride: HTTPResponseStatus?

    init(_ code: ErrorCode, _ message: String, headers: HTTPHeaders = [:]) {
        self.code = code
        self.message = message
        self.headers = headers
    }

    public var status: HTTPResponseStatus { statusOverride ?? code.status }
    public var reason: String { message }
    public var description: String { "\(status.code) \(code.rawValue): \(message)" }

    static func badRequest(_ message: String) -> Self { .init(.badRequest, message) }
    static func invalid(_ message: String) -> Self { .init(.invalidRequest, message) }
}

extension BelfryError {
    init(_ error: PreferenceChangeError) {
        let code: ErrorCode =
            switch error.kind {
            case .unknownCategory: .categoryNotFound
            case .unknownChannel: .channelNotFound
            case .channelNotInCategory: .channelNotInCategory
            case .notEditable: .notEditable
            }
        self.init(code, error.message)
    }

    /// A framework error (Vapor's routing, body limits) in Belfry's shape.
    fileprivate init(passingThrough error: any AbortError) {
        let code: ErrorCode =
            switch error.status {
            case .notFound: .notFound
            case .payloadTooLarge: .payloadTooLarge
            case .unsupportedMediaType: .unsupportedMediaType
            case .methodNotAllowed: .methodNotAllowed
            case .unauthorized: .unauthorized
            case .badRequest: .badRequest
            default: error.status.code >= 500 ? .internalError : .badRequest
            }
        self.init(code, error.status == .notFound ? "no such route" : error.reason, headers: error.headers)
        if code.status != error.status { statusOverride = error.status }
    }
}

/// Turns every error into the JSON error body, with a code clients can rely on.
struct BelfryErrorMiddleware: AsyncMiddleware {
    func respond(to request: Request, chainingTo next: any AsyncResponder) async throws -> Response {
        do {
            return try await next.respond(to: request)
        } catch {
            let failure = Self.classify(error)
            if failure.status.code >= 500 {
                request.logger.error("request failed", metadata: ["belfry.error": "\(String(reflecting: error))"])
            } else {
                request.logger.debug("request refused", metadata: ["belfry.error.code": "\(failure.code.rawValue)"])
            }
            let response = Response(status: failure.status, headers: failure.headers)
            try response.content.encode(ErrorBody(code: failure.code.rawValue, message: failure.message), as: .json)
            return response
        }
    }

    static func classify(_ error: any Error) -> BelfryError {
        switch error {
        case let error as BelfryError:
            return error
        case let error as DecodingError:
            return .invalid(describeDecoding(error))
        case let error as any AbortError:
            return BelfryError(passingThrough: error)
        default:
            return BelfryError(.internalError, "something went wrong on the server")
        }
    }

    /// Names the field and what was expected, without Swift type names.
    static func describeDecoding(_ error: DecodingError) -> String {
        func field(_ path: [any CodingKey]) -> String {
            let text = path.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined()
            return text.hasPrefix(".") ? String(text.dropFirst()) : text
        }
        switch error {
        case .keyNotFound(let key, let context):
            return "field \"\(field(context.codingPath + [key]))\" is required"
        case .typeMismatch(let type, let context), .valueNotFound(let type, let context):
            return "field \"\(field(context.codingPath))\" must be \(expectedName(type))"
        case .dataCorrupted(let context):
            if context.codingPath.isEmpty { return "the body is not valid JSON" }
            return "field \"\(field(context.codingPath))\": \(context.debugDescription)"
        @unknown default:
            return "the body could not be read"
        }
    }

    private static func expectedName(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Bool.Type: "true or false"
        case is Int.Type, is Double.Type: "a number"
        case is [Any].Type: "a list"
        default: "an object"
        }
    }
}

extension Request {
    /// Decodes a JSON body; a missing or malformed one is a clear 400/422.
    ///
    /// - Parameters:
    ///   - keys: the fields the body may have; any other is refused, since a misspelled
    ///     optional field would otherwise be ignored and change what the request does.
    ///   - nested: the fields allowed in the objects of a list or object field, by field name.
    func decodeBody<Body: Decodable>(
        _ type: Body.Type = Body.self, keys: Set<String>, nested: [String: Set<String>] = [:]
    ) throws -> Body {
        guard let buffer = body.data, buffer.readableBytes > 0 else {
            throw BelfryError.badRequest("this request needs a JSON body")
        }
        if let contentType = headers.contentType, contentType != .json {
            throw BelfryError(.unsupportedMediaType, "send the body as application/json")
        }
        if let root = try? JSONDecoder().decode(JSONValue.self, from: buffer) {
            var unknown: [String] = []
            Self.collectUnknownKeys(root, allowed: keys, nested: nested, path: "", into: &unknown)
            if !unknown.isEmpty {
                throw BelfryError.invalid(
                    "unknown field\(unknown.count == 1 ? "" : "s") \(unknown.joined(separator: ", ")); "
                        + "this request takes \(keys.sorted().joined(separator: ", "))")
            }
        }
        do {
            return try Self.bodyDecoder.decode(Body.self, from: buffer)
        } catch let error as DecodingError {
            if case .dataCorrupted(let context) = error, context.codingPath.isEmpty {
                throw BelfryError.badRequest("the body is not valid JSON")
            }
            throw BelfryError.invalid(BelfryErrorMiddleware.describeDecoding(error))
        }
    }

    /// Reads dates as ISO 8601 text, with or without fractional seconds, as every Belfry answer writes them.
    static let bodyDecoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            let plain = ISO8601DateFormatter()
            let fractional = ISO8601DateFormatter()
            fractional.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            guard let date = plain.date(from: text) ?? fractional.date(from: text) else {
                throw DecodingError.dataCorruptedError(
                    in: container,
                    debugDescription: "expected an ISO 8601 date such as 2026-12-01T08:00:00Z, got \"\(text)\"")
            }
            return date
        }
        return decoder
    }()

    private static func collectUnknownKeys(
        _ value: JSONValue, allowed: Set<String>, nested: [String: Set<String>], path: String,
        into unknown: inout [String]
    ) {
        guard case .object(let fields) = value else { return }
        for (key, child) in fields.sorted(by: { $0.key < $1.key }) {
            let childPath = path.isEmpty ? key : "\(path).\(key)"
            guard allowed.contains(key) else {
                unknown.append("\"\(childPath)\"")
                continue
            }
            guard let inner = nested[key] else { continue }
            switch child {
            case .array(let elements):
                for (index, element) in elements.enumerated() {
                    collectUnknownKeys(
                        element, allowed: inner, nested: [:], path: "\(childPath)[\(index)]", into: &unknown)
                }
            default:
                collectUnknownKeys(child, allowed: inner, nested: [:], path: childPath, into: &unknown)
            }
        }
    }
}
