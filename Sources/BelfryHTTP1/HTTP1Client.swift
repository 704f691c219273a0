import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// An HTTP/1.1 client for signed POSTs to one kind of receiver (webhooks): a pool of kept-alive
/// connections per origin, each carrying one request at a time, all on one event loop.
///
/// A request is written whole (head and body, one `write` call) and its answer is the status and
/// headers; the body, which no caller reads, is drained after the answer so that the connection
/// can be used again. The general-purpose client (AsyncHTTPClient) spent about 60 µs of CPU per
/// request on its own machinery (request state machines, a flush of the head before the body,
/// an `URL` parsed per request) and a second `write` per request.
///
/// Redirects are never followed (a 301 would turn a signed POST into a GET elsewhere): a 3xx is
/// the answer.
public final class HTTP1Client: Sendable {
    /// A receiver's answer: its status and headers.
    public struct Response: Sendable {
        public var status: Int
        public var headers: HTTPHeaders
    }

    public enum Failure: Error, CustomStringConvertible, Equatable {
        case invalidURL(String)
        case timedOut
        case connectTimedOut
        /// The connection closed before the whole answer's head came.
        case connectionClosed
        case shutDown
        /// A header that cannot be sent as it is: its name is not a token, or its value holds
        /// a line break or another control character. Nothing was sent.
        case invalidHeader(String)

        public var description: String {
            switch self {
            case .invalidURL(let url): "not an http or https URL (http[s]://host[:port][/path][?query]): \(url)"
            case .invalidHeader(let name):
                "the header \"\(name.prefix(64))\" cannot be sent: a control character, or a name that is not a token"
            case .timedOut: "no answer in time"
            case .connectTimedOut: "the connection took longer than the connect timeout"
            case .connectionClosed: "the connection closed before the answer came"
            case .shutDown: "the client is shut down"
            }
        }
    }

