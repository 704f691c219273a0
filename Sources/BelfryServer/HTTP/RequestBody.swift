import BelfryCore
import Foundation
import Vapor

// Reading request bodies: routes with their own body limit, and JSON bodies decoded strictly
// (unknown fields refused, naming them and what the object takes).

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
    /// The body may have the fields its type decodes (``RequestFields``, from its coding keys)
    /// and no other: a misspelled optional field would otherwise be ignored and change what the
    /// request does. The objects inside it go by their paths (`content`, `schedule.calendar`;
    /// a list's objects by the list's name).
    func decodeBody<Body: Decodable & RequestFields>(_ type: Body.Type = Body.self) throws -> Body {
        try decodeBodyAndNulls(type).body
    }

    /// Like `decodeBody`, with the top-level fields sent as `null` (read in the same pass as the
    /// unknown fields), for a body where `null` clears a field and a field left out keeps it.
    func decodeBodyAndNulls<Body: Decodable & RequestFields>(
        _ type: Body.Type = Body.self
    ) throws -> (body: Body, nulls: Set<String>) {
        let keys = Body.fields
        let nested = Body.nestedFields
        guard let buffer = body.data, buffer.readableBytes > 0 else {
            throw BelfryError.badRequest("this request needs a JSON body")
        }
        if !Self.isJSON(headers) {
            throw BelfryError(.unsupportedMediaType, "send the body as application/json")
        }
        // Foundation's decoder takes some text that is not JSON (a trailing comma); refuse it,
        // saying where. The same pass reads the keys: the unknown ones, and the nulls.
        let fields: JSONSyntax.KeyFindings
        switch JSONSyntax.check(buffer.readableBytesView, keys: .init(allowed: keys, nested: nested)) {
        case .success(let found): fields = found
        case .failure(let problem): throw BelfryError.badRequest("the body is not valid JSON: \(problem)")
        }
        let unknown = fields.unknown
        if !unknown.isEmpty {
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
            return (try Self.bodyDecoder.decode(Body.self, from: buffer), fields.nulls)
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

extension Request {
    /// Whether a body with these headers may be JSON: no `Content-Type`, or `application/json`.
    /// The usual spellings are checked as bytes; Vapor's parse of the media type and its
    /// parameters, a tenth of intake's request handling, only reads the others.
    static func isJSON(_ headers: HTTPHeaders) -> Bool {
        guard let value = headers.first(name: .contentType) else { return true }
        let usual = "application/json"
        if value.utf8.starts(with: usual.utf8) {
            let rest = value.utf8.dropFirst(usual.utf8.count)
            if rest.isEmpty || rest.first == UInt8(ascii: ";") { return true }
        }
        guard let contentType = headers.contentType else { return true }
        return contentType == .json
    }
}
