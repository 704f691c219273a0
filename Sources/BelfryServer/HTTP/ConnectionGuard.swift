import Foundation
import NIOConcurrencyHelpers
import NIOCore
import Vapor

#if canImport(Glibc)
    import Glibc
#endif

/// Closes the connections a client holds without finishing a request, which the HTTP server's
/// idle timeout alone cannot: a request head sent a byte at a time resets that timeout with each
/// byte. Once a second it looks at the server's open connections (Linux: the process's sockets
/// and how long ago each last received data) and closes:
/// - a connection that has been sending a request head, not yet complete, for longer than the
///   request deadline (counted from the first sweep that saw data come after the connection
///   opened or its last answer went out): it gets a 408 with `Connection: close`;
/// - a connection whose request got a 408 (its body did not come in time), once answered;
/// - the newest idle connections of one client address beyond `perAddress`.
///
/// It learns from the middleware (``ConnectionGuardMiddleware``, outermost) which connections
/// have a request under way, or a streamed answer (never closed here), and when each answer
/// went out. A connection is closed by `shutdown(2)` of a duplicate of its descriptor, checked
/// to be the same socket: the server notices its end as the client's.
final class ConnectionGuard: Sendable {
    /// A connection, as its socket and its requests' `remoteAddress` both name it.
    struct Peer: Hashable, Sendable {
        /// The address's bytes: 4 for IPv4 (an IPv4-mapped IPv6 address too), else 16.
        var address: [UInt8]
        var port: Int
    }

    /// Why a connection is closed.
    enum Reason: Equatable, Sendable {
        case slowHead, answeredTimeout, overCap
    }

    /// An open connection as the sweep saw it. Times are seconds on the monotonic clock
    /// (``now()``), which the wall clock's steps do not move.
    struct Open: Sendable {
        /// When its `TCP_INFO` was read.
        var sampledAt: TimeInterval
        /// Seconds before `sampledAt` it last received data (since it opened, if none came).
        var sinceData: TimeInterval
        /// Seconds before `sampledAt` it last sent data (since it opened, if none went).
        var sinceSent: TimeInterval = .infinity
        /// Bytes it received, all told (0 where the system does not say).
        var bytesReceived: UInt64 = 0
        /// Bytes written and not yet acknowledged: an answer still going out.
        var sendQueue = 0
        var descriptor: Int32 = -1
        var inode: UInt64 = 0

        var lastData: TimeInterval { sampledAt - sinceData }
        var lastSent: TimeInterval { sampledAt - sinceSent }

        /// Nothing going out and nothing sent for a second: no answer is being written.
        var quiet: Bool { sendQueue == 0 && sinceSent >= 1 }
    }

    private struct Tracked {
        var firstSeen: TimeInterval
        /// The socket's inode once a sweep saw it: another one on the same peer is a new connection.
        var inode: UInt64 = 0
        /// Sweeps in a row that did not list it; forgotten after three.
        var missed = 0
        var busy = 0
        var streaming = false
        var answeredAt: TimeInterval?
        /// When a sweep first saw a request head under way: data after the last answer (or any,
        /// before the first) and no request started since.
        var headSince: TimeInterval?
        var closeRequested = false

        var idle: Bool { busy == 0 && !streaming }
    }

    private struct Sweeper {
        var task: Task<Void, Never>?
        var stopped = false
    }

    let headDeadline: TimeInterval
    /// Connections one address may hold; 0: no cap.
    let perAddress: Int
    private let tracked = NIOLockedValueBox<[Peer: Tracked]>([:])
    private let sweeper = NIOLockedValueBox(Sweeper())
    private let logger: Logger

    init(headDeadline: TimeInterval, perAddress: Int, logger: Logger) {
        self.headDeadline = headDeadline
        self.perAddress = perAddress
        self.logger = logger
    }

    /// Whether this platform lets the guard see and close connections.
    static var isAvailable: Bool {
        #if os(Linux)
            true
        #else
            false
        #endif
    }

    /// Seconds on the monotonic clock.
    static func now() -> TimeInterval {
        TimeInterval(NIODeadline.now().uptimeNanoseconds) / 1_000_000_000
    }

