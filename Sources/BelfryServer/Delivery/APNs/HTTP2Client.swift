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
        case connectTimedOut
        case connectionClosed
        case streamClosed
        case malformedResponse
        case shutDown

        var description: String {
            switch self {
            case .invalidURL(let url): "not an https URL without query (https://host[:port][/path]): \(url)"
            case .timedOut: "no answer in time"
            case .connectTimedOut: "the connection (TCP, TLS and HTTP/2 settings) took longer than the connect timeout"
            case .connectionClosed: "the server closed the connection before it was ready"
            case .streamClosed: "the connection closed before the answer came"
            case .malformedResponse: "the answer has no valid :status"
            case .shutDown: "the client is shut down"
            }
        }
    }

    /// Where requests go: `https://host[:port][/prefix]`, parsed once, not per request.
    struct Origin: Hashable, Sendable {
        var host: String
        var port: Int
        /// The `:authority` pseudo-header.
        var authority: String
        /// Put before every request's path (a proxy's mount point); usually empty.
        var pathPrefix: String

        init(_ url: String) throws(Failure) {
            guard let components = URLComponents(string: url), components.scheme == "https",
                let host = components.host, !host.isEmpty, components.query == nil, components.fragment == nil
            else { throw Failure.invalidURL(url) }
            self.host = host
            port = components.port ?? 443
            authority = components.port.map { "\(host):\($0)" } ?? host
            var prefix = components.percentEncodedPath
            while prefix.hasSuffix("/") { prefix.removeLast() }
            pathPrefix = prefix
        }

        /// The host and port: where a connection goes.
        fileprivate var server: Server { Server(host: host, port: port) }
    }

    fileprivate struct Server: Hashable, Sendable {
        var host: String
        var port: Int
    }

    /// Every connection's loop: a task running on it (``EventLoopTaskExecutor``) sends and gets
    /// its answer without leaving it.
    let eventLoop: any EventLoop
    private let sslContext: NIOSSLContext
    private let connectTimeout: TimeAmount
    private let state = NIOLockedValueBox(State())

    private struct State {
        var connections: [Server: Slot] = [:]
        var shutDown = false
    }

    /// A connection being opened, or open: an open one is taken without waiting on a future,
    /// which would hop to its event loop and back for every request.
    private enum Slot {
        case opening(EventLoopFuture<Connection>)
        case open(Connection)
    }

    init(group: any EventLoopGroup, extraCertificatesPEM: String?, connectTimeout: TimeAmount = .seconds(5)) throws {
        var tls = try TLSConfiguration.outbound(extraCertificatesPEM: extraCertificatesPEM)
        tls.applicationProtocols = ["h2"]
        eventLoop = group.next()
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
        fields.add(name: ":path", value: origin.pathPrefix + path)
        for (name, value) in headers { fields.add(name: name, value: value) }
        fields.add(name: "content-length", value: String(body.readableBytes))

        let connection = try await connection(to: origin.server)
        return try await connection.send(fields, body: body, timeout: timeout)
    }

    /// The connections open and in use.
    var openChannels: [any Channel] {
        state.withLockedValue { state in
            state.connections.values.compactMap { slot in
                if case .open(let connection) = slot { connection.channel } else { nil }
            }
        }
    }

    func shutdown() async {
        let slots = state.withLockedValue { state in
            state.shutDown = true
            defer { state.connections = [:] }
            return Array(state.connections.values)
        }
        for slot in slots {
            switch slot {
            case .opening(let future): try? await future.get().channel.close()
            case .open(let connection): try? await connection.channel.close()
            }
        }
    }

    /// The open connection to `origin`, or a new one (one attempt at a time per origin).
    private func connection(to origin: Server) async throws -> Connection {
        let (slot, opened) = try state.withLockedValue { state -> (Slot, EventLoopPromise<Connection>?) in
            guard !state.shutDown else { throw Failure.shutDown }
            if let existing = state.connections[origin] { return (existing, nil) }
            let opened = eventLoop.makePromise(of: Connection.self)
            state.connections[origin] = .opening(opened.futureResult)
            return (.opening(opened.futureResult), opened)
        }
        // Opened outside the lock: a connection that fails at once closes through the watcher,
        // which takes the lock to retire it.
        if let opened { connect(to: origin, fulfilling: opened) }
        let future: EventLoopFuture<Connection>
        switch slot {
        case .open(let connection):
            if connection.channel.isActive { return connection }
            // Closed, and the close not yet seen: a new connection.
            retire(origin, channel: connection.channel)
            return try await self.connection(to: origin)
        case .opening(let opening): future = opening
        }
        do {
            return try await future.get()
        } catch {
            forget(origin, future)
            throw error
        }
    }

    /// Forgets a connection that could not be opened.
    private func forget(_ origin: Server, _ future: EventLoopFuture<Connection>) {
        state.withLockedValue { state in
            if case .opening(let opening) = state.connections[origin], opening === future {
                state.connections[origin] = nil
            }
        }
    }

    /// Takes the connection `channel` out of use (it closed, or the server sent GOAWAY): the
    /// next request opens a new one, while the streams under way on it finish.
    fileprivate func retire(_ origin: Server, channel: any Channel) {
        state.withLockedValue { state in
            if case .open(let connection) = state.connections[origin], connection.channel === channel {
                state.connections[origin] = nil
            }
        }
    }

    /// Opens a connection: TCP, the TLS handshake and the server's first SETTINGS, all within
    /// the connect timeout. Only then is it used; a handshake that fails fails the requests
    /// waiting for it with its own error.
    private func connect(to origin: Server, fulfilling opened: EventLoopPromise<Connection>) {
        let sslContext = self.sslContext
        let connectTimeout = self.connectTimeout
        // A host name is sent for SNI and checked against the certificate; an IP address is
        // checked against the certificate's addresses.
        let serverHostname = origin.host.isIPAddress ? nil : origin.host
        // The whole pipeline is in place before the socket connects, so that the watcher sees a
        // handshake error however early it comes.
        let future = ClientBootstrap(group: eventLoop)
            .connectTimeout(connectTimeout)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { [weak self] channel in
                channel.eventLoop.makeCompletedFuture {
                    let pipeline = channel.pipeline.syncOperations
                    try pipeline.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: serverHostname))
                    try pipeline.addHandler(FlushCoalescer())
                    _ = try pipeline.configureHTTP2Pipeline(
                        mode: .client,
                        connectionConfiguration: .init(),
                        streamConfiguration: .init(),
                        inboundStreamInitializer: { stream in
                            // Servers do not open streams to clients (no server push here).
                            stream.close()
                        }
                    )
                    try pipeline.addHandler(
                        ConnectionWatcher(ready: channel.eventLoop.makePromise()) {
                            self?.retire(origin, channel: channel)
                        })
                }
            }
            .connect(host: origin.host, port: origin.port)
            .flatMap { channel in
                channel.eventLoop.makeCompletedFuture { () throws -> (Connection, EventLoopFuture<Void>) in
                    let pipeline = channel.pipeline.syncOperations
                    let watcher = try pipeline.handler(type: ConnectionWatcher.self)
                    let multiplexer = try pipeline.handler(type: NIOHTTP2Handler.self).syncMultiplexer()
                    return (Connection(channel: channel, multiplexer: multiplexer), watcher.ready.futureResult)
                }.flatMap { (connection: Connection, ready: EventLoopFuture<Void>) -> EventLoopFuture<Connection> in
                    let deadline = channel.eventLoop.scheduleTask(in: connectTimeout) {
                        channel.close(promise: nil)
                    }
                    ready.whenComplete { _ in deadline.cancel() }
                    return ready.map { connection }
                }.flatMapErrorThrowing { error -> Connection in
                    channel.close(promise: nil)
                    throw error
                }
            }
        future.whenSuccess { [weak self] connection in
            self?.state.withLockedValue { state in
                if case .opening(let opening) = state.connections[origin], opening === opened.futureResult {
                    state.connections[origin] = .open(connection)
                }
            }
            connection.channel.closeFuture.whenComplete { [weak self] _ in
                self?.retire(origin, channel: connection.channel)
            }
        }
        future.cascade(to: opened)
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

