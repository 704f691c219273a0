import BelfryCore
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Requests to Belfry's client API: the user's token on every request (a fresh one once
/// after a 401), JSON both ways, the server's error bodies as `BelfryClientError`, and
/// idempotent requests retried with backoff when the network fails.
struct BelfryAPI: Sendable {
    let baseURL: URL
    let tokenProvider: any TokenProvider
    let transport: any HTTPTransport
    let clock: any ClientClock
    /// Waits before the retries of an idempotent request whose network failed.
    let retryDelays: [TimeInterval]

    static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .belfryISO8601
        return decoder
    }()

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }()

    struct Answer: Sendable {
        var status: Int
        var headers: [String: String]
        var body: Data

        func decode<T: Decodable>(_ type: T.Type = T.self) throws(BelfryClientError) -> T {
            do {
                return try BelfryAPI.decoder.decode(T.self, from: body)
            } catch {
                throw BelfryClientError(
                    code: .invalidResponse, message: "the answer is not a \(T.self): \(error)", status: status,
                    underlying: error)
            }
        }

        func header(_ name: String) -> String? {
            headers.first { $0.key.caseInsensitiveCompare(name) == .orderedSame }?.value
        }
    }

    func url(_ path: String, query: [String: String?] = [:]) -> URL {
        var components = URLComponents(url: baseURL.appendingPathComponent(path), resolvingAgainstBaseURL: false)
        let items = query.compactMap { key, value in value.map { URLQueryItem(name: key, value: $0) } }
            .sorted { $0.name < $1.name }
        if !items.isEmpty { components?.queryItems = items }
        return components?.url ?? baseURL
    }

    /// Sends a request; a non-2xx answer (other than `accepting`) throws the server's error.
    /// - Parameter idempotent: retry when the network fails (GET, and writes that set a value).
    func send(
        _ method: String, _ path: String, query: [String: String?] = [:], body: (any Encodable)? = nil,
        headers: [String: String] = [:], idempotent: Bool, accepting: Set<Int> = []
    ) async throws(BelfryClientError) -> Answer {
        var request = URLRequest(url: url(path, query: query))
        request.httpMethod = method
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        if let body {
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            do {
                request.httpBody = try Self.encoder.encode(body)
            } catch {
                throw BelfryClientError(code: .invalidRequest, message: "cannot encode the request: \(error)")
            }
        }
        var refreshed = false
        var attempt = 0
        while true {
            try checkCancellation()
            let token: String
            do {
                token = try await tokenProvider.token(refresh: refreshed)
            } catch {
                throw BelfryClientError(
                    code: .unauthorized, message: "no user token: \(error)", underlying: error)
            }
            request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
            let data: Data
            let response: HTTPURLResponse
            do {
                (data, response) = try await transport.data(for: request)
            } catch is CancellationError {
                throw Self.cancelled
            } catch {
                if (error as? URLError)?.code == .cancelled { throw Self.cancelled }
                guard idempotent, attempt < retryDelays.count else {
                    throw BelfryClientError(
                        code: .network, message: "\(method) \(path) failed: \(error.localizedDescription)",
                        underlying: error)
                }
                do {
                    try await clock.sleep(for: retryDelays[attempt])
                } catch {
                    throw Self.cancelled
                }
                attempt += 1
                continue
            }
            if response.statusCode == 401, !refreshed {
                refreshed = true
                continue
            }
            let headers = Dictionary(
                response.allHeaderFields.compactMap { key, value in
                    (key as? String).map { ($0, "\(value)") }
                }, uniquingKeysWith: { first, _ in first })
            let answer = Answer(status: response.statusCode, headers: headers, body: data)
            guard (200..<300).contains(response.statusCode) || accepting.contains(response.statusCode) else {
                throw BelfryClientError.server(status: response.statusCode, body: data)
            }
            return answer
        }
    }

    static let cancelled = BelfryClientError(code: .network, message: "cancelled", underlying: CancellationError())

    private func checkCancellation() throws(BelfryClientError) {
        if Task.isCancelled { throw Self.cancelled }
    }
}

extension BelfryClientError {
    /// Whether this is the SDK's report of a cancelled task.
    public var isCancellation: Bool { underlying is CancellationError }
}