    /// A request's head came in on `peer`'s connection (after any stream it answered ended).
    func started(_ peer: Peer, now: TimeInterval = ConnectionGuard.now()) {
        tracked.withLockedValue { tracked in
            var entry = tracked[peer, default: Tracked(firstSeen: now)]
            entry.busy += 1
            entry.streaming = false
            entry.headSince = nil
            tracked[peer] = entry
        }
    }

    /// `peer`'s request was answered; `closing` when its connection is to close once the answer is
    /// out, `streaming` when the answer goes on as a stream.
    func answered(_ peer: Peer, closing: Bool, streaming: Bool, now: TimeInterval = ConnectionGuard.now()) {
        tracked.withLockedValue { tracked in
            guard var entry = tracked[peer] else { return }
            entry.busy = max(0, entry.busy - 1)
            entry.answeredAt = now
            entry.headSince = nil
            entry.closeRequested = entry.closeRequested || closing
            entry.streaming = entry.streaming || streaming
            tracked[peer] = entry
        }
    }

    /// Which of the `open` connections to close at `now`, and why.
    func decide(open: [Peer: Open], now: TimeInterval) -> [Peer: Reason] {
        tracked.withLockedValue { tracked in
            for peer in tracked.keys where open[peer] == nil { tracked[peer]?.missed += 1 }
            tracked = tracked.filter { $0.value.missed < 3 }
            var decided: [Peer: Reason] = [:]
            for (peer, socket) in open {
                var entry = tracked[peer, default: Tracked(firstSeen: now)]
                if entry.inode != 0, entry.inode != socket.inode {
                    entry = Tracked(firstSeen: now, busy: entry.busy)
                }
                entry.inode = socket.inode
                entry.missed = 0
                decided[peer] = Self.reason(&entry, socket, deadline: headDeadline, now: now)
                tracked[peer] = entry
            }
            guard perAddress > 0 else { return decided }
            // An IPv6 client holds its whole /64.
            for peers in Dictionary(grouping: open.keys, by: { $0.address.prefix(8) }).values
            where peers.count > perAddress {
                let excess = peers.count - perAddress - peers.filter { decided[$0] != nil }.count
                // The newest `excess` go; those busy, being answered or just sent a head wait for
                // a later sweep (an older one never goes in their place).
                let newestFirst = peers.filter { decided[$0] == nil }.sorted {
                    (tracked[$0]!.firstSeen, open[$0]!.inode) > (tracked[$1]!.firstSeen, open[$1]!.inode)
                }
                for peer in newestFirst.prefix(max(0, excess))
                where tracked[peer]!.idle && open[peer]!.quiet && open[peer]!.sinceData >= 1 {
                    decided[peer] = .overCap
                }
            }
            return decided
        }
    }

    /// Why `socket` is to close, if it is, with `entry` brought up to date.
    private static func reason(
        _ entry: inout Tracked, _ socket: Open, deadline: TimeInterval, now: TimeInterval
    ) -> Reason? {
        guard entry.idle else { return nil }
        if entry.closeRequested {
            // Once the 408 is out, which the server writes after it is stamped: data sent since
            // the stamp (the system's clock steps 4 ms), or after 5 s whatever came.
            let answeredAt = entry.answeredAt ?? entry.firstSeen
            return socket.lastSent >= answeredAt - 0.01 || now - answeredAt > 5 ? .answeredTimeout : nil
        }
        // A head is under way when data came after the last answer was stamped (a tenth of a
        // second covers the clock's steps), or, before any answer, when any data came.
        let heading = entry.answeredAt.map { socket.lastData > $0 + 0.1 } ?? (socket.bytesReceived > 0)
        entry.headSince = heading ? entry.headSince ?? now : nil
        guard let since = entry.headSince, now - since >= deadline, socket.quiet else { return nil }
        return .slowHead
    }

    /// Whether `peer` has no request under way nor a stream: checked again just before a close.
    private func stillIdle(_ peer: Peer) -> Bool {
        tracked.withLockedValue { $0[peer]?.idle ?? true }
    }

