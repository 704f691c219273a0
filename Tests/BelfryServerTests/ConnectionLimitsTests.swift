import BelfryCore
import BelfryTestSupport
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing
import Vapor

@testable import BelfryServer

/// Clients that open a request and never finish it: each gets an answer, and its connection
/// is closed, on a real socket.
@Suite("Connection limits: request deadline and idle timeout", .serialized)
struct ConnectionLimitsTests {
    /// A raw TCP client: what it sent, everything it received, and when the server closed it.
    final class RawClient: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = ByteBuffer
        private let text = NIOLockedValueBox("")
        let closed: EventLoopPromise<Void>
        let channel: any Channel

        var received: String { text.withLockedValue { $0 } }

        private init(channel: any Channel, closed: EventLoopPromise<Void>) {
            self.channel = channel
            self.closed = closed
        }

        static func connect(port: Int) async throws -> RawClient {
            let loop = MultiThreadedEventLoopGroup.singleton.next()
            let closed = loop.makePromise(of: Void.self)
            let box = NIOLockedValueBox<RawClient?>(nil)
            let channel = try await ClientBootstrap(group: loop)
                .channelInitializer { channel in
                    let client = RawClient(channel: channel, closed: closed)
                    box.withLockedValue { $0 = client }
                    return channel.pipeline.addHandler(client)
                }
                .connect(host: "127.0.0.1", port: port).get()
            _ = channel
            return try #require(box.withLockedValue { $0 })
        }

        func send(_ text: String) async throws {
            try await channel.writeAndFlush(ByteBuffer(string: text)).get()
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let buffer = unwrapInboundIn(data)
            text.withLockedValue { $0 += String(buffer: buffer) }
        }

        func channelInactive(context: ChannelHandlerContext) {
            closed.succeed()
        }