    /// A header name as RFC 9110 §5.6.2 has it: one or more token characters.
    static func isToken(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.allSatisfy(isTokenByte)
    }

    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            true
        default: "!#$%&'*+-.^_`|~".utf8.contains(byte)
        }
    }

    /// A header value with no control character but tab (so no line break to inject another
    /// header or a request); bytes of UTF-8 above ASCII pass, as RFC 9110's obs-text allows.
    static func isFieldValue(_ value: String) -> Bool {
        value.utf8.allSatisfy { ($0 >= 0x20 && $0 != 0x7F) || $0 == 0x09 }
    }

    /// Where requests go, parsed once, not per request.
    public struct Target: Sendable {
        /// The scheme, host and port: what a connection is kept for.
        public var origin: Origin
        /// The `Host` header.
        public var hostHeader: String
        /// The path and query, as the request line carries them.
        public var path: String

        public init(_ url: String) throws(Failure) {
            guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
                scheme == "http" || scheme == "https", let host = components.host, !host.isEmpty,
                components.user == nil, components.password == nil
            else { throw Failure.invalidURL(url) }
            let isTLS = scheme == "https"
            // URLComponents keeps an IPv6 literal's brackets on Linux and drops them elsewhere.
            let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
            let port = components.port ?? (isTLS ? 443 : 80)
            origin = Origin(isTLS: isTLS, host: bare, port: port)
            let named = bare.contains(":") ? "[\(bare)]" : bare
            hostHeader = components.port.map { "\(named):\($0)" } ?? named
            let encodedPath = components.percentEncodedPath
            path =
                (encodedPath.isEmpty ? "/" : encodedPath)
                + (components.percentEncodedQuery.map { "?" + $0 } ?? "")
        }
    }

    /// Where a connection goes.
    public struct Origin: Hashable, Sendable {
        public var isTLS: Bool
        public var host: String
        public var port: Int

        public init(isTLS: Bool, host: String, port: Int) {
            self.isTLS = isTLS
            self.host = host
            self.port = port
        }
    }

    /// The loop every connection runs on: a task running there (``EventLoopTaskExecutor``
    /// of BelfryHTTP2, or ``post(_:to:headers:timeout:)`` called on it) sends and gets its
    /// answer without a hop to another thread.
    public let eventLoop: any EventLoop
    private let pools: NIOLoopBoundBox<Pools>

    /// - Parameters:
    ///   - tls: whom to trust on https.
    ///   - connectionsPerOrigin: connections kept to one origin; requests beyond them wait for
    ///     one to be free.
    ///   - dnsOverride: host names mapped to the addresses to connect to instead (tests).
    public init(
        group: any EventLoopGroup, tls: TLSConfiguration, connectionsPerOrigin: Int,
        connectTimeout: TimeAmount = .seconds(5), idleTimeout: TimeAmount = .seconds(60),
        dnsOverride: [String: String] = [:]
    ) throws {
        var tls = tls
        tls.applicationProtocols = ["http/1.1"]
        let loop = group.next()
        eventLoop = loop
        let settings = Pools.Settings(
            sslContext: try NIOSSLContext(configuration: tls), connectTimeout: connectTimeout,
            idleTimeout: idleTimeout, limit: connectionsPerOrigin, dnsOverride: dnsOverride)
        pools = NIOLoopBoundBox.makeBoxSendingValue(Pools(settings, on: loop), eventLoop: loop)
    }

    /// POSTs `body` to `target` with `headers` besides `Host` and `Content-Length`; the answer's
    /// status and headers, or why there is none within `timeout` (which covers the wait for a
    /// free connection, the connection's opening and the whole answer). A request written on a
    /// kept-alive connection that the receiver had closed meanwhile (the connection ended, or
    /// was reset, before any of the answer came) goes once more on a new connection.
    public func post(
        _ body: ByteBuffer, to target: Target, headers: [(String, String)], timeout: TimeAmount
    ) async throws -> Response {
        var head = HTTPRequestHead(version: .http1_1, method: .POST, uri: target.path)
        head.headers.reserveCapacity(headers.count + 2)
        head.headers.add(name: "Host", value: target.hostHeader)
        for (name, value) in headers {
            guard Self.isToken(name), Self.isFieldValue(value) else { throw Failure.invalidHeader(name) }
            head.headers.add(name: name, value: value)
        }
        head.headers.add(name: "Content-Length", value: String(body.readableBytes))
        let request = OutgoingRequest(head: head, body: body, deadline: .now() + timeout)
        do {
            return try await send(request, to: target.origin)
        } catch Exchange.Stale.stale {
            do {
                return try await send(request, to: target.origin)
            } catch Exchange.Stale.stale {
                throw Failure.connectionClosed
            }
        }
    }

    private func send(_ request: OutgoingRequest, to origin: Origin) async throws -> Response {
        let answer = eventLoop.makePromise(of: Response.self)
        if eventLoop.inEventLoop {
            pools.value.send(request, to: origin, answer: answer)
        } else {
            let pools = self.pools
            eventLoop.execute { pools.value.send(request, to: origin, answer: answer) }
        }
        return try await answer.futureResult.get()
    }

    /// Connections open to each origin, and requests waiting for one.
    public func openConnections() async -> [Origin: Int] {
        (try? await eventLoop.submit { [pools] in pools.value.openCounts }.get()) ?? [:]
    }

    /// Closes every connection; requests waiting or under way fail.
    public func shutdown() async {
        try? await eventLoop.flatSubmit { [pools] in pools.value.shutdown() }.get()
    }
}

/// One request, its head and body as written.
struct OutgoingRequest {
    var head: HTTPRequestHead
    var body: ByteBuffer
    var deadline: NIODeadline
}

/// The pools of every origin: all of it on the client's loop. Each change to a pool is stored
/// before anything is sent: a send may close its connection at once (a reset), and the close
/// changes the pool in turn.
private final class Pools {
    struct Settings {
        let sslContext: NIOSSLContext
        let connectTimeout: TimeAmount
        let idleTimeout: TimeAmount
        let limit: Int
        let dnsOverride: [String: String]
    }

    private let settings: Settings
    private let eventLoop: any EventLoop
    private var pools: [HTTP1Client.Origin: Pool] = [:]
    private var isShutDown = false