    /// Starts the sweep, once a second, of the connections to the port `port` names (nil while
    /// the server does not listen); not again once stopped.
    func startSweeping(port: @escaping @Sendable () -> Int?) {
        guard Self.isAvailable else { return }
        sweeper.withLockedValue { sweeper in
            guard sweeper.task == nil, !sweeper.stopped else { return }
            sweeper.task = Task { [weak self] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: .seconds(1))
                    guard let self else { break }
                    guard let port = port() else { continue }
                    self.sweep(port: port)
                }
            }
        }
    }

    func stopSweeping() {
        sweeper.withLockedValue { sweeper in
            sweeper.task?.cancel()
            sweeper.task = nil
            sweeper.stopped = true
        }
    }

    /// One look at the connections to `port`: those to close are closed.
    func sweep(port: Int) {
        let open = Self.openConnections(port: port)
        for (peer, reason) in decide(open: open, now: Self.now()) {
            guard let socket = open[peer], stillIdle(peer), Self.close(socket, answering: reason == .slowHead)
            else { continue }
            logger.notice(
                "connection closed",
                metadata: ["belfry.reason": "\(reason)", "belfry.peer_port": "\(peer.port)"])
        }
    }
}

#if os(Linux)
    extension ConnectionGuard {
        /// What a slow request head gets before its connection closes.
        private static let timeoutAnswer = Array(
            "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n".utf8)

        /// The process's established TCP connections whose local port is `port`: each socket's
        /// descriptor and inode (`/proc/self/fd`, `fstat`), its ends (`getsockname`,
        /// `getpeername`), its state and how long ago it last received data (`TCP_INFO`), and
        /// what waits in its send queue (`SIOCOUTQ`). It asks only about the process's own
        /// sockets: a listing of the system's (`/proc/net/tcp`) grows with every connection the
        /// machine holds, closed ones waiting out `TIME_WAIT` too.
        static func openConnections(port: Int) -> [Peer: Open] {
            var open: [Peer: Open] = [:]
            for descriptor in descriptors() {
                var status = stat()
                guard fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFSOCK,
                    address(of: descriptor, getsockname)?.port == port,
                    let peer = address(of: descriptor, getpeername), var socket = tcpInfo(descriptor)
                else { continue }
                socket.inode = UInt64(status.st_ino)
                var queued: Int32 = 0
                socket.sendQueue = ioctl(descriptor, UInt(TIOCOUTQ), &queued) == 0 ? Int(queued) : 0
                open[peer] = socket
            }
            return open
        }

        /// One end of a TCP socket, as `getsockname` or `getpeername` gives it; nil for any other
        /// kind of socket, or one not connected.
        private static func address(
            of descriptor: Int32,
            _ name: (Int32, UnsafeMutablePointer<sockaddr>, UnsafeMutablePointer<socklen_t>) -> Int32
        ) -> Peer? {
            var storage = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let status = withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { name(descriptor, $0, &length) }
            }
            guard status == 0 else { return nil }
            // As NIO's address, read as a request's `remoteAddress` is (no host name to format).
            switch Int32(storage.ss_family) {
            case AF_INET:
                return Peer(
                    SocketAddress(withUnsafeBytes(of: storage) { $0.loadUnaligned(as: sockaddr_in.self) }, host: ""))
            case AF_INET6:
                return Peer(
                    SocketAddress(withUnsafeBytes(of: storage) { $0.loadUnaligned(as: sockaddr_in6.self) }, host: ""))
            default:
                return nil
            }
        }

        /// What `TCP_INFO` says of an established socket (nil for any other state): when it last
        /// received and sent data, how many bytes it received (`tcpi_bytes_received`, at byte 128
        /// of Linux's `struct tcp_info` since Linux 4.1; glibc's copy of the struct ends before
        /// it).
        private static func tcpInfo(_ descriptor: Int32) -> Open? {
            var raw = [UInt8](repeating: 0, count: 256)
            var length = socklen_t(raw.count)
            let status = raw.withUnsafeMutableBytes {
                getsockopt(descriptor, Int32(IPPROTO_TCP), TCP_INFO, $0.baseAddress, &length)
            }
            guard status == 0, raw[0] == UInt8(TCP_ESTABLISHED),
                let received = MemoryLayout<tcp_info>.offset(of: \.tcpi_last_data_recv),
                let sent = MemoryLayout<tcp_info>.offset(of: \.tcpi_last_data_sent), Int(length) >= received + 4
            else { return nil }
            return raw.withUnsafeBytes { bytes in
                func seconds(_ offset: Int) -> TimeInterval {
                    TimeInterval(bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self)) / 1000
                }
                return Open(
                    sampledAt: now(), sinceData: seconds(received), sinceSent: seconds(sent),
                    bytesReceived: length >= 136 ? bytes.loadUnaligned(fromByteOffset: 128, as: UInt64.self) : 0,
                    descriptor: descriptor)
            }
        }

        /// The process's open descriptors, from `/proc/self/fd`.
        private static func descriptors() -> [Int32] {
            guard let directory = opendir("/proc/self/fd") else { return [] }
            defer { closedir(directory) }
            let own = dirfd(directory)
            var descriptors: [Int32] = []
            while let entry = readdir(directory) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) {
                    String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
                }
                if let descriptor = Int32(name), descriptor != own { descriptors.append(descriptor) }
            }
            return descriptors
        }

        /// Shuts the connection down (after a 408 when `answering`), through a duplicate of its
        /// descriptor that is checked to still be the same socket.
        private static func close(_ socket: Open, answering: Bool) -> Bool {
            let duplicate = dup(socket.descriptor)
            guard duplicate >= 0 else { return false }
            defer { Glibc.close(duplicate) }
            var status = stat()
            guard fstat(duplicate, &status) == 0, UInt64(status.st_ino) == socket.inode else { return false }
            if answering { _ = timeoutAnswer.withUnsafeBytes { write(duplicate, $0.baseAddress, $0.count) } }
            return shutdown(duplicate, Int32(SHUT_RDWR)) == 0
        }
    }
