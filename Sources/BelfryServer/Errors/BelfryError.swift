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
        self.init(
            code, error.status == .notFound ? BelfryErrorMiddleware.noRoute : error.reason, headers: error.headers)
        if code.status != error.status { statusOverride = error.status }
    }
}

/// Turns every error into the JSON error body, with a code clients can rely on.
///
/// The middlewares every request passes are future-based, not `AsyncMiddleware`: Vapor runs each
/// async middleware in a task of its own, four more tasks per request, and while thousands of
/// streams open at once their frames made most of the server's peak memory.
struct BelfryErrorMiddleware: Middleware {
    func respond(to request: Request, chainingTo next: any Responder) -> EventLoopFuture<Response> {
        next.respond(to: request).flatMapErrorThrowing { error in
            var failure = Self.classify(error)
            if failure.code == .notFound, failure.message == Self.noRoute {
                let allowed = Self.methods(matching: request.url.path, in: request.application.routes.all)
                // The router takes a constant segment over a parameter and does not go back, so
                // a pattern can match where routing found nothing: then it stays a 404.
                if !allowed.isEmpty, !allowed.contains(request.method.rawValue) {
                    failure = BelfryError(
                        .methodNotAllowed,
                        "\(request.method.rawValue) is not allowed here; this path takes "
                            + allowed.joined(separator: ", "),
                        headers: ["Allow": allowed.joined(separator: ", ")])
                }
            }
            if failure.code == .payloadTooLarge, failure.message == HTTPResponseStatus.payloadTooLarge.reasonPhrase {
                failure = BelfryError(
                    .payloadTooLarge,
                    "the body is larger than \(Self.describe(bytes: request.bodyLimit)), the most this route takes")
            }
            if failure.code == .databaseUnavailable || failure.code == .storageUnavailable {
                request.application.databaseMonitor?.noteFailure(error)
            }
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

    static let noRoute = "no such route"

    /// The methods of the routes whose pattern `path` matches, in a stable order.
    static func methods(matching path: String, in routes: [Route]) -> [String] {
        let segments = path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        func matches(_ pattern: [PathComponent]) -> Bool {
            for (index, component) in pattern.enumerated() {
                switch component {
                case .catchall: return index < segments.count
                case .constant(let text): if index >= segments.count || segments[index] != text { return false }
                case .parameter, .anything: if index >= segments.count { return false }
                }
            }
            return pattern.count == segments.count
        }
        var found = Set(routes.filter { matches($0.path) }.map(\.method.rawValue))
        // Vapor answers HEAD through a GET route.
        if found.contains("GET") { found.insert("HEAD") }
        let order = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
        return order.filter(found.contains) + found.subtracting(order).sorted()
    }

    /// `2 MiB`, `256 KiB`, `1000 bytes`.
    static func describe(bytes: Int) -> String {
        if bytes >= 1024 * 1024, bytes % (1024 * 1024) == 0 { return "\(bytes / (1024 * 1024)) MiB" }
        if bytes >= 1024, bytes % 1024 == 0 { return "\(bytes / 1024) KiB" }
        return "\(bytes) bytes"
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
            // The database going away is the client's to retry, not the server's bug.
            return DatabaseFailure.answer(for: error)
                ?? BelfryError(.internalError, "something went wrong on the server")
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

extension RoutesBuilder {
    /// A route whose body may be larger than the server's limit: it collects up to `bodyLimit`,
    /// and its 413 names that limit.
    @discardableResult
    func on<Response: AsyncResponseEncodable>(
        _ method: HTTPMethod, _ path: PathComponent..., bodyLimit: ByteCount,
        use handler: @Sendable @escaping (Request) async throws -> Response
    ) -> Route {
        let route = on(method, path, body: .collect(maxSize: bodyLimit), use: handler)
        route.userInfo[Request.bodyLimitKey] = bodyLimit.value
        return route
    }
}

extension Request {
    static let bodyLimitKey = "belfry.body_limit"

    /// The most this request's route takes in a body.
    var bodyLimit: Int {
        route?.userInfo[Self.bodyLimitKey] as? Int ?? application.routes.defaultMaxBodySize.value
    }

    /// Decodes a JSON body; a missing or malformed one is a clear 400/422.
    ///
    /// - Parameters:
    ///   - keys: the fields the body may have; any other is refused, since a misspelled
    ///     optional field would otherwise be ignored and change what the request does.
    ///   - nested: the fields allowed in the objects of a list or object field, by the field's
    ///     path (`content`, `schedule.calendar`; a list's objects go by the list's name).
    func decodeBody<Body: Decodable>(
        _ type: Body.Type = Body.self, keys: Set<String>, nested: [String: Set<String>] = [:]
    ) throws -> Body {
        try decodeBodyAndNulls(type, keys: keys, nested: nested).body
    }

    /// Like `decodeBody`, with the top-level fields sent as `null` (read in the same pass as the
    /// unknown fields), for a body where `null` clears a field and a field left out keeps it.
    func decodeBodyAndNulls<Body: Decodable>(
        _ type: Body.Type = Body.self, keys: Set<String>, nested: [String: Set<String>] = [:]
    ) throws -> (body: Body, nulls: Set<String>) {
        guard let buffer = body.data, buffer.readableBytes > 0 else {
            throw BelfryError.badRequest("this request needs a JSON body")
        }
        if let contentType = headers.contentType, contentType != .json {
            throw BelfryError(.unsupportedMediaType, "send the body as application/json")
        }
        let keyReader = JSONDecoder()
        keyReader.userInfo = [UnknownKeys.allowed: keys, UnknownKeys.nested: nested]
        let fields = try? keyReader.decode(UnknownKeys.self, from: buffer)
        if let unknown = fields?.found, !unknown.isEmpty {
            // Each object with an unknown field says what it takes.
            let takes = Set(unknown.map(\.object)).sorted().map { object in
                object.isEmpty
                    ? "this request takes \(keys.sorted().joined(separator: ", "))"
                    : "\"\(object)\" takes \((nested[object] ?? []).sorted().joined(separator: ", "))"
            }
            throw BelfryError.invalid(
                "unknown field\(unknown.count == 1 ? "" : "s") \(unknown.map { "\"\($0.path)\"" }.joined(separator: ", ")); "
                    + takes.joined(separator: "; "))
        }
        do {
            return (try Self.bodyDecoder.decode(Body.self, from: buffer), fields?.nulls ?? [])
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
        decoder.dateDecodingStrategy = .belfryISO8601
        return decoder
    }()
}

/// Any key of a JSON object in a request body.
private struct BodyKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

/// The keys of a JSON body that a request does not take, and its top-level nulls, found without
/// decoding any value: only the top-level object and the nested objects of the fields named are
/// walked, so a list of 10 000 recipients is skipped, not read.
private struct UnknownKeys: Decodable {
    static let allowed = CodingUserInfoKey(rawValue: "belfry.allowedKeys")!
    static let nested = CodingUserInfoKey(rawValue: "belfry.nestedKeys")!

    /// Each unknown key's path (`content.zz`, `changes[2].x`) and the path of the object it is
    /// in, as `nested` names it (`content`, `changes`; empty for the body), in key order.
    var found: [(path: String, object: String)] = []
    /// The top-level keys whose value is `null`.
    var nulls: Set<String> = []

    init(from decoder: any Decoder) throws {
        guard let object = try? decoder.container(keyedBy: BodyKey.self) else { return }
        for key in object.allKeys where (try? object.decodeNil(forKey: key)) == true {
            nulls.insert(key.stringValue)
        }
        found = Self.unknown(
            in: object, allowed: decoder.userInfo[Self.allowed] as? Set<String> ?? [],
            nested: decoder.userInfo[Self.nested] as? [String: Set<String>] ?? [:], path: "", object: "")
    }

    private static func unknown(
        in container: KeyedDecodingContainer<BodyKey>, allowed: Set<String>, nested: [String: Set<String>],
        path: String,
        object: String
    ) -> [(path: String, object: String)] {
        var unknown: [(path: String, object: String)] = []
        for key in container.allKeys.sorted(by: { $0.stringValue < $1.stringValue }) {
            let childPath = path.isEmpty ? key.stringValue : "\(path).\(key.stringValue)"
            guard allowed.contains(key.stringValue) else {
                unknown.append((childPath, object))
                continue
            }
            let childObject = object.isEmpty ? key.stringValue : "\(object).\(key.stringValue)"
            guard let inner = nested[childObject] else { continue }
            if let child = try? container.nestedContainer(keyedBy: BodyKey.self, forKey: key) {
                unknown += Self.unknown(in: child, allowed: inner, nested: nested, path: childPath, object: childObject)
            } else if var list = try? container.nestedUnkeyedContainer(forKey: key) {
                var index = 0
                while !list.isAtEnd {
                    if let element = try? list.nestedContainer(keyedBy: BodyKey.self) {
                        unknown += Self.unknown(
                            in: element, allowed: inner, nested: nested, path: "\(childPath)[\(index)]",
                            object: childObject)
                    } else if (try? list.decode(Skipped.self)) == nil {
                        break
                    }
                    index += 1
                }
            }
        }
        return unknown
    }

    /// Any value, left unread.
    private struct Skipped: Decodable {
        init(from decoder: any Decoder) throws {}
    }
}
