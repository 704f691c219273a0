import Foundation
import Vapor

extension Response {
    /// The encoder for every JSON answer: ISO 8601 dates, stable key order.
    static var jsonEncoder: JSONEncoder { JSONCoding.encoder }

    static func json(
        _ value: some Encodable, status: HTTPResponseStatus = .ok, headers: HTTPHeaders = [:]
    ) throws
        -> Response
    {
        var headers = headers
        headers.contentType = .json
        return Response(status: status, headers: headers, body: .init(data: try jsonEncoder.encode(value)))
    }
}