        /// Waits for the server to close the connection, at most `seconds`.
        func waitUntilClosed(within seconds: Int64) async -> Bool {
            let timeout = channel.eventLoop.scheduleTask(in: .seconds(seconds)) {}
            return await withTaskGroup(of: Bool.self) { group in
                group.addTask { (try? await self.closed.futureResult.get()) != nil }
                group.addTask {
                    try? await timeout.futureResult.get()
                    return false
                }
                let first = await group.next() ?? false
                // Ends the other wait: a cancelled timer fails its future.
                timeout.cancel()
                if !first { self.channel.close(promise: nil) }
                return first
            }
        }
    }

    @Test("a body announced and never sent gets a 408 with Connection: close, and its connection closes")
    func unfinishedBody() async throws {
        // The idle timeout well past the deadline, so that the 408 is what a slow, loaded machine
        // still sees first, and the connection's end is the 408's, not the idle timeout's.
        try await withBelfry(
            .sqlite,
            settings: {
                $0.requestTimeout = 2; $0.idleTimeout = 60
            }
        ) { app in
            try await InboxStreamTests.serving(app) { port, _ in
                let started = Date()
                var clients: [RawClient] = []
                for _ in 0..<20 {
                    let client = try await RawClient.connect(port: port)
                    try await client.send(
                        "PUT /v1/users/x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                            + "Content-Length: 104857600\r\n\r\n{")
                    clients.append(client)
                }
                for client in clients {
                    #expect(await client.waitUntilClosed(within: 40), "closed by the server")
                    #expect(client.received.hasPrefix("HTTP/1.1 408"), "\(client.received.prefix(80))")
                    #expect(client.received.contains("request_timeout"))
                    #expect(client.received.lowercased().contains("connection: close"))
                }
                #expect(Date().timeIntervalSince(started) < 50, "closed after the 408, not by the idle timeout")
            }
        }
    }

    @Test("a request head sent a byte at a time gets a 408 at the deadline; an idle kept-alive connection stays")
    func slowHead() async throws {
        try await Self.serving({ $0.requestTimeout = 2 }) { port, kept in
            let slow = try await RawClient.connect(port: port)
            let started = Date()
            // A byte every half second: each resets the idle timeout, as in the probe.
            for byte in "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + String(repeating: "a", count: 200) {
                guard (try? await slow.send(String(byte))) != nil, slow.channel.isActive else { break }
                if Date().timeIntervalSince(started) > 40 { break }
                try await Task.sleep(for: .milliseconds(500))
            }
            #expect(await slow.waitUntilClosed(within: 5), "closed by the server")
            #expect(slow.received.hasPrefix("HTTP/1.1 408"), "\(slow.received.prefix(80))")
            #expect(Date().timeIntervalSince(started) < 40, "closed at the head's deadline, not the idle timeout")
            // The kept-alive connection sent nothing after its answer: it is still open and answers.
            #expect(kept.channel.isActive)
            try await kept.send(Self.healthz)
            for _ in 0..<100 where kept.received.components(separatedBy: "HTTP/1.1 200").count < 3 {
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(kept.received.components(separatedBy: "HTTP/1.1 200").count == 3, "\(kept.received)")
        }
    }

    @Test("one address holding more connections than its cap loses the newest idle ones")
    func connectionsPerAddress() async throws {
        try await Self.serving({ $0.maxConnectionsPerAddress = 5 }) { port, first in
            // The first is answered, then a sweep passes, before the others come: it is the
            // oldest by more than the sweep's second, however slow the machine.
            for _ in 0..<100 where !first.received.contains("HTTP/1.1 200") {
                try await Task.sleep(for: .milliseconds(100))
            }
            try await Task.sleep(for: .milliseconds(1_500))
            var clients = [first]
            for _ in 0..<11 { clients.append(try await RawClient.connect(port: port)) }
            var open = clients.count
            for _ in 0..<100 where open > 5 {
                try await Task.sleep(for: .milliseconds(100))
                open = clients.filter(\.channel.isActive).count
            }
            #expect(open == 5)
            #expect(first.channel.isActive, "the oldest connection is kept")
            try await Task.sleep(for: .seconds(2))
            #expect(clients.filter(\.channel.isActive).count == 5, "no more than the excess is closed")
            for client in clients { client.channel.close(promise: nil) }
        }
    }

    static let healthz = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"

    /// A server (its idle timeout a minute, then `adjust`ed) on a free port, and a first client
    /// whose request it answers (which also starts the guard, as a booted server's start does).
    static func serving(
        _ adjust: (inout ServerConfiguration) -> Void, _ body: (Int, RawClient) async throws -> Void
    ) async throws {
        try await withBelfry(
            .sqlite,
            settings: {
                $0.idleTimeout = 60
                adjust(&$0)
            }
        ) { app in
            try await InboxStreamTests.serving(app) { port, _ in
                let first = try await RawClient.connect(port: port)
                try await first.send(healthz)
                try await body(port, first)
            }
        }
    }

    @Test("the guard's choices: streams and requests under way stay; the newest idle connections go first")
    func guardDecisions() throws {
        let connections = ConnectionGuard(headDeadline: 10, perAddress: 2, logger: Logger(label: "test"))
        func peer(_ port: Int) -> ConnectionGuard.Peer { .init(address: [10, 0, 0, 1], port: port) }
        let start: TimeInterval = 1_000
        typealias Socket = (peer: ConnectionGuard.Peer, data: TimeInterval, sent: TimeInterval, bytes: UInt64)
        // Each connection's last data in and out, on the guard's clock, as a sweep at `at` reads them.
        func listing(at: TimeInterval, _ sockets: [Socket]) -> [ConnectionGuard.Peer: ConnectionGuard.Open] {
            var open: [ConnectionGuard.Peer: ConnectionGuard.Open] = [:]
            for socket in sockets {
                open[socket.peer] = ConnectionGuard.Open(
                    sampledAt: at, sinceData: at - socket.data, sinceSent: at - socket.sent,
                    bytesReceived: socket.bytes, inode: UInt64(socket.peer.port))
            }
            return open
        }
        connections.started(peer(1), now: start)
        connections.started(peer(2), now: start)
        connections.answered(peer(2), closing: false, streaming: true, now: start)
        connections.started(peer(3), now: start + 1)
        connections.answered(peer(3), closing: false, streaming: false, now: start + 2)
        connections.started(peer(4), now: start + 3)
        connections.answered(peer(4), closing: true, streaming: false, now: start + 3)
        let first: [Socket] = [
            (peer(1), start, start - 5, 100), (peer(2), start, start + 3.9, 100), (peer(3), start + 1, start + 2, 100),
            (peer(4), start + 2, start + 3.5, 100), (peer(5), start + 2, 0, 30),
        ]
        // 4 got its 408 out; 5 (first seen now) and 3 are the newest idle ones beyond the cap.
        #expect(
            connections.decide(open: listing(at: start + 4, first), now: start + 4)
                == [peer(4): .answeredTimeout, peer(5): .overCap, peer(3): .overCap])
        // Data after the last answer is a head under way: a slow one once the deadline passed
        // since a sweep first saw it (the request under way on 1 has left the listing). The stream
        // stays, even after a listing that missed it.
        let other = ConnectionGuard.Peer(address: [10, 0, 0, 2], port: 6)
        func sweep(_ at: TimeInterval, stream: Bool = true) -> [ConnectionGuard.Peer: ConnectionGuard.Reason] {
            var sockets: [Socket] = [
                (peer(3), start + 17, start + 2, 100), (other, start + 11, 0, 0),
            ]
            if stream { sockets.append((peer(2), at - 0.5, at - 5, 900)) }
            return connections.decide(open: listing(at: at, sockets), now: at)
        }
        #expect(sweep(start + 20) == [:])
        #expect(sweep(start + 29, stream: false) == [:], "not yet 10 s since the head was first seen")
        #expect(sweep(start + 30) == [peer(3): .slowHead])
        // A 408's connection closes only once something was sent after the answer (the 408
        // itself), or 5 s after it.
        connections.started(peer(7), now: start + 30)
        connections.answered(peer(7), closing: true, streaming: false, now: start + 30)
        #expect(
            connections.decide(open: listing(at: start + 31, [(peer(7), start + 29, start + 28, 10)]), now: start + 31)
                == [:])
        #expect(
            connections.decide(open: listing(at: start + 36, [(peer(7), start + 29, start + 28, 10)]), now: start + 36)
                == [peer(7): .answeredTimeout])
        #expect(
            ConnectionGuard.Peer(try SocketAddress(ipAddress: "::ffff:127.0.0.1", port: 80))
                == .init(address: [127, 0, 0, 1], port: 80))
    }

    #if os(Linux)
        @Test("the listing names the server port's established connections by peer, and nothing else")
        func listing() async throws {
            let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .bind(host: "127.0.0.1", port: 0).get()
            let port = try #require(server.localAddress?.port)
            let client = try await RawClient.connect(port: port)
            let peer = try #require(ConnectionGuard.Peer(client.channel.localAddress))
            try await client.send("GET / HTTP/1.1\r\n")
            var open: [ConnectionGuard.Peer: ConnectionGuard.Open] = [:]
            for _ in 0..<50 where open[peer]?.bytesReceived != 16 {
                try await Task.sleep(for: .milliseconds(20))
                open = ConnectionGuard.openConnections(port: port)
            }
            // The listener and the client's own end (its local port is another) are not listed.
            #expect(Array(open.keys) == [peer])
            #expect(open[peer]?.bytesReceived == 16)
            #expect(open[peer]?.sendQueue == 0)
            #expect(try #require(open[peer]).inode != 0)
            #expect(ConnectionGuard.openConnections(port: port + 1).isEmpty, "another port's")
            // Once the client has closed, the server's end is no longer established.
            try await client.channel.close()
            var left = open
            for _ in 0..<50 where !left.isEmpty {
                try await Task.sleep(for: .milliseconds(20))
                left = ConnectionGuard.openConnections(port: port)
            }
            #expect(left.isEmpty)
            try await server.close()
        }
    #endif

    @Test("a connection that sends nothing at all is closed after the idle timeout")
    func silentConnection() async throws {
        try await withBelfry(.sqlite, settings: { $0.idleTimeout = 2 }) { app in
            try await InboxStreamTests.serving(app) { port, _ in
                let client = try await RawClient.connect(port: port)
                #expect(await client.waitUntilClosed(within: 20))
                #expect(client.received.isEmpty)
            }
        }
    }

    @Test("the timeouts are settings, checked when read")
    func settings() throws {
        let resolved = try ServerConfiguration.resolve(
            flags: .init(),
            environment: [
                "BELFRY_REQUEST_TIMEOUT": "5", "BELFRY_IDLE_TIMEOUT": "120", "BELFRY_MAX_CONNECTIONS_PER_ADDRESS": "0",
            ])
        #expect(resolved.requestTimeout == 5)
        #expect(resolved.idleTimeout == 120)
        #expect(resolved.maxConnectionsPerAddress == 0)
        let defaults = try ServerConfiguration.resolve(flags: .init(), environment: [:])
        #expect(defaults.requestTimeout == 30)
        #expect(defaults.idleTimeout == 60)
        #expect(defaults.maxConnectionsPerAddress == 256)
        let error = try #require(throws: ConfigError.self) {
            try ServerConfiguration.resolve(
                flags: .init(), environment: ["BELFRY_REQUEST_TIMEOUT": "0", "BELFRY_IDLE_TIMEOUT": "5"])
        }
        #expect(Set(error.issues.map(\.path)) == ["BELFRY_REQUEST_TIMEOUT", "BELFRY_IDLE_TIMEOUT"])
    }
}
