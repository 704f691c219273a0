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
        if let contentType = headers.contentType, contentType != .json {
            throw BelfryError(.unsupportedMediaType, "send the body as application/json")
        }
        // Foundation's decoder takes some text that is not JSON (a trailing comma); refuse it,
        // saying where.
        if let problem = JSONSyntax.problem(in: buffer.readableBytesView) {
            throw BelfryError.badRequest("the body is not valid JSON: \(problem)")
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
