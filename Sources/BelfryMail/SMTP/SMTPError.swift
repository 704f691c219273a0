/// Why a message was not accepted: which step failed and, when the server answered, its reply.
public struct SMTPError: Error, Sendable, CustomStringConvertible {
    public enum Step: String, Sendable {
        case connect = "connecting"
        case greeting = "the greeting"
        case hello = "EHLO"
        case startTLS = "STARTTLS"
        case authentication = "AUTH"
        case mailFrom = "MAIL FROM"
        case recipient = "RCPT TO"
        case data = "DATA"
        case message = "the end of the message"
        case reset = "RSET"
    }

    public var step: Step
    /// The server's reply, when the failure is one; `nil` for connection, TLS and timeout failures.
    public var reply: SMTPReply?
    public var message: String

    public init(step: Step, reply: SMTPReply? = nil, message: String) {
        self.step = step
        self.reply = reply
        self.message = message
    }

    /// The server refused the recipient or the message itself (5yz on RCPT TO or after DATA):
    /// sending the same message again will fail again.
    public var isPermanentRejection: Bool {
        guard let reply, reply.isPermanent else { return false }
        return [.recipient, .data, .message].contains(step)
    }

    /// The server answered and the conversation is in a known state: after RSET the
    /// connection can carry another message. 421 means the server is closing it.
    var keepsConnection: Bool {
        guard let reply else { return false }
        return reply.code != 421 && [.mailFrom, .recipient, .data, .message].contains(step)
    }

    public var description: String {
        if let reply { return "\(step.rawValue) was answered \(reply.code) \(reply.text)" }
        return "\(step.rawValue) failed: \(message)"
    }
}
