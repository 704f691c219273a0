import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL

/// An HTTP/2-only client over TLS for push services (APNs now): one long-lived connection per
/// origin, every request a stream on it.
///
/// A request is a HEADERS and a DATA frame on a stream id of its own, written by the
/// connection's one handler, which collects the answer by that id (``ConnectionHandler``). The
/// general-purpose client (AsyncHTTPClient) spent about 100 µs of CPU per push on its
/// per-request machinery (request state machines, header validation, an HTTP/1-shaped layer
/// over the stream), five times what the server took to answer it.
public final class HTTP2Client: Sendable {
    public struct Response: Sendable {
        public var status: Int
        public var headers: HPACKHeaders
        public var body: ByteBuffer
    }

    public enum Failure: Error, CustomStringConvertible {
        case invalidURL(String)
        case timedOut
        case connectTimedOut
        case connectionClosed
        case streamClosed
        case malformedResponse
        case shutDown

        public var description: String {
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
    public struct Origin: Hashable, Sendable {
        public var host: String
        public var port: Int
        /// The `:authority` pseudo-header.
        public var authority: String
        /// Put before every request's path (a proxy's mount point); usually empty.
        public var pathPrefix: String

        public init(_ url: String) throws(Failure) {
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
    public let eventLoop: any EventLoop
    private let sslContext: NIOSSLContext
    private let connectTimeout: TimeAmount
    private let unindexed: [String]
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

    /// `tls` says whom to trust; the client offers only `h2`.
    ///
    /// `unindexed` names the headers (`:path` among them) whose values are new in nearly every
    /// request, as an APNs device token and push id are. They are written as literals, outside
    /// HPACK's dynamic table: entered there, each pushed out the entries that do repeat (the
    /// provider token), and every lookup walked a table of entries never used again.
    public init(
        group: any EventLoopGroup, tls: TLSConfiguration, connectTimeout: TimeAmount = .seconds(5),
        unindexed: [String] = []
    ) throws {
        var tls = tls
        tls.applicationProtocols = ["h2"]
        eventLoop = group.next()
        sslContext = try NIOSSLContext(configuration: tls)
        self.connectTimeout = connectTimeout
        self.unindexed = unindexed
    }

    /// POSTs `body` to `path` (with its query, if any) at `origin`, with `headers` (lower-case
    /// names).
    public func post(
        _ path: String, at origin: Origin, headers: [(String, String)], body: ByteBuffer, timeout: TimeAmount
    ) async throws -> Response {
        var fields = HPACKHeaders()
        fields.reserveCapacity(5 + headers.count)
        fields.add(name: ":method", value: "POST")
        fields.add(name: ":scheme", value: "https")
        fields.add(name: ":authority", value: origin.authority)
        fields.add(name: ":path", value: origin.pathPrefix + path, indexing: indexing(":path"))
        for (name, value) in headers { fields.add(name: name, value: value, indexing: indexing(name)) }
        fields.add(name: "content-length", value: String(body.readableBytes))

        let connection = try await connection(to: origin.server)
        return try await connection.send(fields, body: body, timeout: timeout)
    }

    private func indexing(_ name: String) -> HPACKIndexing {
        unindexed.contains(name) ? .nonIndexable : .indexable
    }

    /// The connections open and in use.
    public var openChannels: [any Channel] {
        state.withLockedValue { state in
            state.connections.values.compactMap { slot in
                if case .open(let connection) = slot { connection.channel } else { nil }
            }
        }
    }

    public func shutdown() async {
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
        // Opened outside the lock: a connection that fails at once closes through its handler,
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
        // The whole pipeline is in place before the socket connects, so that the connection's
        // handler sees a handshake error however early it comes.
        let future = ClientBootstrap(group: eventLoop)
            .connectTimeout(connectTimeout)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { [weak self] channel in
                channel.eventLoop.makeCompletedFuture {
                    let pipeline = channel.pipeline.syncOperations
                    try pipeline.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: serverHostname))
                    try pipeline.addHandler(FlushCoalescer())
                    try pipeline.addHandler(NIOHTTP2Handler(mode: .client))
                    try pipeline.addHandler(
                        ConnectionHandler(ready: channel.eventLoop.makePromise()) {
                            self?.retire(origin, channel: channel)
                        })
                }
            }
            .connect(host: origin.host, port: origin.port)
            .flatMap { channel in
                channel.eventLoop.makeCompletedFuture { () throws -> (Connection, EventLoopFuture<Void>) in
                    let handler = try channel.pipeline.syncOperations.handler(type: ConnectionHandler.self)
                    let connection = Connection(
                        channel: channel, handler: NIOLoopBound(handler, eventLoop: channel.eventLoop))
                    return (connection, handler.ready.futureResult)
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
        let handler: NIOLoopBound<ConnectionHandler>

        func send(_ headers: HPACKHeaders, body: ByteBuffer, timeout: TimeAmount) async throws -> Response {
            let answer = channel.eventLoop.makePromise(of: Response.self)
            if channel.eventLoop.inEventLoop {
                handler.value.send(headers, body: body, timeout: timeout, answer: answer)
            } else {
                let handler = self.handler
                channel.eventLoop.execute { handler.value.send(headers, body: body, timeout: timeout, answer: answer) }
            }
            return try await answer.futureResult.get()
        }
    }
}

/// A connection's requests, written as frames on the connection itself: a request is a HEADERS
/// and a DATA frame on a stream id of its own, and its answer is collected here by that id.
/// A channel per stream, as swift-nio-http2's multiplexer makes, cost a third of the client's
/// time in a profile, much of it reference counting.
///
/// The server's first SETTINGS make the connection ready; an error before that (a TLS
/// certificate refused) fails the connection with that error. GOAWAY takes it out of use, and
/// so does a close begun here (a request's timeout) at once: the TLS goodbye keeps it active a
/// while, and a request given it then failed with "I/O on closed channel". The handler returns
/// the flow-control credit of the answers it reads, which the multiplexer did before.
///
/// Requests beyond the streams the server allows at once (its SETTINGS_MAX_CONCURRENT_STREAMS)
/// wait here, in order, and are written as answers end. NIOHTTP2 would hold them too, but it
/// walks every stream it holds on every flush: with 300 held, that walk was a tenth of the APNs
/// loop's time (`scripts/benchmark_push_queue.py`).
private final class ConnectionHandler: ChannelDuplexHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    /// Succeeds with the server's first SETTINGS; fails with the first error, or the close.
    let ready: EventLoopPromise<Void>
    /// Takes the connection out of use.
    private let retire: () -> Void
    private var isReady = false
    private var context: ChannelHandlerContext?
    private var nextStreamID = HTTP2StreamID(1)
    /// Set by GOAWAY, or when stream ids run out: no new request is written here.
    private var goingAway = false
    /// Streams whose answers used half their window, owed credit at the end of this read.
    private var streamsOwedCredit: [HTTP2StreamID] = []
    private var exchanges: [HTTP2StreamID: Exchange] = [:]
    /// Requests not yet written, in the order sent: their stream ids, which rise in that order.
    private var waiting = CircularBuffer<HTTP2StreamID>()
    /// Streams written and not yet ended.
    private var openStreams = 0
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS; NIOHTTP2 assumes 100 until it says.
    private var maxStreams = 100
    /// Answer bytes read and not yet given back to the server as connection window.
    private var unreturnedCredit = 0
    /// One timer for every request's timeout, set for the earliest deadline among them. A
    /// scheduled task for each request, cancelled as its answer came, was 1.5 % of the APNs
    /// benchmark's samples: the cancel searches the loop's queue of scheduled tasks.
    private var timer: (at: NIODeadline, task: Scheduled<Void>)?

    /// One request under way.
    private struct Exchange {
        var answer: EventLoopPromise<HTTP2Client.Response>
        var deadline: NIODeadline
        /// The request's frames while it waits for a stream.
        var request: (headers: HPACKHeaders, body: ByteBuffer)?
        var status: Int?
        var headers = HPACKHeaders()
        var body: ByteBuffer?
        /// Answer bytes read on this stream and not yet given back as stream window.
        var unreturnedCredit = 0
    }

    /// Half of the default window (65 535 bytes): credit is given back once this much is read.
    private static let creditThreshold = 32_768

    init(ready: EventLoopPromise<Void>, retire: @escaping () -> Void) {
        self.ready = ready
        self.retire = retire
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    /// Sends a request on a new stream, at once if the server allows one more, else when one
    /// ends; `answer` gets its response or why there is none. The timeout counts from now.
    func send(
        _ headers: HPACKHeaders, body: ByteBuffer, timeout: TimeAmount, answer: EventLoopPromise<HTTP2Client.Response>
    ) {
        guard let context, context.channel.isActive, !goingAway else {
            answer.fail(HTTP2Client.Failure.streamClosed)
            return
        }
        let id = nextStreamID
        if Int(id) > Int(Int32.max) - 2 {
            // The last id a client may use (after 2³⁰ requests): the next request opens a new
            // connection.
            goingAway = true
            retire()
        } else {
            nextStreamID = HTTP2StreamID(Int(id) + 2)
        }
        let deadline = NIODeadline.now() + timeout
        exchanges[id] = Exchange(answer: answer, deadline: deadline, request: (headers, body))
        setTimer(for: deadline, context: context)
        waiting.append(id)
        if writeWaiting(context: context) { context.flush() }
    }

    /// Writes the waiting requests the server has streams for; the caller flushes them.
    /// - Returns: whether it wrote any.
    private func writeWaiting(context: ChannelHandlerContext) -> Bool {
        var wrote = false
        while openStreams < maxStreams, let id = waiting.popFirst() {
            // A request that timed out while waiting is gone.
            guard let request = exchanges[id]?.request else { continue }
            exchanges[id]?.request = nil
            openStreams += 1
            wrote = true
            let hasBody = request.body.readableBytes > 0
            let written = context.eventLoop.makePromise(of: Void.self)
            written.futureResult.assumeIsolated().whenFailure { error in self.finish(id, .failure(error)) }
            context.write(
                wrapOutboundOut(
                    HTTP2Frame(streamID: id, payload: .headers(.init(headers: request.headers, endStream: !hasBody)))),
                promise: hasBody ? nil : written)
            if hasBody {
                context.write(
                    wrapOutboundOut(
                        HTTP2Frame(
                            streamID: id, payload: .data(.init(data: .byteBuffer(request.body), endStream: true)))
                    ),
                    promise: written)
            }
        }
        return wrote
    }

    /// Sets the timer for `deadline` unless it is set for one as early already.
    private func setTimer(for deadline: NIODeadline, context: ChannelHandlerContext) {
        if let timer {
            guard deadline < timer.at else { return }
            timer.task.cancel()
        }
        let loopBound = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
        let task = context.eventLoop.scheduleTask(deadline: deadline) {
            loopBound.value.handler.timerFired(context: loopBound.value.context)
        }
        timer = (deadline, task)
    }

    /// Times out the requests whose deadline has passed, and sets the timer for the earliest
    /// of the others. Answered requests leave the timer as it is: it may fire for none.
    private func timerFired(context: ChannelHandlerContext) {
        timer = nil
        let now = NIODeadline.now()
        for id in exchanges.keys.sorted() where exchanges[id].map({ $0.deadline <= now }) == true {
            timedOut(id, context: context)
        }
        if let next = exchanges.values.lazy.map(\.deadline).min() { setTimer(for: next, context: context) }
    }

    /// No answer in that long means the connection is likely dead (a firewall dropped it, the
    /// server hangs): it is closed before the request fails, so the next request opens a new
    /// one. Its other requests fail and are retried.
    private func timedOut(_ id: HTTP2StreamID, context: ChannelHandlerContext) {
        guard let exchange = remove(id) else { return }
        // Out of use before the close begins: `context.close` starts below this handler.
        retire()
        context.close(promise: nil)
        exchange.answer.fail(HTTP2Client.Failure.timedOut)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .settings(.settings(let settings)):
            for setting in settings where setting.parameter == .maxConcurrentStreams {
                maxStreams = setting.value
            }
            if !isReady {
                isReady = true
                ready.succeed()
            }
        case .goAway(let lastStreamID, _, _):
            goingAway = true
            retire()
            // Streams the server will not process fail now; the others may still be answered.
            for id in exchanges.keys where id > lastStreamID {
                finish(id, .failure(HTTP2Client.Failure.streamClosed))
            }
        case .headers(let headers):
            guard var exchange = exchanges[frame.streamID] else { return }
            if exchange.status == nil, let code = headers.headers.first(name: ":status").flatMap(Int.init), code >= 200
            {
                exchange.status = code
                exchange.headers = headers.headers
            }
            exchanges[frame.streamID] = exchange
            if headers.endStream { complete(frame.streamID, context: context) }
        case .data(let data):
            let length = data.data.readableBytes + (data.paddingBytes.map { $0 + 1 } ?? 0)
            unreturnedCredit += length
            guard var exchange = exchanges[frame.streamID] else { return }
            if !data.endStream {
                exchange.unreturnedCredit += length
                if exchange.unreturnedCredit >= Self.creditThreshold { streamsOwedCredit.append(frame.streamID) }
            }
            if case .byteBuffer(var chunk) = data.data {
                if exchange.body == nil {
                    exchange.body = chunk
                } else {
                    exchange.body?.writeBuffer(&chunk)
                }
            }
            exchanges[frame.streamID] = exchange
            if data.endStream { complete(frame.streamID, context: context) }
        case .rstStream:
            finish(frame.streamID, .failure(HTTP2Client.Failure.streamClosed))
        default:
            break
        }
    }

    /// Gives the server back the window the answers read used: the connection's once half of
    /// it is used, and a stream's likewise while the stream goes on. Written once the read is
    /// over: a write here delivers the handler's pending stream-closed events, which must not
    /// come before the answers read with them.
    func channelReadComplete(context: ChannelHandlerContext) {
        var wrote = false
        func giveBack(_ credit: Int, on id: HTTP2StreamID) {
            context.write(
                wrapOutboundOut(HTTP2Frame(streamID: id, payload: .windowUpdate(windowSizeIncrement: credit))),
                promise: nil)
            wrote = true
        }
        if unreturnedCredit >= Self.creditThreshold {
            giveBack(unreturnedCredit, on: .rootStream)
            unreturnedCredit = 0
        }
        for id in streamsOwedCredit {
            guard let credit = exchanges[id]?.unreturnedCredit, credit > 0 else { continue }
            giveBack(credit, on: id)
            exchanges[id]?.unreturnedCredit = 0
        }
        streamsOwedCredit.removeAll(keepingCapacity: true)
        // Requests waiting take the streams the answers just read ended (here, not as each
        // ends, for the reason above), flushed with the credit.
        if context.channel.isActive, writeWaiting(context: context) { wrote = true }
        if wrote { context.flush() }
        context.fireChannelReadComplete()
    }

    private func complete(_ id: HTTP2StreamID, context: ChannelHandlerContext) {
        guard let exchange = exchanges[id] else { return }
        guard let status = exchange.status else {
            finish(id, .failure(HTTP2Client.Failure.malformedResponse))
            return
        }
        finish(
            id,
            .success(
                HTTP2Client.Response(
                    status: status, headers: exchange.headers,
                    body: exchange.body ?? context.channel.allocator.buffer(capacity: 0))))
    }

    private func finish(_ id: HTTP2StreamID, _ result: Result<HTTP2Client.Response, any Error>) {
        guard let exchange = remove(id) else { return }
        exchange.answer.completeWith(result)
    }

    /// A request taken out, its stream no longer counted if it was written.
    private func remove(_ id: HTTP2StreamID) -> Exchange? {
        guard let exchange = exchanges.removeValue(forKey: id) else { return nil }
        if exchange.request == nil { openStreams -= 1 }
        return exchange
    }

    /// Fails every request under way.
    private func failAll(_ error: any Error) {
        for id in Array(exchanges.keys) { finish(id, .failure(error)) }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // A stream closed without its answer (reset, or the server ended it early).
        if let closed = event as? StreamClosedEvent {
            finish(closed.streamID, .failure(HTTP2Client.Failure.streamClosed))
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // One stream's error (a request the server's GOAWAY came too late for) fails that
        // request through its write; the connection's other streams go on.
        if isReady, error is NIOHTTP2Errors.StreamError || error is NIOHTTP2Errors.CreatedStreamAfterGoaway {
            return
        }
        if !isReady { ready.fail(error) }
        retire()
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !isReady { ready.fail(HTTP2Client.Failure.connectionClosed) }
        failAll(HTTP2Client.Failure.streamClosed)
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        // The connect timeout closes a connection that never got ready.
        if !isReady { ready.fail(HTTP2Client.Failure.connectTimedOut) }
        failAll(HTTP2Client.Failure.streamClosed)
        timer?.task.cancel()
        timer = nil
        self.context = nil
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        retire()
        context.close(mode: mode, promise: promise)
    }
}

/// Joins the flushes of requests written together: each request is flushed when written, and
/// without this every push was its own TLS record and `write` call. A flush waits for the
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

extension String {
    /// Whether this is an IPv4 or IPv6 address rather than a host name.
    fileprivate var isIPAddress: Bool {
        (try? SocketAddress(ipAddress: self, port: 0)) != nil
    }
}
