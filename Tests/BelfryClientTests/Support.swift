import BelfryCore
import Foundation

@testable import BelfryClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A transport that answers from a handler and records every request.
final class FakeTransport: HTTPTransport, @unchecked Sendable {
    // @unchecked: state under `lock`.
    struct Recorded: Sendable {
        var method: String
        var path: String
        var query: [String: String]
        var headers: [String: String]
        var body: Data?

        /// A header, whatever the case of its name.
        func header(_ name: String) -> String? {
            headers.first { $0.key.caseInsensitiveCompare(name) == .orderedSame }?.value
        }

        var json: [String: Any] {
            body.flatMap { try? JSONSerialization.jsonObject(with: $0) as? [String: Any] } ?? [:]
        }
    }

    typealias Handler = @Sendable (Recorded) throws -> (Int, [String: String], Data)

    private let lock = NSLock()
    private var handler: Handler
    private var recorded: [Recorded] = []
    var streamHandler: (@Sendable (Recorded) throws -> (Int, AsyncThrowingStream<Data, any Error>))?

    init(_ handler: @escaping Handler = { _ in (200, [:], Data("{}".utf8)) }) {
        self.handler = handler
    }

    var requests: [Recorded] {
        lock.lock()
        defer { lock.unlock() }
        return recorded
    }

    func answer(_ handler: @escaping Handler) {
        lock.lock()
        self.handler = handler
        lock.unlock()
    }

    private func record(_ request: URLRequest) -> Recorded {
        let components = request.url.flatMap { URLComponents(url: $0, resolvingAgainstBaseURL: false) }
        let query = Dictionary(
            (components?.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { first, _ in first })
        let recorded = Recorded(
            method: request.httpMethod ?? "GET", path: components?.path ?? "", query: query,
            headers: request.allHTTPHeaderFields ?? [:], body: request.httpBody)
        lock.lock()
        self.recorded.append(recorded)
        lock.unlock()
        return recorded
    }

    func data(for request: URLRequest) async throws -> (Data, HTTPURLResponse) {
        let recorded = record(request)
        let handler = lock.withLock { self.handler }
        let (status, headers, body) = try handler(recorded)
        return (
            body,
            HTTPURLResponse(url: request.url!, statusCode: status, httpVersion: "HTTP/1.1", headerFields: headers)!
        )
    }

    func stream(for request: URLRequest) async throws -> (HTTPURLResponse, AsyncThrowingStream<Data, any Error>) {
        let recorded = record(request)
        guard let streamHandler else { throw URLError(.unsupportedURL) }
        let (status, chunks) = try streamHandler(recorded)
        return (
            HTTPURLResponse(url: request.url!, statusCode: status, httpVersion: "HTTP/1.1", headerFields: [:])!, chunks
        )
    }
}

/// Tokens "t1", "t2", … : a refresh gives the next.
final class CountingTokens: TokenProvider, @unchecked Sendable {
    // @unchecked: state under `lock`.
    private let lock = NSLock()
    private(set) var issued = 0
    private(set) var refreshes = 0

    func token(refresh: Bool) async throws -> String {
        lock.withLock {
            if refresh || issued == 0 {
                issued += 1
                if refresh { refreshes += 1 }
            }
            return "t\(issued)"
        }
    }
}

enum Fixtures {
    /// Counts calls from any thread: 1, 2, 3, …
    final class Counter: @unchecked Sendable {
        // @unchecked: `value` is only touched under `lock`.
        private let lock = NSLock()
        private var value = 0

        func next() -> Int {
            lock.withLock {
                value += 1
                return value
            }
        }
    }

    /// Two sections (one unnamed), an uneditable category, and two overall channels.
    static let preferences = PreferenceData(
        sections: [
            Section(
                name: "Talk", description: "Messages and mentions",
                subcategories: [
                    Category(
                        name: "Mention", category: "mention", description: nil, preference: .optIn, isEditable: true,
                        channels: [
                            CategoryChannel(channel: "inbox", preference: .optIn, isEditable: false),
                            CategoryChannel(channel: "ios_push", preference: .optIn, isEditable: true),
                        ]),
                    Category(
                        name: "Talk message", category: "edit-user-talk", description: nil, preference: .optIn,
                        isEditable: true, channels: []),
                ]),
            Section(
                subcategories: [
                    Category(
                        name: "Failed login", category: "login-fail", description: nil, preference: .optIn,
                        isEditable: false, channels: []),
                    Category(
                        name: "Thanks", category: "edit-thank", description: nil, preference: .optIn, isEditable: true,
                        channels: []),
                ]),
        ],
        channelPreferences: [
            ChannelPreference(channel: "email", isRestricted: false),
            ChannelPreference(channel: "ios_push", isRestricted: false),
        ])

    static func json(_ value: some Encodable) -> Data {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        return (try? encoder.encode(value)) ?? Data()
    }

    /// A fake server for preferences: GET answers `state`, changes apply to it.
    final class PreferenceServer: @unchecked Sendable {
        // @unchecked: state under `lock`.
        private let lock = NSLock()
        var state = Fixtures.preferences
        var version = 1
        /// Answers to give to the next writes instead of applying them.
        var failures: [Int] = []

        func handle(_ request: FakeTransport.Recorded) throws -> (Int, [String: String], Data) {
            lock.lock()
            defer { lock.unlock() }
            if request.method == "GET" {
                return (200, ["ETag": "\"v\(version)\""], Fixtures.json(state))
            }
            if !failures.isEmpty {
                let status = failures.removeFirst()
                return (
                    status, [:],
                    Data(
                        #"{"error":{"code":"\#(status == 412 ? "precondition_failed" : "boom")","message":"no"}}"#.utf8)
                )
            }
            let body = try JSONDecoder().decode(PreferenceChangesRequest.self, from: request.body ?? Data())
            for change in body.changes { try? state.apply(change) }
            version += 1
            let result = PreferenceChangesResponse(
                results: [.init(tenant: body.tenants?.first, etag: "\"v\(version)\"", preferences: state)])
            return (200, [:], Fixtures.json(result))
        }

        /// Someone else changes the state (another device).
        func changeElsewhere(_ change: PreferenceChange) {
            lock.lock()
            try? state.apply(change)
            version += 1
            lock.unlock()
        }
    }
}

extension PreferenceData {
    func category(_ id: String) -> Category? {
        (sections ?? []).flatMap { $0.subcategories ?? [] }.first { $0.category == id }
    }
}
