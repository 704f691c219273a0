import BelfryHTTP2
import BelfryTestServers
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL
import Testing

@Suite("HTTP/2 client (APNs)", .serialized)
struct HTTP2ClientTests {
    /// The system's roots, and the test authority's certificate when given.
    static func trusting(_ pem: String?) throws -> TLSConfiguration {
        var tls = TLSConfiguration.makeClientConfiguration()
        if let pem { tls.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMBytes(Array(pem.utf8)))] }
        return tls
    }

    /// A server that answers each request with its path and body echoed, and the client for it.
    private static func withServer(
        maxConcurrentStreams: Int = 100, unindexed: [String] = [],
        respond: (@Sendable (HTTP2TestServer.Request) -> HTTP2TestServer.Response)? = nil,
        _ body: (HTTP2TestServer, HTTP2Client) async throws -> Void
    ) async throws {
        let server = try await HTTP2TestServer(
            maxConcurrentStreams: maxConcurrentStreams,
            respond: respond ?? { request in
                HTTP2TestServer.Response(
                    status: 200, headers: [("x-path", request.path), ("x-method", request.method)], body: request.body)
            })
        let client = try HTTP2Client(
            group: MultiThreadedEventLoopGroup.singleton, tls: try Self.trusting(server.authority.certificatePEM),
            unindexed: unindexed)
        do {
            try await body(server, client)
        } catch {
            await client.shutdown()
            await server.shutdown()
            throw error
        }
        await client.shutdown()
        await server.shutdown()
    }

    @Test("200 concurrent requests are streams on one connection; each gets its own answer")
    func multiplexes() async throws {
        try await Self.withServer { server, client in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<200 {
                    group.addTask {
                        let response = try await client.post(
                            "/3/device/\(index)?q=1", at: try .init(server.url),
                            headers: [("apns-topic", "org.example")],
                            body: ByteBuffer(string: "push \(index)"), timeout: .seconds(10))
                        #expect(response.status == 200)
                        #expect(response.headers.first(name: "x-path") == "/3/device/\(index)?q=1")
                        #expect(response.headers.first(name: "x-method") == "POST")
                        #expect(String(buffer: response.body) == "push \(index)")
                    }
                }
                try await group.waitForAll()
            }
            #expect(server.connectionCount == 1)
        }
    }

    @Test("requests past the streams the server allows wait for one, and each gets its own answer")
    func waitsForStreams() async throws {
        // Two streams at once, each answered after 20 ms: 40 requests take twenty turns.
        try await Self.withServer(
            maxConcurrentStreams: 2,
            respond: { request in
                HTTP2TestServer.Response(status: 200, body: request.body, delay: .milliseconds(20))
            }
        ) { server, client in
            let origin = try HTTP2Client.Origin(server.url)
            let answers = try await withThrowingTaskGroup(of: (Int, String).self) { group in
                for index in 0..<40 {
                    group.addTask {
                        let response = try await client.post(
                            "/\(index)", at: origin, headers: [], body: ByteBuffer(string: "push \(index)"),
                            timeout: .seconds(10))
                        return (response.status, String(buffer: response.body))
                    }
                }
                return try await group.reduce(into: [:]) { answers, answer in answers[answer.1] = answer.0 }
            }
            #expect(answers == Dictionary(uniqueKeysWithValues: (0..<40).map { ("push \($0)", 200) }))
            #expect(server.connectionCount == 1, "the server's limit was kept: exceeding it fails the connection")
        }
    }

    @Test("requests waiting for a stream fail when their time is up, and when the connection closes")
    func waitingRequestsFail() async throws {
        let received = NIOLockedValueBox(0)
        try await Self.withServer(
            maxConcurrentStreams: 2,
            respond: { _ in
                received.withLockedValue { $0 += 1 }
                return HTTP2TestServer.Response(status: 200, delay: .seconds(5))
            }
        ) { server, client in
            let origin = try HTTP2Client.Origin(server.url)
            func failures(timeout: TimeAmount, then: @Sendable () async -> Void = {}) async throws -> Int {
                let before = received.withLockedValue { $0 }
                return try await withThrowingTaskGroup(of: Bool.self) { group in
                    for index in 0..<6 {
                        group.addTask {
                            do {
                                _ = try await client.post(
                                    "/\(index)", at: origin, headers: [], body: ByteBuffer(), timeout: timeout)
                                return false
                            } catch is HTTP2Client.Failure {
                                return true
                            }
                        }
                    }
                    // Two on the connection's streams, so the other four wait behind them.
                    while received.withLockedValue({ $0 }) < before + 2 { try await Task.sleep(for: .milliseconds(10)) }
                    try await Task.sleep(for: .milliseconds(100))
                    await then()
                    return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
                }
            }
            let started = ContinuousClock.now
            #expect(try await failures(timeout: .milliseconds(500)) == 6)
            #expect(ContinuousClock.now - started < .seconds(4), "before any answer, the four waiting too")
            let closing = ContinuousClock.now
            #expect(try await failures(timeout: .seconds(30), then: { await server.dropConnections() }) == 6)
            #expect(ContinuousClock.now - closing < .seconds(4), "before any answer, the four waiting too")
        }
    }

    @Test("answers past the flow-control windows arrive: 400 of 1 KiB, then one of 200 KiB, on one connection")
    func flowControl() async throws {
        try await Self.withServer { server, client in
            let origin = try HTTP2Client.Origin(server.url)
            let kibibyte = String(repeating: "b", count: 1024)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<400 {
                    group.addTask {
                        let response = try await client.post(
                            "/\(index)", at: origin, headers: [], body: ByteBuffer(string: kibibyte),
                            timeout: .seconds(20))
                        #expect(response.body.readableBytes == 1024)
                    }
                }
                try await group.waitForAll()
            }
            let big = String(repeating: "c", count: 200 * 1024)
            let response = try await client.post(
                "/big", at: origin, headers: [], body: ByteBuffer(string: big), timeout: .seconds(20))
            #expect(response.status == 200)
            #expect(String(buffer: response.body) == big)
            #expect(server.connectionCount == 1)
        }
    }

    @Test("3 000 error answers that end their streams on their body, as APNs sends them, all arrive")
    func errorAnswersEndingOnData() async throws {
        let server = try await HTTP2TestServer(endsStreamOnLastData: true) { _ in
            HTTP2TestServer.Response(status: 400, body: Data(#"{"reason":"BadDeviceToken"}"#.utf8))
        }
        let client = try HTTP2Client(
            group: MultiThreadedEventLoopGroup.singleton, tls: try Self.trusting(server.authority.certificatePEM))
        let origin = try HTTP2Client.Origin(server.url)
        let answered = try await withThrowingTaskGroup(of: Bool.self) { group in
            var answered = 0
            for index in 0..<3000 {
                if index >= 100, try await group.next() == true { answered += 1 }
                group.addTask {
                    let response = try await client.post(
                        "/3/device/\(index)", at: origin, headers: [], body: ByteBuffer(), timeout: .seconds(20))
                    return response.status == 400 && String(buffer: response.body).contains("BadDeviceToken")
                }
            }
            for try await ok in group where ok { answered += 1 }
            return answered
        }
        #expect(answered == 3000)
        await client.shutdown()
        await server.shutdown()
    }

    @Test("headers reach the server as sent, and an error status comes back with its body")
    func headersAndErrors() async throws {
        let seen = NIOLockedValueBox<[String: String]>([:])
        try await Self.withServer(respond: { request in
            seen.withLockedValue { $0 = request.headers }
            return HTTP2TestServer.Response(
                status: 400, headers: [("apns-id", "abc")], body: Data(#"{"reason":"BadDeviceToken"}"#.utf8))
        }) { server, client in
            let response = try await client.post(
                "/3/device/x", at: try .init(server.url),
                headers: [("authorization", "bearer t0k3n"), ("apns-push-type", "alert")],
                body: ByteBuffer(string: "{}"), timeout: .seconds(10))
            #expect(response.status == 400)
            #expect(response.headers.first(name: "apns-id") == "abc")
            #expect(String(buffer: response.body) == #"{"reason":"BadDeviceToken"}"#)
            let headers = seen.withLockedValue { $0 }
            #expect(headers["authorization"] == "bearer t0k3n")
            #expect(headers["apns-push-type"] == "alert")
            #expect(headers["content-length"] == "2")
        }
    }

    @Test(
        "headers new in every request arrive as sent beside those that repeat, indexed or not",
        arguments: [[], [":path", "apns-id"]])
    func unindexedHeaders(unindexed: [String]) async throws {
        try await Self.withServer(
            unindexed: unindexed,
            respond: { request in
                HTTP2TestServer.Response(
                    status: 200,
                    body: Data(
                        [request.path, request.headers["apns-id"] ?? "", request.headers["authorization"] ?? ""]
                            .joined(separator: " ").utf8))
            }
        ) { server, client in
            let origin = try HTTP2Client.Origin(server.url)
            // Long enough that the unique headers of a few dozen requests fill HPACK's 4 KiB table.
            let token = "bearer " + String(repeating: "t0k3n", count: 60)
            for round in 0..<3 {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for index in 0..<100 {
                        group.addTask {
                            let id = UUID().uuidString.lowercased()
                            let path = "/3/device/\(round)-\(index)-" + String(repeating: "ab12", count: 16)
                            let response = try await client.post(
                                path, at: origin, headers: [("authorization", token), ("apns-id", id)],
                                body: ByteBuffer(string: "{}"), timeout: .seconds(10))
                            #expect(String(buffer: response.body) == "\(path) \(id) \(token)")
                        }
                    }
                    try await group.waitForAll()
                }
            }
        }
    }

    @Test("a connection the server closed is replaced by a new one")
    func reconnects() async throws {
        try await Self.withServer { server, client in
            _ = try await client.post(
                "/a", at: try .init(server.url), headers: [], body: ByteBuffer(), timeout: .seconds(10))
            #expect(server.connectionCount == 1)
            await server.dropConnections()
            // The client learns of the close when it arrives; a request in that moment fails,
            // and the delivery queue tries it again, as this loop does.
            var answered = false
            for _ in 0..<50 where !answered {
                answered =
                    (try? await client.post(
                        "/b", at: try .init(server.url), headers: [], body: ByteBuffer(), timeout: .seconds(10)))?
                    .status == 200
                if !answered { try await Task.sleep(for: .milliseconds(20)) }
            }
            #expect(answered)
            #expect(server.connectionCount == 1)
        }
    }

    @available(macOS 15, iOS 18, tvOS 18, watchOS 11, *)
    @Test("tasks on the client's loop send and are answered there, 300 at once")
    func onTheClientsLoop() async throws {
        try await Self.withServer { server, client in
            let origin = try HTTP2Client.Origin(server.url)
            let answered = try await withTaskExecutorPreference(EventLoopTaskExecutor(client.eventLoop)) {
                try await withThrowingTaskGroup(of: Bool.self) { group in
                    for index in 0..<300 {
                        group.addTask {
                            let before = client.eventLoop.inEventLoop
                            let response = try await client.post(
                                "/\(index)", at: origin, headers: [], body: ByteBuffer(string: "\(index)"),
                                timeout: .seconds(10))
                            return before && client.eventLoop.inEventLoop && response.status == 200
                                && String(buffer: response.body) == "\(index)"
                        }
                    }
                    return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
                }
            }
            #expect(answered == 300)
            #expect(server.connectionCount == 1)
            let loops = client.openChannels.map(\.eventLoop)
            #expect(loops.count == 1)
            #expect(loops.allSatisfy { $0 === client.eventLoop }, "the connection is on the client's loop")
        }
    }

    @Test("a request with no answer in time fails, and its connection is replaced")
    func timesOut() async throws {
        try await Self.withServer(respond: { request in
            HTTP2TestServer.Response(status: 200, delay: request.path == "/slow" ? .seconds(5) : nil)
        }) { server, client in
            let started = ContinuousClock.now
            await #expect(throws: HTTP2Client.Failure.self) {
                _ = try await client.post(
                    "/slow", at: try .init(server.url), headers: [], body: ByteBuffer(), timeout: .milliseconds(300))
            }
            #expect(ContinuousClock.now - started < .seconds(3))
            let quick = try await client.post(
                "/quick", at: try .init(server.url), headers: [], body: ByteBuffer(), timeout: .seconds(10))
            #expect(quick.status == 200)
            // The connection the timeout closed goes away; the new one stays.
            for _ in 0..<100 where server.connectionCount != 1 { try await Task.sleep(for: .milliseconds(20)) }
            #expect(server.connectionCount == 1)
        }
    }

    @Test("a request whose timeout is shorter than those of requests before it fails at its own time")
    func shorterTimeoutLater() async throws {
        let received = NIOLockedValueBox(0)
        try await Self.withServer(respond: { _ in
            received.withLockedValue { $0 += 1 }
            return HTTP2TestServer.Response(status: 200, delay: .seconds(8))
        }) { server, client in
            let origin = try HTTP2Client.Origin(server.url)
            let long = Task {
                try await client.post("/long", at: origin, headers: [], body: ByteBuffer(), timeout: .seconds(30))
            }
            while received.withLockedValue({ $0 }) < 1 { try await Task.sleep(for: .milliseconds(10)) }
            let started = ContinuousClock.now
            do {
                _ = try await client.post(
                    "/short", at: origin, headers: [], body: ByteBuffer(), timeout: .milliseconds(300))
                Issue.record("answered before the server's delay")
            } catch let failure as HTTP2Client.Failure {
                #expect(failure.description == HTTP2Client.Failure.timedOut.description)
            }
            #expect(ContinuousClock.now - started < .seconds(4), "at its own deadline, not the first request's")
            // Its timeout closed the connection, and the request before it with it.
            await #expect(throws: HTTP2Client.Failure.self) { _ = try await long.value }
        }
    }

    @available(macOS 15, iOS 18, tvOS 18, watchOS 11, *)
    @Test("a refused connection fails its request at once, also from the client's loop; the next one tries again")
    func refused() async throws {
        // A port just freed: nothing listens there.
        let listener = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(host: "127.0.0.1", port: 0).get()
        let port = try #require(listener.localAddress?.port)
        try await listener.close()
        let client = try HTTP2Client(group: MultiThreadedEventLoopGroup.singleton, tls: try Self.trusting(nil))
        let origin = try HTTP2Client.Origin("https://127.0.0.1:\(port)")
        for _ in 0..<2 {
            let started = ContinuousClock.now
            await #expect(throws: (any Error).self) {
                try await withTaskExecutorPreference(EventLoopTaskExecutor(client.eventLoop)) {
                    _ = try await client.post("/a", at: origin, headers: [], body: ByteBuffer(), timeout: .seconds(10))
                }
            }
            #expect(ContinuousClock.now - started < .seconds(3))
            #expect(client.openChannels.isEmpty)
        }
        await client.shutdown()
    }

    @Test("a connection being closed is not offered again while TLS says goodbye")
    func closingIsRetired() async throws {
        try await Self.withServer { server, client in
            let origin = try HTTP2Client.Origin(server.url)
            _ = try await client.post("/a", at: origin, headers: [], body: ByteBuffer(), timeout: .seconds(10))
            let channel = try #require(client.openChannels.first)
            // In the loop turn that begins the close (as a request's timeout does), before the
            // TLS close_notify exchange lets the connection go inactive.
            let offered = try await channel.eventLoop.submit {
                channel.close(promise: nil)
                return client.openChannels.count
            }.get()
            #expect(offered == 0)
            let next = try await client.post("/b", at: origin, headers: [], body: ByteBuffer(), timeout: .seconds(10))
            #expect(next.status == 200)
        }
    }

    @Test("a server whose certificate is not trusted is refused")
    func verifiesCertificates() async throws {
        let server = try await HTTP2TestServer { _ in HTTP2TestServer.Response(status: 200) }
        let client = try HTTP2Client(group: MultiThreadedEventLoopGroup.singleton, tls: try Self.trusting(nil))
        let started = ContinuousClock.now
        let error = await #expect(throws: (any Error).self) {
            _ = try await client.post(
                "/a", at: try .init(server.url), headers: [], body: ByteBuffer(), timeout: .seconds(10))
        }
        // The handshake's own error, at once: not a closed stream or a timeout.
        #expect(!(error is HTTP2Client.Failure), "\(String(describing: error))")
        #expect(ContinuousClock.now - started < .seconds(3))
        await client.shutdown()
        await server.shutdown()
    }

    @Test("an origin's path is put before every request's path")
    func pathPrefix() async throws {
        try await Self.withServer { server, client in
            let response = try await client.post(
                "/3/device/x", at: try .init("\(server.url)/mount/"), headers: [], body: ByteBuffer(),
                timeout: .seconds(10))
            #expect(response.headers.first(name: "x-path") == "/mount/3/device/x")
        }
    }

    @Test("only https origins are taken; nothing answers a port with no server")
    func refusesBadTargets() async throws {
        #expect(throws: HTTP2Client.Failure.self) { try HTTP2Client.Origin("http://127.0.0.1:1") }
        #expect(try HTTP2Client.Origin("https://127.0.0.1/a/path").pathPrefix == "/a/path")
        #expect(try HTTP2Client.Origin("https://api.push.apple.com").authority == "api.push.apple.com")
        #expect(try HTTP2Client.Origin("https://127.0.0.1:8443").port == 8443)
        #expect(try HTTP2Client.Origin("https://proxy.example/apns/").pathPrefix == "/apns")
        #expect(throws: HTTP2Client.Failure.self) { try HTTP2Client.Origin("https://h.example/?q=1") }
        let client = try HTTP2Client(group: MultiThreadedEventLoopGroup.singleton, tls: try Self.trusting(nil))
        let nowhere = try HTTP2Client.Origin("https://127.0.0.1:1")
        await #expect(throws: (any Error).self) {
            _ = try await client.post("/a", at: nowhere, headers: [], body: ByteBuffer(), timeout: .seconds(1))
        }
        await client.shutdown()
        await #expect(throws: HTTP2Client.Failure.self) {
            _ = try await client.post("/a", at: nowhere, headers: [], body: ByteBuffer(), timeout: .seconds(1))
        }
    }
}
