import NIOCore
import NIOPosix
import NIOSSL

/// An SMTP transport over a SwiftNIO TCP connection, with TLS from the start or after STARTTLS.
final class NIOSMTPTransport: SMTPTransport, @unchecked Sendable {
    // The channel is thread-safe; `handler` is touched only on the channel's event loop.
    private let channel: any Channel
    private let handler: SMTPReplyHandler
    private let tls: NIOSSLContext?

    private init(channel: any Channel, handler: SMTPReplyHandler, tls: NIOSSLContext?) {
        self.channel = channel
        self.handler = handler
        self.tls = tls
    }

    /// Connects to `host`:`port`; with `implicitTLS`, TLS starts at once.
    static func connect(
        host: String, port: Int, security: SMTPSecurity, tls: NIOSSLContext?, group: any EventLoopGroup,
        timeout: Duration
    ) async throws -> NIOSMTPTransport {
        let handler = SMTPReplyHandler()
        let serverName = host.isIPAddress ? nil : host
        let implicit = security == .implicitTLS ? tls : nil
        let channel = try await ClientBootstrap(group: group)
            .connectTimeout(.nanoseconds(Int64(timeout.components.seconds) * 1_000_000_000))
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let implicit {
                        try channel.pipeline.syncOperations.addHandler(
                            try NIOSSLClientHandler(context: implicit, serverHostname: serverName))
                    }
                    try channel.pipeline.syncOperations.addHandler(handler)
                }
            }
            .connect(host: host, port: port).get()
        return NIOSMTPTransport(channel: channel, handler: handler, tls: tls)
    }

    func write(_ bytes: [UInt8]) async throws {
        // A cancelled send closes the connection: the transaction can then never complete.
        try await withTaskCancellationHandler {
            try await channel.writeAndFlush(channel.allocator.buffer(bytes: bytes))
        } onCancel: { [channel] in
            channel.close(promise: nil)
        }
    }

    func readReply(timeout: Duration) async throws -> SMTPReply {
        let loop = channel.eventLoop
        let promise = loop.makePromise(of: SMTPReply.self)
        let handler = self.handler
        let nanoseconds =
            Int64(timeout.components.seconds) * 1_000_000_000 + timeout.components.attoseconds / 1_000_000_000
        loop.execute { handler.awaitReply(promise, timeout: .nanoseconds(nanoseconds), on: loop) }
        do {
            return try await withTaskCancellationHandler {
                try await promise.futureResult.get()
            } onCancel: { [channel] in
                channel.close(promise: nil)
            }
        } catch let error as SMTPReplyHandler.TimedOut {
            // The conversation's state is unknown now: the connection cannot be reused.
            channel.close(promise: nil)
            throw error
        }
    }

    func startTLS(serverName: String) async throws {
        guard let tls else { throw SMTPReplyHandler.Failure(description: "no TLS configuration") }
        let handler = self.handler
        let name = serverName.isIPAddress ? nil : serverName
        try await channel.eventLoop.flatSubmit { [channel] () -> EventLoopFuture<Void> in
            guard !handler.hasBufferedInput else {
                return channel.eventLoop.makeFailedFuture(
                    SMTPReplyHandler.Failure(description: "the server sent data after its reply to STARTTLS"))
            }
            do {
                let tlsHandler = try NIOSSLClientHandler(context: tls, serverHostname: name)
                try channel.pipeline.syncOperations.addHandler(tlsHandler, position: .first)
                return channel.eventLoop.makeSucceededVoidFuture()
            } catch {
                return channel.eventLoop.makeFailedFuture(error)
            }
        }.get()
    }

    func close() async {
        try? await channel.close()
    }
}

/// Splits what the server sends into reply lines and replies, and hands each reply to the
/// one waiting for it. Lives on its channel's event loop.
final class SMTPReplyHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    struct TimedOut: Error, CustomStringConvertible {
        var description: String
    }

    /// Longer lines are not SMTP (RFC 5321 §4.5.3.1.5 allows 512 octets for a reply line).
    static let longestLine = 4096

    private var partial: [UInt8] = []
    private var parser = SMTPReply.Parser()
    private var ready: [Result<SMTPReply, any Error>] = []
    private var waiting: EventLoopPromise<SMTPReply>?
    private var deadline: Scheduled<Void>?
    private var ended: (any Error)?

    /// Whether anything has arrived that no one has read yet.
    var hasBufferedInput: Bool { !partial.isEmpty || !ready.isEmpty || parser.isMidReply }

    func awaitReply(_ promise: EventLoopPromise<SMTPReply>, timeout: TimeAmount, on loop: any EventLoop) {
        if !ready.isEmpty {
            promise.completeWith(ready.removeFirst())
            return
        }
        if let ended {
            promise.fail(ended)
            return
        }
        waiting = promise
        deadline = loop.scheduleTask(in: timeout) { [self] in
            guard let waiting else { return }
            self.waiting = nil
            waiting.fail(TimedOut(description: "no reply within \(timeout.nanoseconds / 1_000_000_000) s"))
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var buffer = unwrapInboundIn(data)
        guard let bytes = buffer.readBytes(length: buffer.readableBytes) else { return }
        for byte in bytes {
            if byte == UInt8(ascii: "\n") {
                if partial.last == UInt8(ascii: "\r") { partial.removeLast() }
                let line = String(decoding: partial, as: UTF8.self)
                partial.removeAll(keepingCapacity: true)
                do {
                    if let reply = try parser.add(line) { deliver(.success(reply)) }
                } catch {
                    end(error, context: context)
                    return
                }
            } else {
                partial.append(byte)
                if partial.count > Self.longestLine {
                    end(
                        Failure(description: "the server sent a reply line longer than \(Self.longestLine) octets"),
                        context: context)
                    return
                }
            }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        end(Failure(description: "the server closed the connection"), context: context)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        end(error, context: context)
    }

    private func deliver(_ result: Result<SMTPReply, any Error>) {
        if let waiting {
            self.waiting = nil
            deadline?.cancel()
            waiting.completeWith(result)
        } else {
            ready.append(result)
        }
    }

    private func end(_ error: any Error, context: ChannelHandlerContext) {
        guard ended == nil else { return }
        ended = error
        if let waiting {
            self.waiting = nil
            deadline?.cancel()
            waiting.fail(error)
        }
        context.close(promise: nil)
    }
}

extension String {
    /// IPv4 or IPv6 literal: TLS checks those against the certificate's IP addresses, not as a name.
    var isIPAddress: Bool {
        (try? SocketAddress(ipAddress: self, port: 0)) != nil
    }
}