    /// One origin's connections: the idle ones (the last used first, so that the others age
    /// out), the open ones, how many are being opened, and the requests waiting for one.
    private struct Pool {
        var idle: [Exchange] = []
        var open: [ObjectIdentifier: Exchange] = [:]
        var opening = 0
        var waiting: CircularBuffer<Waiter> = []

        var count: Int { open.count + opening }
    }

    /// A request waiting for a free connection, failed when its deadline passes first.
    private final class Waiter {
        let request: OutgoingRequest
        let answer: EventLoopPromise<HTTP1Client.Response>
        var timer: Scheduled<Void>?

        init(_ request: OutgoingRequest, _ answer: EventLoopPromise<HTTP1Client.Response>) {
            self.request = request
            self.answer = answer
        }
    }

    init(_ settings: Settings, on eventLoop: any EventLoop) {
        self.settings = settings
        self.eventLoop = eventLoop
    }

    var openCounts: [HTTP1Client.Origin: Int] {
        pools.filter { $0.value.count > 0 }.mapValues(\.count)
    }

    func send(_ request: OutgoingRequest, to origin: HTTP1Client.Origin, answer: EventLoopPromise<HTTP1Client.Response>)
    {
        guard !isShutDown else { return answer.fail(HTTP1Client.Failure.shutDown) }
        var pool = pools[origin, default: Pool()]
        while let exchange = pool.idle.popLast() {
            guard exchange.isUsable else { continue }
            pools[origin] = pool
            return exchange.send(request, answer: answer)
        }
        guard pool.count < settings.limit else {
            let waiter = Waiter(request, answer)
            let loop = NIOLoopBound(self, eventLoop: eventLoop)
            waiter.timer = eventLoop.scheduleTask(deadline: request.deadline) {
                loop.value.expire(waiter, origin: origin)
            }
            pool.waiting.append(waiter)
            pools[origin] = pool
            return
        }
        pool.opening += 1
        pools[origin] = pool
        connect(to: origin, first: (request, answer))
    }

    /// A waiting request whose deadline passed before a connection was free.
    private func expire(_ waiter: Waiter, origin: HTTP1Client.Origin) {
        guard let index = pools[origin]?.waiting.firstIndex(where: { $0 === waiter }) else { return }
        pools[origin]?.waiting.remove(at: index)
        waiter.answer.fail(HTTP1Client.Failure.timedOut)
    }

    /// The next waiting request for `origin`, its timer stopped.
    private func nextWaiting(for origin: HTTP1Client.Origin) -> Waiter? {
        guard let waiter = pools[origin]?.waiting.popFirst() else { return nil }
        waiter.timer?.cancel()
        return waiter
    }

