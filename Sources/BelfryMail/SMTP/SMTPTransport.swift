/// The byte stream under an SMTP conversation: a TCP connection that can turn to TLS in the
/// middle (STARTTLS). The conversation itself is `SMTPSession`; tests drive it over a scripted
/// transport.
public protocol SMTPTransport: Sendable {
    func write(_ bytes: [UInt8]) async throws
    /// The next complete reply, multi-line ones joined; fails after `timeout`.
    func readReply(timeout: Duration) async throws -> SMTPReply
    /// Starts TLS on the connection, checking the certificate for `serverName`. Fails if the
    /// server sent anything past the reply to STARTTLS (which an attacker could have injected
    /// in plain text).
    func startTLS(serverName: String) async throws
    func close() async
}

/// How long each step may take. RFC 5321 §4.5.3.2 asks clients to wait at least 5 minutes
/// for the greeting, MAIL and RCPT, 2 for DATA, 3 per block of data and 10 for the reply to
/// the end of the message; a server that takes as long elsewhere is rare, and a delivery's
/// lease can be shorter, so `capped(at:)` shortens them.
public struct SMTPTimeouts: Sendable, Hashable {
    public var connect: Duration = .seconds(30)
    public var greeting: Duration = .seconds(300)
    public var command: Duration = .seconds(300)
    public var dataStart: Duration = .seconds(120)
    public var dataEnd: Duration = .seconds(600)

    public static let rfc5321 = SMTPTimeouts()

    public init() {}

    public func capped(at limit: Duration) -> SMTPTimeouts {
        var copy = self
        copy.connect = min(connect, limit)
        copy.greeting = min(greeting, limit)
        copy.command = min(command, limit)
        copy.dataStart = min(dataStart, limit)
        copy.dataEnd = min(dataEnd, limit)
        return copy
    }
}
