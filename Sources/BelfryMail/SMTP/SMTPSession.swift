/// How the connection is protected.
public enum SMTPSecurity: String, Sendable, Hashable {
    /// Plain TCP, then STARTTLS before anything else; a server that does not offer it is refused.
    case startTLS
    /// TLS from the first byte (`smtps`, port 465).
    case implicitTLS
    /// No TLS at all: for a relay on loopback only.
    case none
}

/// A user name and password for AUTH. Its description never shows the password.
public struct SMTPCredentials: Sendable, Hashable, CustomStringConvertible {
    public var user: String
    public var password: String

    public init(user: String, password: String) {
        self.user = user
        self.password = password
    }

    public var description: String { "\(user):<redacted>" }
}

/// One SMTP conversation (RFC 5321) on an open transport: greeting, EHLO, STARTTLS, AUTH,
/// then any number of messages, each one transaction, with RSET between them.
public actor SMTPSession {
    let transport: any SMTPTransport
    let timeouts: SMTPTimeouts
    /// The service extensions the server announced in its last EHLO reply, by keyword
    /// (upper case), with their parameters.
    public private(set) var extensions: [String: String] = [:]
    /// A transaction failed part way: RSET before the next.
    private var needsReset = false

    init(transport: any SMTPTransport, timeouts: SMTPTimeouts) {
        self.transport = transport
        self.timeouts = timeouts
    }

    /// Greets the server over `transport` and gets it ready to take messages.
    /// - Parameters:
    ///   - serverName: the host name the server's certificate must carry.
    ///   - clientName: the name this client gives in EHLO.
    /// - Throws: `SMTPError`.
    public static func open(
        on transport: any SMTPTransport, serverName: String, clientName: String, security: SMTPSecurity,
        credentials: SMTPCredentials?, timeouts: SMTPTimeouts = .rfc5321
    ) async throws -> SMTPSession {
        let session = SMTPSession(transport: transport, timeouts: timeouts)
        do {
            try await session.start(
                serverName: serverName, clientName: clientName, security: security, credentials: credentials)
        } catch {
            await transport.close()
            throw error
        }
        return session
    }

    /// A domain name, or an address literal (`[192.0.2.1]`, `[IPv6:2001:db8::1]`), as EHLO takes
    /// (RFC 5321 §4.1.3): nothing else may reach the command line.
    static func isValidClientName(_ name: String) -> Bool {
        guard (1...255).contains(name.utf8.count) else { return false }
        if name.hasPrefix("[") && name.hasSuffix("]") {
            return name.dropFirst().dropLast().unicodeScalars.allSatisfy {
                $0.properties.isASCIIHexDigit || ":.IPv".unicodeScalars.contains($0)
            }
        }
        return name.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "-" || $0 == "."
        }
    }

    private func start(
        serverName: String, clientName: String, security: SMTPSecurity, credentials: SMTPCredentials?
    ) async throws {
        guard Self.isValidClientName(clientName) else {
            throw SMTPError(step: .hello, message: "\"\(clientName.prefix(80))\" is not a name EHLO can give")
        }
        try expect(200..<300, step: .greeting, reply: try await read(.greeting, timeouts.greeting))
        try await hello(clientName)
        if security == .startTLS {
            guard extensions["STARTTLS"] != nil else {
                throw SMTPError(
                    step: .startTLS, message: "the server does not offer STARTTLS; refusing to go on without TLS")
            }
            try expect(220..<221, step: .startTLS, reply: try await command("STARTTLS", .startTLS))
            do {
                try await transport.startTLS(serverName: serverName)
            } catch {
                throw SMTPError(step: .startTLS, message: "the TLS handshake failed: \(error)")
            }
            // What the server said before TLS counts for nothing now (RFC 3207 §4.2). The
            // handshake runs under this first exchange, so its failure shows here.
            do {
                try await hello(clientName)
            } catch let error as SMTPError where error.reply == nil {
                throw SMTPError(step: .startTLS, message: "TLS failed: \(error.message)")
            }
        }
        if let credentials { try await authenticate(credentials) }
    }

    private func hello(_ clientName: String) async throws {
        let reply = try await command("EHLO \(clientName)", .hello)
        try expect(200..<300, step: .hello, reply: reply)
        var extensions: [String: String] = [:]
        for line in reply.lines.dropFirst() {
            let parts = line.split(separator: " ", maxSplits: 1)
            guard let keyword = parts.first else { continue }
            extensions[keyword.uppercased()] = parts.count > 1 ? String(parts[1]) : ""
        }
        self.extensions = extensions
    }

    /// AUTH PLAIN (RFC 4616) when offered, else AUTH LOGIN.
    private func authenticate(_ credentials: SMTPCredentials) async throws {
        let mechanisms = Set((extensions["AUTH"] ?? "").uppercased().split(separator: " ").map(String.init))
        if mechanisms.contains("PLAIN") {
            let token = Base64.encode(Array("\0\(credentials.user)\0\(credentials.password)".utf8))
            // The logged form of this command never holds the token.
            try expect(
                235..<236, step: .authentication, reply: try await command("AUTH PLAIN \(token)", .authentication))
        } else if mechanisms.contains("LOGIN") {
            try expect(334..<335, step: .authentication, reply: try await command("AUTH LOGIN", .authentication))
            try expect(
                334..<335, step: .authentication,
                reply: try await command(Base64.encode(Array(credentials.user.utf8)), .authentication))
            try expect(
                235..<236, step: .authentication,
                reply: try await command(Base64.encode(Array(credentials.password.utf8)), .authentication))
        } else {
            throw SMTPError(
                step: .authentication,
                message: "credentials are set but the server offers neither AUTH PLAIN nor LOGIN "
                    + "(it offers: \(mechanisms.isEmpty ? "no AUTH" : mechanisms.sorted().joined(separator: " ")))")
        }
    }

    /// Sends one message to `recipients`. With PIPELINING (RFC 2920) the envelope and DATA go
    /// out together and their replies are read in order.
    /// - Parameter message: the message's text with CRLF line ends, before dot-stuffing.
    /// - Throws: `SMTPError`; the session stays usable after a refused transaction.
    public func send(from sender: String, to recipients: [String], message: String) async throws {
        // Checked before anything is written: an address is the only text here that reaches a command line.
        guard MailAddress.isValid(sender) else {
            throw SMTPError(step: .mailFrom, message: "\"\(sender.prefix(80))\" is not an address MAIL FROM can take")
        }
        if let bad = recipients.first(where: { !MailAddress.isValid($0) }) {
            throw SMTPError(step: .recipient, message: "\"\(bad.prefix(80))\" is not an address RCPT TO can take")
        }
        guard !recipients.isEmpty else { throw SMTPError(step: .recipient, message: "no recipients") }
        if needsReset { try await reset() }
        needsReset = true
        let envelope = ["MAIL FROM:<\(sender)>"] + recipients.map { "RCPT TO:<\($0)>" } + ["DATA"]
        var replies: [SMTPReply] = []
        if extensions["PIPELINING"] != nil {
            try await write(envelope.map { $0 + "\r\n" }.joined(), step: .mailFrom)
            for (index, _) in envelope.enumerated() {
                let step: SMTPError.Step = index == 0 ? .mailFrom : index == envelope.count - 1 ? .data : .recipient
                replies.append(try await read(step, step == .data ? timeouts.dataStart : timeouts.command))
            }
        } else {
            let mail = try await command(envelope[0], .mailFrom)
            replies.append(mail)
            if (250..<260).contains(mail.code) {
                for recipient in recipients { replies.append(try await command("RCPT TO:<\(recipient)>", .recipient)) }
                if replies.dropFirst().contains(where: { (250..<260).contains($0.code) }) {
                    replies.append(try await command("DATA", .data, timeout: timeouts.dataStart))
                }
            }
        }
        try expect(250..<260, step: .mailFrom, reply: replies[0])
        let accepted = replies.dropFirst().prefix(recipients.count).filter { (250..<260).contains($0.code) }
        let refusedRecipient = replies.dropFirst().prefix(recipients.count).first { !(250..<260).contains($0.code) }
        let dataReply = replies.count == envelope.count ? replies[replies.count - 1] : nil
        if dataReply?.code == 354 && accepted.isEmpty {
            // Every recipient was refused, yet the server wants the message: send none.
            try await write(".\r\n", step: .message)
            _ = try await read(.message, timeouts.dataEnd)
        }
        if accepted.isEmpty, let refusedRecipient {
            throw SMTPError(step: .recipient, reply: refusedRecipient, message: refusedRecipient.text)
        }
        guard let dataReply else { throw SMTPError(step: .data, message: "the server never answered DATA") }
        try expect(354..<355, step: .data, reply: dataReply)
        try await write(bytes: Self.dotStuffed(message), step: .message)
        try expect(250..<260, step: .message, reply: try await read(.message, timeouts.dataEnd))
        needsReset = false
    }

    /// RSET: abandons any transaction; also tells whether a reused connection still works.
    public func reset() async throws {
        try expect(250..<260, step: .reset, reply: try await command("RSET", .reset))
        needsReset = false
    }

    /// QUIT, then closes the connection, whatever the server says.
    public func quit() async {
        if (try? await write("QUIT\r\n", step: .reset)) != nil {
            _ = try? await transport.readReply(timeout: .seconds(5))
        }
        await transport.close()
    }

    /// The message as DATA carries it (RFC 5321 §4.5.2): CRLF line ends, a dot doubled at the
    /// start of any line, and the terminating `.` line.
    static func dotStuffed(_ message: String) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(message.utf8.count + 64)
        var atLineStart = true
        for octet in message.utf8 {
            switch octet {
            case UInt8(ascii: "\r"):
                continue  // Line ends are written as CRLF at the LF, whatever the input had.
            case UInt8(ascii: "\n"):
                out += [13, 10]
                atLineStart = true
            default:
                if atLineStart && octet == UInt8(ascii: ".") { out.append(octet) }
                out.append(octet)
                atLineStart = false
            }
        }
        if !atLineStart { out += [13, 10] }
        return out + Array(".\r\n".utf8)
    }

    private func command(_ line: String, _ step: SMTPError.Step, timeout: Duration? = nil) async throws -> SMTPReply {
        try await write(line + "\r\n", step: step)
        return try await read(step, timeout ?? timeouts.command)
    }

    private func write(_ text: String, step: SMTPError.Step) async throws {
        try await write(bytes: Array(text.utf8), step: step)
    }

    private func write(bytes: [UInt8], step: SMTPError.Step) async throws {
        do {
            try await transport.write(bytes)
        } catch {
            throw SMTPError(step: step, message: "the connection failed: \(error)")
        }
    }

    private func read(_ step: SMTPError.Step, _ timeout: Duration) async throws -> SMTPReply {
        do {
            return try await transport.readReply(timeout: timeout)
        } catch let error as SMTPError {
            throw error
        } catch {
            throw SMTPError(step: step, message: "\(error)")
        }
    }

    private func expect(_ codes: Range<Int>, step: SMTPError.Step, reply: SMTPReply) throws {
        guard codes.contains(reply.code) else { throw SMTPError(step: step, reply: reply, message: reply.text) }
    }
}
