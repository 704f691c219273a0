import BelfryCore
import Foundation
import Testing

@testable import BelfryClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Requests, tokens, errors and retries.
@Suite("BelfryClient transport")
struct TransportTests {
    let clock = ManualClock()
    let tokens = CountingTokens()

    func api(_ transport: FakeTransport) -> BelfryAPI {
        BelfryAPI(
            baseURL: URL(string: "https://belfry.test/base")!, tokenProvider: tokens, transport: transport,
            clock: clock, retryDelays: [0.5, 1, 2])
    }

    @Test("every request carries the user's token, JSON, and the path under the base URL")
    func request() async throws {
        let transport = FakeTransport { _ in (200, [:], Data(#"{"unread":3,"unseen":1}"#.utf8)) }
        let counts: InboxCounts = try await api(transport).send(
            "GET", "v1/me/notifications/counts", query: ["tenant": "dewiki", "skip": nil], idempotent: true
        ).decode()
        #expect(counts == InboxCounts(unread: 3, unseen: 1))
        let request = try #require(transport.requests.first)
        #expect(request.path == "/base/v1/me/notifications/counts")
        #expect(request.query == ["tenant": "dewiki"])
        #expect(request.headers["Authorization"] == "Bearer t1")
    }

    @Test("a 401 asks the provider for a fresh token once and repeats the request")
    func refreshOn401() async throws {
        let transport = FakeTransport { request in
            request.headers["Authorization"] == "Bearer t1"
                ? (401, [:], Data(#"{"error":{"code":"token_expired","message":"expired"}}"#.utf8))
                : (200, [:], Data("{}".utf8))
        }
        _ = try await api(transport).send("GET", "v1/me/preferences", idempotent: true)
        #expect(transport.requests.map { $0.headers["Authorization"] } == ["Bearer t1", "Bearer t2"])
        #expect(tokens.refreshes == 1)
    }

    @Test("a token refused twice is the server's error, with its code")
    func refusedTwice() async throws {
        let transport = FakeTransport { _ in
            (401, [:], Data(#"{"error":{"code":"invalid_token","message":"the token is not valid"}}"#.utf8))
        }
        await #expect(throws: BelfryClientError(code: .invalidToken, message: "the token is not valid", status: 401)) {
            _ = try await api(transport).send("GET", "v1/me/preferences", idempotent: true)
        }
        #expect(transport.requests.count == 2)
    }

    @Test("server error bodies become typed errors; unknown codes are kept; other bodies are described")
    func serverErrors() async throws {
        let transport = FakeTransport { request in
            request.path.hasSuffix("teapot")
                ? (418, [:], Data("short and stout".utf8))
                : (409, [:], Data(#"{"error":{"code":"brand_new_code","message":"something new"}}"#.utf8))
        }
        do {
            _ = try await api(transport).send("POST", "v1/x", idempotent: false)
            Issue.record("expected an error")
        } catch {
            #expect(error.code == BelfryClientError.Code(rawValue: "brand_new_code"))
            #expect(error.message == "something new")
            #expect(error.status == 409)
        }
        do {
            _ = try await api(transport).send("GET", "v1/teapot", idempotent: true)
            Issue.record("expected an error")
        } catch {
            #expect(error.code == .invalidResponse)
            #expect(error.message == "HTTP 418: short and stout")
        }
    }

    @Test("idempotent requests are retried after network failures, waiting 0.5, 1 and 2 s")
    func retries() async throws {
        let failures = Fixtures.Counter()
        let transport = FakeTransport { _ in
            if failures.next() <= 2 { throw URLError(.networkConnectionLost) }
            return (200, [:], Data("{}".utf8))
        }
        let api = api(transport)
        let task = Task { try await api.send("GET", "v1/me/preferences", idempotent: true) }
        while clock.sleeperCount == 0 { await Task.yield() }
        #expect(transport.requests.count == 1)
        await clock.advance(by: 0.5)
        while clock.sleeperCount == 0 { await Task.yield() }
        #expect(transport.requests.count == 2)
        await clock.advance(by: 1)
        _ = try await task.value
        #expect(transport.requests.count == 3)
    }

    @Test("a request that keeps failing gives a network error after its retries; writes are not retried")
    func networkError() async throws {
        let transport = FakeTransport { _ in throw URLError(.notConnectedToInternet) }
        let api = api(transport)
        do {
            _ = try await api.send("POST", "v1/me/notifications/x/actions/reply", idempotent: false)
            Issue.record("expected an error")
        } catch {
            #expect(error.code == .network)
        }
        #expect(transport.requests.count == 1, "a non-idempotent request is sent once")
        let task = Task { try await api.send("GET", "v1/me/preferences", idempotent: true) }
        for delay in [0.5, 1.0, 2.0] {
            while clock.sleeperCount == 0 { await Task.yield() }
            await clock.advance(by: delay)
        }
        await #expect(throws: BelfryClientError.self) { _ = try await task.value }
        #expect(transport.requests.count == 5, "one plus three retries")
    }

    @Test("cancelling the calling task stops retrying")
    func cancellation() async throws {
        let transport = FakeTransport { _ in throw URLError(.timedOut) }
        let api = api(transport)
        let task = Task { try await api.send("GET", "v1/me/preferences", idempotent: true) }
        while clock.sleeperCount == 0 { await Task.yield() }
        task.cancel()
        do {
            _ = try await task.value
            Issue.record("expected cancellation")
        } catch let error as BelfryClientError {
            #expect(error.isCancellation)
        }
        #expect(transport.requests.count == 1)
    }

    @Test("a missing token is an unauthorized error, and nothing is sent")
    func noToken() async throws {
        struct NoUser: Error {}
        let transport = FakeTransport()
        let api = BelfryAPI(
            baseURL: URL(string: "https://belfry.test")!, tokenProvider: ClosureTokenProvider { _ in throw NoUser() },
            transport: transport, clock: clock, retryDelays: [])
        await #expect(throws: BelfryClientError.self) { _ = try await api.send("GET", "v1/me", idempotent: true) }
        #expect(transport.requests.isEmpty)
    }
}
