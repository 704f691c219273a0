import BelfryCore
import Vapor

/// An error as the HTTP edge answers it: the status the code stands for, the headers the
/// error's detail needs, and the JSON body (``BelfryErrorMiddleware`` writes it).
struct ErrorAnswer: AbortError, Sendable, CustomStringConvertible {
    var code: ErrorCode
    var message: String
    var status: HTTPResponseStatus
    var headers: HTTPHeaders

    init(_ error: BelfryError) {
        code = error.code
        message = error.message
        status = error.code.status
        headers = [:]
        switch error.detail {
        case .current(let version)?: headers.replaceOrAdd(name: .eTag, value: version)
        case .retryAfter(let seconds)?: headers.replaceOrAdd(name: .retryAfter, value: String(seconds))
        case .challenge(let challenge)?: headers.replaceOrAdd(name: .wwwAuthenticate, value: challenge)
        case .allowed(let methods)?: headers.replaceOrAdd(name: .allow, value: methods.joined(separator: ", "))
        case .rateLimited(let seconds, let fields)?:
            for (name, value) in fields { headers.replaceOrAdd(name: name, value: value) }
            headers.replaceOrAdd(name: .retryAfter, value: String(seconds))
        case nil: break
        }
    }

    /// A framework error (Vapor's routing, body limits) in Belfry's shape, with its own status
    /// where no code has it (say, 414).
    init(passingThrough error: any AbortError) {
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
        self.code = code
        message = error.status == .notFound ? BelfryErrorMiddleware.noRoute : error.reason
        status = error.status
        headers = error.headers
    }

    var reason: String { message }
    var description: String { "\(status.code) \(code.rawValue): \(message)" }
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
                    failure = ErrorAnswer(
                        BelfryError(
                            .methodNotAllowed,
                            "\(request.method.rawValue) is not allowed here; this path takes "
                                + allowed.joined(separator: ", "), .allowed(allowed)))
                }
            }
            if failure.code == .payloadTooLarge, failure.message == HTTPResponseStatus.payloadTooLarge.reasonPhrase {
                failure = ErrorAnswer(
                    BelfryError(
                        .payloadTooLarge,
                        "the body is larger than \(Self.describe(bytes: request.bodyLimit)), the most this route takes")
                )
            }
            if failure.code == .databaseUnavailable || failure.code == .storageUnavailable {
                request.application.databaseMonitor?.noteFailure(error)
            }
            if failure.status.code >= 500 {
                request.logger.error("request failed", metadata: ["belfry.error": "\(String(reflecting: error))"])
            } else {
                request.logger.debug("request refused", metadata: ["belfry.error.code": "\(failure.code.rawValue)"])
            }
            // A mistyped console address gets the console's page, not the API's JSON.
            if failure.code == .notFound, failure.message == Self.noRoute, request.url.path.hasPrefix("/admin/") {
                return WebResponse.html(ConsolePages.notFound(path: request.url.path), status: .notFound)
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

    static func classify(_ error: any Error) -> ErrorAnswer {
        switch error {
        case let error as BelfryError:
            return ErrorAnswer(error)
        case let error as DecodingError:
            return ErrorAnswer(.invalid(describeDecoding(error)))
        case let error as any AbortError:
            return ErrorAnswer(passingThrough: error)
        default:
            // The database going away is the client's to retry, not the server's bug.
            return ErrorAnswer(
                DatabaseFailure.answer(for: error) ?? BelfryError(.internalError, "something went wrong on the server"))
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
