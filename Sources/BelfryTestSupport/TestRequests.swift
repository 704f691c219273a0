import BelfryCore
import Foundation
import NIOCore
import NIOHTTP1
import Vapor
import VaporTesting

extension Application {
    /// Sends a request in process. `bearer` goes in `Authorization`; `json` is encoded as the body.
    public func send(
        _ method: HTTPMethod,
        _ path: String,
        bearer: String? = nil,
        json: (any Encodable)? = nil,
        rawBody: String? = nil,
        headers extra: HTTPHeaders = [:]
    ) async throws -> TestingHTTPResponse {
        var headers = extra
        if let bearer { headers.bearerAuthorization = BearerAuthorization(token: bearer) }
        var body: ByteBuffer?
        if let json {
            headers.contentType = .json
            body = ByteBuffer(data: try Self.clientEncoder.encode(json))
        } else if let rawBody {
            if headers.contentType == nil { headers.contentType = .json }
            body = ByteBuffer(string: rawBody)
        }
        return try await testing().sendRequest(method, path, headers: headers, body: body)
    }

    /// Encodes request bodies as a client would: dates as ISO 8601 text.
    static let clientEncoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }()

    /// Creates or updates a user with the test API key.
    @discardableResult
    public func putUser(_ id: String, _ upsert: UserUpsert = UserUpsert()) async throws -> TestingHTTPResponse {
        try await send(.PUT, "/v1/users/\(id)", bearer: testAPIKey, json: upsert)
    }

    /// Creates the user if needed and mints a token for them.
    public func userToken(_ id: String, tenants: [String] = []) async throws -> String {
        let created = try await putUser(id, UserUpsert(tenants: tenants))
        guard created.status == .created || created.status == .ok else {
            throw TestFailure("creating user \(id) answered \(created.status): \(created.body.string)")
        }
        let minted = try await send(.POST, "/v1/users/\(id)/tokens", bearer: testAPIKey)
        return try minted.decode(TokenGrant.self).token
    }
}

public struct TestFailure: Error, CustomStringConvertible {
    public var description: String

    public init(_ description: String) {
        self.description = description
    }
}

extension TestingHTTPResponse {
    public func decode<T: Decodable>(_ type: T.Type = T.self) throws -> T {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        do {
            return try decoder.decode(T.self, from: Data(buffer: body))
        } catch {
            throw TestFailure("could not decode \(T.self) from \(status): \(body.string)\n\(error)")
        }
    }

    /// The `error.code` of an error body, or `nil` if the body is not one.
    public var errorCode: String? {
        (try? JSONDecoder().decode(ErrorBody.self, from: Data(buffer: body)))?.error.code
    }

    public var errorMessage: String? {
        (try? JSONDecoder().decode(ErrorBody.self, from: Data(buffer: body)))?.error.message
    }

    public var etag: String? { headers.first(name: .eTag) }
}
