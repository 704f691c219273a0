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

    @Test("a body announced and never sent gets a 408, and the idle connection is closed")
    func unfinishedBody() async throws {
        // The idle timeout well past the deadline, so that the 408 is what a slow, loaded machine
        // still sees first.
        try await withBelfry(
            .sqlite,
            settings: {
                $0.requestTimeout = 1; $0.idleTimeout = 15
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
                }
                #expect(Date().timeIntervalSince(started) < 60)
            }
        }
    }

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
            flags: .init(), environment: ["BELFRY_REQUEST_TIMEOUT": "5", "BELFRY_IDLE_TIMEOUT": "120"])
        #expect(resolved.requestTimeout == 5)
        #expect(resolved.idleTimeout == 120)
        let defaults = try ServerConfiguration.resolve(flags: .init(), environment: [:])
        #expect(defaults.requestTimeout == 30)
        #expect(defaults.idleTimeout == 60)
        let error = try #require(throws: ConfigError.self) {
            try ServerConfiguration.resolve(
                flags: .init(), environment: ["BELFRY_REQUEST_TIMEOUT": "0", "BELFRY_IDLE_TIMEOUT": "5"])
        }
        #expect(Set(error.issues.map(\.path)) == ["BELFRY_REQUEST_TIMEOUT", "BELFRY_IDLE_TIMEOUT"])
    }
}
