import NIOCore
import NIOSSL

/// Sends messages through one SMTP relay over a small pool of reused connections.
public actor SMTPClient {
    public struct Configuration: Sendable {
        public var host: String
        public var port: Int
        public var security: SMTPSecurity
        public var credentials: SMTPCredentials?
        /// The name given in EHLO.
        public var clientName: String
        public var timeouts: SMTPTimeouts
        /// Connections open at once; more senders wait for one.
        public var maxConnections: Int
        /// An idle connection older than this is closed rather than reused (servers drop idle
        /// clients after a few minutes, RFC 5321 §4.5.3.2.7).
        public var maxIdle: Duration
        /// Trust roots and settings for TLS; certificates and host names are always checked.
        public var tls: TLSConfiguration

        public init(
            host: String, port: Int, security: SMTPSecurity, credentials: SMTPCredentials? = nil,
            clientName: String = "localhost", timeouts: SMTPTimeouts = .rfc5321, maxConnections: Int = 4,
            maxIdle: Duration = .seconds(60), tls: TLSConfiguration = .makeClientConfiguration()
        ) {
            self.host = host
            self.port = port
            self.security = security
            self.credentials = credentials
            self.clientName = clientName
            self.timeouts = timeouts
            self.maxConnections = maxConnections
            self.maxIdle = maxIdle
            self.tls = tls
        }
    }

    public nonisolated let configuration: Configuration
    private let group: any EventLoopGroup
    private let tls: NIOSSLContext?
    private let clock = ContinuousClock()
    private var idle: [(session: SMTPSession, since: ContinuousClock.Instant)] = []
    private var open = 0
    private var waiters: [(id: Int, continuation: CheckedContinuation<Void, Never>)] = []
    private var nextWaiter = 0
    /// Waiters cancelled before they were queued.
    private var cancelledWaiters = Set<Int>()
    private var isShutDown = false

    public init(configuration: Configuration, group: any EventLoopGroup) throws {
        self.configuration = configuration
        self.group = group
        tls = configuration.security == .none ? nil : try NIOSSLContext(configuration: configuration.tls)
    }

    /// Sends `message` to its `To` address.
    /// - Throws: `SMTPError`.
    public func send(_ message: MailMessage) async throws {
        try await send(from: message.from.address, to: [message.to.address], message: message.rendered())
    }

    /// Sends `message`, giving up after `timeout` in all (waiting for a connection included): a
    /// send given up on closes its connection, so it never completes later.
    /// - Throws: `SMTPError`.
    public nonisolated func send(_ message: MailMessage, timeout: Duration) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await self.send(message) }
            group.addTask {
                try await Task.sleep(for: timeout)
                throw SMTPError(step: .connect, message: "gave up after \(timeout.components.seconds) s")
            }
            defer { group.cancelAll() }
            try await group.next()
        }
    }

    /// Sends a rendered message with the given envelope.
    /// - Throws: `SMTPError`.
    public func send(from sender: String, to recipients: [String], message: String) async throws {
        var (session, reused) = try await acquire()
        while true {
            do {
                try await session.send(from: sender, to: recipients, message: message)
                release(session, reusable: true)
                return
            } catch let error as SMTPError {
                release(session, reusable: error.keepsConnection)
                // A kept connection the server had closed meanwhile fails before any reply:
                // the message never started, so it goes once more on a new connection.
                guard reused, error.reply == nil, error.step == .mailFrom else { throw error }
                (session, reused) = try await acquire(fresh: true)
            } catch {
                release(session, reusable: false)
                throw error
            }
        }
    }

    /// Closes every idle connection with QUIT; connections in use close when they come back.
    public func shutdown() async {
        isShutDown = true
        let sessions = idle.map(\.session)
        idle.removeAll()
        open -= sessions.count
        for session in sessions { await session.quit() }
        waiters.forEach { $0.continuation.resume() }
        waiters.removeAll()
    }

    /// A connection ready for a message, and whether it carried one before.
    private func acquire(fresh: Bool = false) async throws -> (SMTPSession, reused: Bool) {
        while true {
            guard !isShutDown else { throw SMTPError(step: .connect, message: "the mail client is shut down") }
            if !fresh, let (session, since) = idle.popLast() {
                let idleFor = since.duration(to: clock.now)
                // Between messages in quick succession the connection is known good; one that
                // sat idle is checked with RSET (a failed transaction was reset already), and
                // one idle too long is replaced.
                var usable = idleFor < configuration.maxIdle
                if usable && idleFor >= Self.checkAfter { usable = (try? await session.reset()) != nil }
                if usable { return (session, true) }
                open -= 1
                await session.quit()
                continue
            }
            if open < configuration.maxConnections {
                open += 1
                do {
                    return (try await connect(), false)
                } catch {
                    open -= 1
                    wakeOne()
                    throw error
                }
            }
            try await waitForConnection()
        }
    }

    /// Waits until a connection is released; a cancelled wait ends at once.
    private func waitForConnection() async throws {
        let id = nextWaiter
        nextWaiter += 1
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                if cancelledWaiters.remove(id) != nil {
                    continuation.resume()
                } else {
                    waiters.append((id, continuation))
                }
            }
        } onCancel: {
            Task { await self.cancelWaiter(id) }
        }
        try Task.checkCancellation()
    }

    private func cancelWaiter(_ id: Int) {
        if let index = waiters.firstIndex(where: { $0.id == id }) {
            waiters.remove(at: index).continuation.resume()
        } else {
            cancelledWaiters.insert(id)
        }
    }

    /// Idle time after which a kept connection is checked with RSET before it is used.
    static let checkAfter: Duration = .seconds(2)

    private func release(_ session: SMTPSession, reusable: Bool) {
        if reusable && !isShutDown {
            idle.append((session, clock.now))
        } else {
            open -= 1
            Task { await session.quit() }
        }
        wakeOne()
    }

    private func wakeOne() {
        if !waiters.isEmpty { waiters.removeFirst().continuation.resume() }
    }

    private func connect() async throws -> SMTPSession {
        let transport: NIOSMTPTransport
        do {
            transport = try await NIOSMTPTransport.connect(
                host: configuration.host, port: configuration.port, security: configuration.security, tls: tls,
                group: group, timeout: configuration.timeouts.connect)
        } catch {
            throw SMTPError(
                step: .connect, message: "cannot connect to \(configuration.host):\(configuration.port): \(error)")
        }
        return try await SMTPSession.open(
            on: transport, serverName: configuration.host, clientName: configuration.clientName,
            security: configuration.security, credentials: configuration.credentials, timeouts: configuration.timeouts)
    }
}