    /// Opens a connection to `origin` and sends `first` on it; a connection that cannot be
    /// opened fails `first` with its error. Each address tried (IPv6 and IPv4 at once, as
    /// happy eyeballs does) gets a handler of its own; the connection that wins is the one
    /// counted.
    private func connect(
        to origin: HTTP1Client.Origin, first: (OutgoingRequest, EventLoopPromise<HTTP1Client.Response>)
    ) {
        let settings = self.settings
        let loop = NIOLoopBound(self, eventLoop: eventLoop)
        // A host name is sent for SNI and checked against the certificate; an IP address is
        // checked against the certificate's addresses.
        let serverHostname = origin.host.isIPAddress ? nil : origin.host
        ClientBootstrap(group: eventLoop)
            .connectTimeout(settings.connectTimeout)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let pipeline = channel.pipeline.syncOperations
                    if origin.isTLS {
                        try pipeline.addHandler(
                            NIOSSLClientHandler(context: settings.sslContext, serverHostname: serverHostname))
                    }
                    // `post` checks the headers itself, in a loop over their bytes: NIO's check
                    // on every write was a twelfth of the client's loop in the webhook benchmark.
                    try pipeline.addHTTPClientHandlers(enableOutboundHeaderValidation: false)
                    try pipeline.addHandler(
                        Exchange(
                            on: channel.eventLoop, idleTimeout: settings.idleTimeout,
                            done: { exchange in loop.value.finished(exchange, origin: origin) },
                            closed: { exchange in loop.value.closed(exchange, origin: origin) }))
                }
            }
            .connect(host: settings.dnsOverride[origin.host] ?? origin.host, port: origin.port)
            .whenComplete { result in
                loop.value.connected(result, to: origin, first: first)
            }
    }

    private func connected(
        _ result: Result<any Channel, any Error>, to origin: HTTP1Client.Origin,
        first: (OutgoingRequest, EventLoopPromise<HTTP1Client.Response>)
    ) {
        pools[origin]?.opening -= 1
        switch result {
        case .success(let channel):
            guard !isShutDown, let exchange = try? channel.pipeline.syncOperations.handler(type: Exchange.self)
            else {
                channel.close(promise: nil)
                first.1.fail(HTTP1Client.Failure.shutDown)
                return
            }
            pools[origin]?.open[ObjectIdentifier(exchange)] = exchange
            exchange.send(first.0, answer: first.1)
        case .failure(let error):
            if case ChannelError.connectTimeout = error {
                first.1.fail(HTTP1Client.Failure.connectTimedOut)
            } else {
                first.1.fail(error)
            }
            openForWaiting(origin)
        }
    }

    /// `exchange` answered and may be used again: the next waiting request goes on it.
    private func finished(_ exchange: Exchange, origin: HTTP1Client.Origin) {
        guard !isShutDown, pools[origin]?.open[ObjectIdentifier(exchange)] != nil else {
            exchange.close()
            return
        }
        if let waiter = nextWaiting(for: origin) {
            exchange.send(waiter.request, answer: waiter.answer)
        } else {
            exchange.becameIdle()
            pools[origin]?.idle.append(exchange)
        }
    }

    /// `exchange` closed: a waiting request gets a new connection.
    private func closed(_ exchange: Exchange, origin: HTTP1Client.Origin) {
        // A connection that lost the race to another address was never counted.
        guard pools[origin]?.open.removeValue(forKey: ObjectIdentifier(exchange)) != nil else { return }
        pools[origin]?.idle.removeAll { $0 === exchange }
        openForWaiting(origin)
    }

    /// Opens a connection for the next waiting request, if there is room.
    private func openForWaiting(_ origin: HTTP1Client.Origin) {
        guard !isShutDown, let pool = pools[origin], pool.count < settings.limit,
            let waiter = nextWaiting(for: origin)
        else { return }
        pools[origin]?.opening += 1
        connect(to: origin, first: (waiter.request, waiter.answer))
    }

    func shutdown() -> EventLoopFuture<Void> {
        isShutDown = true
        let all = pools
        pools = pools.mapValues { pool in
            var emptied = pool
            emptied.waiting.removeAll()
            emptied.idle.removeAll()
            return emptied
        }
        var closing: [EventLoopFuture<Void>] = []
        for pool in all.values {
            for waiter in pool.waiting {
                waiter.timer?.cancel()
                waiter.answer.fail(HTTP1Client.Failure.shutDown)
            }
            closing += pool.open.values.map { $0.close() }
        }
        return EventLoopFuture.andAllComplete(closing, on: eventLoop)
    }
}