#else
    extension ConnectionGuard {
        static func openConnections(port: Int) -> [Peer: Open] { [:] }
        private static func close(_ socket: Open, answering: Bool) -> Bool { false }
    }
#endif

extension ConnectionGuard.Peer {
    /// The peer at `address` (4 or 16 bytes), an IPv4-mapped IPv6 address as its IPv4 bytes.
    init(unmapping address: [UInt8], port: Int) {
        let mapped =
            address.count == 16 && address[0..<10].allSatisfy { $0 == 0 } && address[10] == 0xff
            && address[11] == 0xff
        self.init(address: mapped ? Array(address[12...]) : address, port: port)
    }

    /// The peer a request's `remoteAddress` names; nil for a Unix socket.
    init?(_ address: SocketAddress?) {
        switch address {
        case .v4(let address)?:
            var raw = address.address.sin_addr
            self.init(address: withUnsafeBytes(of: &raw) { Array($0) }, port: Int(address.address.sin_port.bigEndian))
        case .v6(let address)?:
            var raw = address.address.sin6_addr
            self.init(
                unmapping: withUnsafeBytes(of: &raw) { Array($0) }, port: Int(address.address.sin6_port.bigEndian))
        default:
            return nil
        }
    }
}

extension ConnectionGuard {
    /// Starts the sweep when the application boots (before any request: a client that never
    /// completes one is what it is for), and stops it when the application shuts down.
    struct Lifecycle: LifecycleHandler {
        let connections: ConnectionGuard
        let port: @Sendable () -> Int?

        func didBoot(_ application: Application) throws {
            connections.startSweeping(port: port)
        }

        func shutdown(_ application: Application) {
            connections.stopSweeping()
        }
    }
}

/// Tells the connection guard when each request's head came in and its answer went out, and
/// starts its sweep if the application was not booted (tests start the server alone).
/// Outermost: a request is under way from its head on. A 408 (the body did not come in time)
/// closes its connection once answered.
struct ConnectionGuardMiddleware: AsyncMiddleware {
    let connections: ConnectionGuard
    let port: @Sendable () -> Int?

    func respond(to request: Request, chainingTo next: any AsyncResponder) async throws -> Response {
        guard let peer = ConnectionGuard.Peer(request.remoteAddress) else { return try await next.respond(to: request) }
        connections.startSweeping(port: port)
        connections.started(peer)
        do {
            let response = try await next.respond(to: request)
            let closing = response.status == .requestTimeout
            if closing { response.headers.replaceOrAdd(name: .connection, value: "close") }
            connections.answered(peer, closing: closing, streaming: response.body.count < 0)
            return response
        } catch {
            connections.answered(peer, closing: false, streaming: false)
            throw error
        }
    }
}
