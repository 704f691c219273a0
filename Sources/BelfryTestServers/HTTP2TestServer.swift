import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOHTTP2
import NIOPosix
import NIOSSL

/// A server on a free loopback port speaking HTTP/2 over TLS (ALPN `h2` only), with a
/// certificate from a test authority; each request is answered by `respond`.
public final class HTTP2TestServer: Sendable {
    public struct Request: Sendable {
        public var method: String
        public var path: String
        /// Header names in lower case.
        public var headers: [String: String]
        public var body: Data
    }

    public struct Response: Sendable {
        public var status: Int
        public var headers: [(String, String)]
        public var body: Data
        /// How long the server waits before it answers.
        public var delay: TimeAmount?

        public init(status: Int, headers: [(String, String)] = [], body: Data = Data(), delay: TimeAmount? = nil) {
            self.status = status
            self.headers = headers
            self.body = body
            self.delay = delay
        }
    }

    public let port: Int
    public let authority: TestCertificateAuthority
    private let channel: any Channel
    private let connections: NIOLockedValueBox<[ObjectIdentifier: any Channel]>

    /// - Parameters:
    ///   - endsStreamOnLastData: end a stream on the DATA frame with an answer's body, as APNs
    ///     does, rather than on an empty DATA frame after it.
    ///   - maxConcurrentStreams: the streams a client may have open at once (SETTINGS); a client
    ///     opening more fails its connection.
    public init(
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, endsStreamOnLastData: Bool = false,
        maxConcurrentStreams: Int = 100, respond: @escaping @Sendable (Request) -> Response
    ) async throws {
        let settings =
            nioDefaultSettings.filter { $0.parameter != .maxConcurrentStreams }
            + [HTTP2Setting(parameter: .maxConcurrentStreams, value: maxConcurrentStreams)]
        let authority = try TestCertificateAuthority()
        let sslContext = try NIOSSLContext(configuration: authority.serverConfiguration(protocols: ["h2"]))
        let connections = NIOLockedValueBox<[ObjectIdentifier: any Channel]>([:])
        channel = try await ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                let id = ObjectIdentifier(channel)
                connections.withLockedValue { $0[id] = channel }
                channel.closeFuture.whenComplete { _ in connections.withLockedValue { $0[id] = nil } }
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: sslContext))
                }.flatMap {
                    channel.configureHTTP2Pipeline(
                        mode: .server, initialLocalSettings: settings,
                        inboundStreamInitializer: { stream in
                            stream.eventLoop.makeCompletedFuture {
                                if endsStreamOnLastData {
                                    try stream.pipeline.syncOperations.addHandler(EndStreamOnLastData())
                                }
                                try stream.pipeline.syncOperations.addHandlers([
                                    HTTP2FramePayloadToHTTP1ServerCodec(), StreamHandler(respond: respond),
                                ])
                            }
                        }
                    ).map { _ in }
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        port = channel.localAddress?.port ?? 0
        self.authority = authority
        self.connections = connections
    }

    /// Connections open now.
    public var connectionCount: Int {
        connections.withLockedValue { $0.count }
    }

    /// Closes every open connection, as a server going away does.
    public func dropConnections() async {
        for connection in connections.withLockedValue({ Array($0.values) }) {
            try? await connection.close()
        }
    }

    /// `https://127.0.0.1:<port>`.
    public var url: String { "https://127.0.0.1:\(port)" }

    public func shutdown() async {
        try? await channel.close()
        try? FileManager.default.removeItem(atPath: authority.certificatePath)
    }
}

/// One HTTP/2 stream: collects the request, then answers it.
private final class StreamHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let respond: @Sendable (HTTP2TestServer.Request) -> HTTP2TestServer.Response
    private var head: HTTPRequestHead?
    private var body = ByteBuffer()

    init(respond: @escaping @Sendable (HTTP2TestServer.Request) -> HTTP2TestServer.Response) {
        self.respond = respond
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
        case .body(var part):
            body.writeBuffer(&part)
        case .end:
            guard let head else { return }
            let request = HTTP2TestServer.Request(
                method: head.method.rawValue, path: head.uri,
                headers: Dictionary(
                    head.headers.map { ($0.name.lowercased(), $0.value) }, uniquingKeysWith: { first, _ in first }),
                body: Data(body.readableBytesView))
            let response = respond(request)
            if let delay = response.delay {
                let bound = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
                context.eventLoop.scheduleTask(in: delay) {
                    bound.value.handler.answer(response, to: head, context: bound.value.context)
                }
            } else {
                answer(response, to: head, context: context)
            }
        }
    }

    private func answer(_ response: HTTP2TestServer.Response, to head: HTTPRequestHead, context: ChannelHandlerContext)
    {
        var headers = HTTPHeaders(response.headers)
        headers.replaceOrAdd(name: "content-length", value: "\(response.body.count)")
        context.write(
            wrapOutboundOut(
                .head(
                    HTTPResponseHead(
                        version: head.version, status: .init(statusCode: response.status), headers: headers))
            ), promise: nil)
        if !response.body.isEmpty {
            context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: response.body)))), promise: nil)
        }
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }
}

/// Joins an answer's last DATA frame and the empty one that ends the stream after it into one
/// DATA frame that ends the stream.
private final class EndStreamOnLastData: ChannelOutboundHandler {
    typealias OutboundIn = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    private var held: (data: HTTP2Frame.FramePayload.Data, promise: EventLoopPromise<Void>?)?

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard case .data(let frame) = unwrapOutboundIn(data) else {
            release(context)
            context.write(data, promise: promise)
            return
        }
        if frame.endStream, let (last, lastPromise) = held, frame.data.readableBytes == 0 {
            held = nil
            var ending = last
            ending.endStream = true
            context.write(wrapOutboundOut(.data(ending)), promise: lastPromise)
            promise?.succeed()
            return
        }
        release(context)
        if frame.endStream {
            context.write(data, promise: promise)
        } else {
            held = (frame, promise)
        }
    }

    func flush(context: ChannelHandlerContext) {
        release(context)
        context.flush()
    }

    private func release(_ context: ChannelHandlerContext) {
        guard let (data, promise) = held else { return }
        held = nil
        context.write(wrapOutboundOut(.data(data)), promise: promise)
    }
}
