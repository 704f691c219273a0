import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL

/// An HTTP/2-only client over TLS for APNs: one long-lived connection per origin, every request
/// a stream on it.
///
/// A request is a stream channel with one small handler that writes the HEADERS and DATA frames
/// and collects the answer. The general-purpose client (AsyncHTTPClient) spent about 100 µs of
/// CPU per push on its per-request machinery (request state machines, header validation, an
/// HTTP/1-shaped layer over the stream), five times what the server took to answer it.
final class HTTP2Client: Sendable {
    struct Response: Sendable {
        var status: Int
        var headers: HPACKHeaders
        var body: ByteBuffer
    }

    enum Failure: Error, CustomStringConvertible {
        case invalidURL(String)
        case timedOut
        case streamClosed
        case malformedResponse
        case shutDown

        var description: String {
            switch self {
            case .invalidURL(let url): "not an https origin (https://host[:port]): \(url)"
            case .timedOut: "no answer in time"
            case .streamClosed: "the connection closed before the answer came"
            case .malformedResponse: "the answer has no valid :status"
            case .shutDown: "the client is shut down"
            }
        }
    }

    /// Where requests go: `https://host[:port]`, parsed once, not per request.
    struct Origin: Hashable, Sendable {
        var host: String
        var port: Int
        /// The `:authority` pseudo-header.
        var authority: String

        init(_ url: String) throws(Failure) {
            guard let components = URLComponents(string: url), components.scheme == "https",
                let host = components.host, !host.isEmpty,
                components.percentEncodedPath.isEmpty || components.path == "/"
            else { throw Failure.invalidURL(url) }
            self.host = host
            port = components.port ?? 443
            authority = components.port.map { "\(host):\($0)" } ?? host
        }
    }

    private let group: any EventLoopGroup
    private let sslContext: NIOSSLContext
    private let connectTimeout: TimeAmount
    private let state = NIOLockedValueBox(State())

    private struct State {
        var connections: [Origin: Slot] = [:]
        var shutDown = false
    }

    /// A connection being opened, or open: an open one is taken without waiting on a future,
    /// which would hop to its event loop and back for every request.
    private enum Slot {
        case opening(EventLoopFuture<Connection>)
        case open(Connection, opened: EventLoopFuture<Connection>)

        var future: EventLoopFuture<Connection> {
            switch self {
            case .opening(let future), .open(_, let future): future
            }
        }
    }

    init(group: any EventLoopGroup, extraCertificatesPEM: String?, connectTimeout: TimeAmount = .seconds(5)) throws {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.applicationProtocols = ["h2"]
        if let pem = extraCertificatesPEM {
            tls.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMBytes(Array(pem.utf8)))]
        }
        self.group = group
        sslContext = try NIOSSLContext(configuration: tls)
        self.connectTimeout = connectTimeout
    }

    /// POSTs `body` to `path` (with its query, if any) at `origin`, with `headers` (lower-case
    /// names).
    func post(
        _ path: String, at origin: Origin, headers: [(String, String)], body: ByteBuffer, timeout: TimeAmount
    ) async throws -> Response {
        var fields = HPACKHeaders()
        fields.reserveCapacity(5 + headers.count)
        fields.add(name: ":method", value: "POST")
        fields.add(name: ":scheme", value: "https")
        fields.add(name: ":authority", value: origin.authority)
        fields.add(name: ":path", value: path)
        for (name, value) in headers { fields.add(name: name, value: value) }
        fields.add(name: "content-length", value: String(body.readableBytes))

        let connection = try await connection(to: origin)
        return try await connection.send(fields, body: body, timeout: timeout)
    }

    func shutdown() async {
        let connections = state.withLockedValue { state in
            state.shutDown = true
            defer { state.connections = [:] }
            return state.connections.values.map(\.future)
        }
        for connection in connections {
            try? await connection.get().channel.close()
        }
    }

    /// The open connection to `origin`, or a new one (one attempt at a time per origin).
    private func connection(to origin: Origin) async throws -> Connection {
        let slot = try state.withLockedValue { state -> Slot in
            guard !state.shutDown else { throw Failure.shutDown }
            if let existing = state.connections[origin] { return existing }
            let opening = Slot.opening(connect(to: origin))
            state.connections[origin] = opening
            return opening
        }
        let future: EventLoopFuture<Connection>
        switch slot {
        case .open(let connection, _): return connection
        case .opening(let opening): future = opening
        }
        do {
            return try await future.get()
        } catch {
            forget(origin, future)
            throw error
        }
    }

    private func forget(_ origin: Origin, _ future: EventLoopFuture<Connection>) {
        state.withLockedValue { state in
            if state.connections[origin]?.future === future { state.connections[origin] = nil }
        }
    }

    private func connect(to origin: Origin) -> EventLoopFuture<Connection> {
        let sslContext = self.sslContext
        // A host name is sent for SNI and checked against the certificate; an IP address is
        // checked against the certificate's addresses.
        let serverHostname = origin.host.isIPAddress ? nil : origin.host
        let future = ClientBootstrap(group: group)
            .connectTimeout(connectTimeout)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        NIOSSLClientHandler(context: sslContext, serverHostname: serverHostname))
                }
            }
            .connect(host: origin.host, port: origin.port)
            .flatMap { channel in
                channel.configureHTTP2Pipeline(
                    mode: .client,
                    connectionConfiguration: .init(),
                    streamConfiguration: .init(),
                    inboundStreamInitializer: { stream in
                        // Servers do not open streams to clients (no server push here).
                        stream.close()
                    }
                ).map { Connection(channel: channel, multiplexer: $0) }
            }
        future.whenSuccess { [weak self] connection in
            self?.state.withLockedValue { state in
                if state.connections[origin]?.future === future {
                    state.connections[origin] = .open(connection, opened: future)
                }
            }
            connection.channel.closeFuture.whenComplete { _ in self?.forget(origin, future) }
        }
        return future
    }

    private struct Connection: Sendable {
        let channel: any Channel
        let multiplexer: NIOHTTP2Handler.StreamMultiplexer

        func send(_ headers: HPACKHeaders, body: ByteBuffer, timeout: TimeAmount) async throws -> Response {
            let answer = channel.eventLoop.makePromise(of: Response.self)
            let created = channel.eventLoop.makePromise(of: (any Channel).self)
            created.futureResult.whenFailure { answer.fail($0) }
            multiplexer.createStreamChannel(promise: created) { stream in
                stream.eventLoop.makeCompletedFuture {
                    try stream.pipeline.syncOperations.addHandler(
                        ExchangeHandler(headers: headers, body: body, answer: answer, timeout: timeout))
                }
            }
            return try await answer.futureResult.get()
        }
    }
}

