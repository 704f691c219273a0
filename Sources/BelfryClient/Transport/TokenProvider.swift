/// Gives the SDK the signed-in user's token, which the app gets from its backend
/// (`POST /v1/users/{id}/tokens` there).
public protocol TokenProvider: Sendable {
    /// The current token. With `refresh`, the server refused the last one (expired): fetch a new one.
    func token(refresh: Bool) async throws -> String
}

/// A token provider from a closure.
public struct ClosureTokenProvider: TokenProvider {
    private let body: @Sendable (_ refresh: Bool) async throws -> String

    /// - Parameter body: returns the token; `refresh` is true after the server refused the last one.
    public init(_ body: @escaping @Sendable (_ refresh: Bool) async throws -> String) {
        self.body = body
    }

    public func token(refresh: Bool) async throws -> String {
        try await body(refresh)
    }
}