/// Watches a connection's own frames (stream 0): the server's first SETTINGS make it ready, and
/// GOAWAY takes it out of use. An error before it is ready (a TLS certificate refused) fails
/// the connection with that error. A close begun here (a request's timeout) takes it out of use
/// at once: the TLS goodbye keeps it active a while, and a request given it then failed with
/// "I/O on closed channel".
private final class ConnectionWatcher: ChannelDuplexHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundIn = HTTP2Frame

    /// Succeeds with the server's first SETTINGS; fails with the first error, or the close.
    let ready: EventLoopPromise<Void>
    /// Takes the connection out of use.
    private let retire: () -> Void
    private var isReady = false

    init(ready: EventLoopPromise<Void>, retire: @escaping () -> Void) {
        self.ready = ready
        self.retire = retire
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data).payload {
        case .settings(.settings):
            if !isReady {
                isReady = true
                ready.succeed()
            }
        case .goAway:
            retire()
        default:
            break
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if !isReady { ready.fail(error) }
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !isReady { ready.fail(HTTP2Client.Failure.connectionClosed) }
        context.fireChannelInactive()
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        retire()
        context.close(mode: mode, promise: promise)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        // The connect timeout closes a connection that never got ready.
        if !isReady { ready.fail(HTTP2Client.Failure.connectTimedOut) }
    }
}

/// Joins the flushes of requests written together: each request's stream flushes when written,
/// and without this every push was its own TLS record and `write` call. A flush waits for the
/// work already queued on the loop (other requests being written), but at most four requests
/// wait: with more, client and server took turns, each idle while the other worked through a
/// batch (`belfry-bench apns` with 16 in flight: 0.6 of h2load's rate when all 16 could wait,
/// 1.15 with four).
private final class FlushCoalescer: ChannelOutboundHandler {
    typealias OutboundIn = ByteBuffer

    private static let maxWaiting = 4
    private var waiting = 0

    func flush(context: ChannelHandlerContext) {
        waiting += 1
        if waiting == Self.maxWaiting {
            waiting = 0
            context.flush()
        } else if waiting == 1 {
            context.eventLoop.assumeIsolated().execute {
                guard self.waiting > 0 else { return }
                self.waiting = 0
                context.flush()
            }
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        waiting = 0  // the connection closed: nothing left to flush
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
        let loopBound = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
        deadline = context.eventLoop.scheduleTask(in: timeout) {
            loopBound.value.handler.timedOut(loopBound.value.context)
        }
        if context.channel.isActive { start(context) }
    }

    /// No answer in that long means the connection is likely dead (a firewall dropped it, the
    /// server hangs): it is closed before the request fails, so the next request opens a new
    /// one. Its other streams fail and are retried.
    private func timedOut(_ context: ChannelHandlerContext) {
        guard !done else { return }
        done = true  // the closes below must not answer first, with a closed stream
        context.channel.parent?.close(promise: nil)
        context.close(promise: nil)
        answer.fail(HTTP2Client.Failure.timedOut)
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