/// A connection's requests, one at a time: the request is written, the answer's head answers
/// the caller, and the rest of the answer is read (and dropped) before the connection is free
/// again. A request's timeout covers the whole answer; when it runs out, the connection closes.
final class Exchange: ChannelInboundHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart

    /// Why a request failed on a kept-alive connection before any of its answer came: the
    /// receiver had likely closed it while it was idle. Sent again on a new one.
    enum Stale: Error { case stale }

    /// Answer bodies longer than this are not read to the end: the connection closes instead.
    static let drainLimit = 64 * 1024

    private let eventLoop: any EventLoop
    private let idleTimeout: TimeAmount
    private let done: (Exchange) -> Void
    private let closed: (Exchange) -> Void
    private var context: ChannelHandlerContext?
    private var current: Current?
    /// When the connection, idle since its last answer, closes.
    private var idleUntil: NIODeadline?
    /// One timer for the request's deadline and the idle close, set for the earlier. A task
    /// scheduled for each and cancelled as the answer came (or the next request) cost two
    /// searches of the loop's queue of scheduled tasks a request.
    private var timer: (at: NIODeadline, task: Scheduled<Void>)?
    /// Requests answered on this connection.
    private var answered = 0

    private struct Current {
        var answer: EventLoopPromise<HTTP1Client.Response>?
        var deadline: NIODeadline
        var keepAlive = true
        var drained = 0
    }

    init(
        on eventLoop: any EventLoop, idleTimeout: TimeAmount, done: @escaping (Exchange) -> Void,
        closed: @escaping (Exchange) -> Void
    ) {
        self.eventLoop = eventLoop
        self.idleTimeout = idleTimeout
        self.done = done
        self.closed = closed
    }

    var isUsable: Bool { context?.channel.isActive == true && current == nil }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func send(_ request: OutgoingRequest, answer: EventLoopPromise<HTTP1Client.Response>) {
        guard let context, context.channel.isActive else {
            return answer.fail(answered > 0 ? Stale.stale : HTTP1Client.Failure.connectionClosed)
        }
        idleUntil = nil
        current = Current(answer: answer, deadline: request.deadline)
        setTimer(for: request.deadline)
        // Head and body go out together, in one `write` call.
        context.write(wrapOutboundOut(.head(request.head)), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(request.body))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }

    /// Waits for the next request; closed if none comes within the idle timeout.
    func becameIdle() {
        let until = NIODeadline.now() + idleTimeout
        idleUntil = until
        setTimer(for: until)
    }

    /// Sets the timer for `deadline` unless it is set for one as early already.
    private func setTimer(for deadline: NIODeadline) {
        if let timer {
            guard deadline < timer.at else { return }
            timer.task.cancel()
        }
        let bound = NIOLoopBound(self, eventLoop: eventLoop)
        timer = (deadline, eventLoop.scheduleTask(deadline: deadline) { bound.value.timerFired() })
    }

    /// Fails the request whose deadline passed, or closes the connection idle for too long;
    /// else sets the timer again for what is due next.
    private func timerFired() {
        timer = nil
        let now = NIODeadline.now()
        if let current {
            if current.deadline <= now { return timedOut() }
            setTimer(for: current.deadline)
        } else if let idleUntil {
            if idleUntil <= now {
                close()
                return
            }
            setTimer(for: idleUntil)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard var current else { return }
        switch unwrapInboundIn(data) {
        case .head(let head):
            current.keepAlive = head.isKeepAlive
            current.answer?.succeed(HTTP1Client.Response(status: Int(head.status.code), headers: head.headers))
            current.answer = nil
            self.current = current
        case .body(let part):
            current.drained += part.readableBytes
            self.current = current
            if current.drained > Self.drainLimit { context.close(promise: nil) }
        case .end:
            self.current = nil
            answered += 1
            if current.keepAlive { done(self) } else { context.close(promise: nil) }
        }
    }

    private func timedOut() {
        fail(HTTP1Client.Failure.timedOut, mayBeStale: false)
        context?.close(promise: nil)
    }

    @discardableResult
    func close() -> EventLoopFuture<Void> {
        guard let context else { return eventLoop.makeSucceededVoidFuture() }
        let closing = eventLoop.makePromise(of: Void.self)
        context.close(promise: closing)
        return closing.futureResult.recover { _ in }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A reset or a broken pipe may be a kept-alive connection the receiver closed; an
        // answer that could not be parsed, or a TLS failure, is not.
        fail(error, mayBeStale: error is IOError)
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        fail(HTTP1Client.Failure.connectionClosed, mayBeStale: true)
        timer?.task.cancel()
        timer = nil
        idleUntil = nil
        closed(self)
        context.fireChannelInactive()
    }

    /// Fails the request under way; as stale when the connection was used before, nothing of
    /// the answer came, and the failure is the connection's end.
    private func fail(_ error: any Error, mayBeStale: Bool) {
        guard let current else { return }
        self.current = nil
        guard let answer = current.answer else { return }
        answer.fail(mayBeStale && answered > 0 ? Stale.stale : error)
    }
}

extension String {
    /// Whether this is an IPv4 or IPv6 address rather than a host name.
    fileprivate var isIPAddress: Bool {
        (try? SocketAddress(ipAddress: self, port: 0)) != nil
    }
}