/// One request on its own stream: writes it when the stream opens, collects the answer.
private final class ExchangeHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    private let headers: HPACKHeaders
    private let body: ByteBuffer
    private let answer: EventLoopPromise<HTTP2Client.Response>
    private let timeout: TimeAmount
    private var status: Int?
    private var responseHeaders = HPACKHeaders()
    private var responseBody: ByteBuffer?
    private var deadline: Scheduled<Void>?
    private var started = false
    private var done = false

    init(
        headers: HPACKHeaders, body: ByteBuffer, answer: EventLoopPromise<HTTP2Client.Response>, timeout: TimeAmount
    ) {
        self.headers = headers
        self.body = body
        self.answer = answer
        self.timeout = timeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        // The deadline runs from now, whether or not the stream ever opens (a connection whose
        // TLS handshake fails never opens it).
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        deadline = context.eventLoop.scheduleTask(in: timeout) { [self] in
            finish(.failure(HTTP2Client.Failure.timedOut))
            loopBound.value.close(promise: nil)
        }
        if context.channel.isActive { start(context) }
    }

    /// A stream torn down before its answer came: its connection closed, or it never opened.
    func handlerRemoved(context: ChannelHandlerContext) {
        finish(.failure(HTTP2Client.Failure.streamClosed))
    }

    func channelActive(context: ChannelHandlerContext) {
        start(context)
        context.fireChannelActive()
    }

    private func start(_ context: ChannelHandlerContext) {
        guard !started, !done else { return }
        started = true
        let hasBody = body.readableBytes > 0
        context.write(
            wrapOutboundOut(.headers(.init(headers: headers, endStream: !hasBody))), promise: nil)
        if hasBody {
            context.write(wrapOutboundOut(.data(.init(data: .byteBuffer(body), endStream: true))), promise: nil)
        }
        context.flush()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .headers(let frame):
            if status == nil, let code = frame.headers.first(name: ":status").flatMap(Int.init), code >= 200 {
                status = code
                responseHeaders = frame.headers
            }
            if frame.endStream { complete(context) }
        case .data(let frame):
            if case .byteBuffer(var chunk) = frame.data {
                if responseBody == nil {
                    responseBody = chunk
                } else {
                    responseBody?.writeBuffer(&chunk)
                }
            }
            if frame.endStream { complete(context) }
        default:
            break
        }
    }

    private func complete(_ context: ChannelHandlerContext) {
        guard let status else {
            finish(.failure(HTTP2Client.Failure.malformedResponse))
            return
        }
        finish(
            .success(
                HTTP2Client.Response(
                    status: status, headers: responseHeaders,
                    body: responseBody ?? context.channel.allocator.buffer(capacity: 0))))
    }

    func channelInactive(context: ChannelHandlerContext) {
        finish(.failure(HTTP2Client.Failure.streamClosed))
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        finish(.failure(error))
        context.close(promise: nil)
    }

    private func finish(_ result: Result<HTTP2Client.Response, any Error>) {
        guard !done else { return }
        done = true
        deadline?.cancel()
        answer.completeWith(result)
    }
}

extension String {
    /// Whether this is an IPv4 or IPv6 address rather than a host name.
    fileprivate var isIPAddress: Bool {
        (try? SocketAddress(ipAddress: self, port: 0)) != nil
    }
}
