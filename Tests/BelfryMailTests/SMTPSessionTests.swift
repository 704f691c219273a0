import Testing

@testable import BelfryMail

/// A transport that plays the server's side from a script and records what the client wrote.
final class ScriptedTransport: SMTPTransport, @unchecked Sendable {
    private var replies: [SMTPReply]
    private(set) var written = ""
    private(set) var tlsStartedFor: String?
    private(set) var closed = false

    /// - Parameter script: raw reply lines as a server sends them (`"250-first"`, `"250 last"`).
    init(_ script: [String]) throws {
        var parser = SMTPReply.Parser()
        replies = try script.compactMap { try parser.add($0) }
    }

    func write(_ bytes: [UInt8]) async throws { written += String(decoding: bytes, as: UTF8.self) }

    func readReply(timeout: Duration) async throws -> SMTPReply {
        guard !replies.isEmpty else { throw SMTPReplyHandler.Failure(description: "the script ran out") }
        return replies.removeFirst()
    }

    func startTLS(serverName: String) async throws { tlsStartedFor = serverName }
    func close() async { closed = true }

    var commands: [String] { written.split(separator: "\r\n", omittingEmptySubsequences: false).map(String.init) }
}

@Suite struct SMTPSessionTests {
    let hello = ["220 mail.example.org ESMTP ready"]

    @Test func startTLSThenAuthPlainThenOneMessage() async throws {
        let transport = try ScriptedTransport(
            hello + ["250-mail.example.org", "250-PIPELINING", "250 STARTTLS", "220 go ahead"]
                + ["250-mail.example.org greets belfry", "250-AUTH LOGIN PLAIN", "250 8BITMIME", "235 ok"]
                + ["250 sender ok", "250 recipient ok", "354 go on", "250 queued as 12345"])
        let session = try await SMTPSession.open(
            on: transport, serverName: "mail.example.org", clientName: "belfry.test", security: .startTLS,
            credentials: SMTPCredentials(user: "ada", password: "s3cret"))
        #expect(transport.tlsStartedFor == "mail.example.org")
        // The extensions are those announced after TLS, not before.
        #expect(await session.extensions["AUTH"] == "LOGIN PLAIN")
        #expect(await session.extensions["PIPELINING"] == nil)
        try await session.send(
            from: "notify@example.org", to: ["ada@example.org"], message: "Subject: hi\r\n\r\nHello\r\n")
        #expect(
            transport.commands == [
                "EHLO belfry.test", "STARTTLS", "EHLO belfry.test",
                "AUTH PLAIN AGFkYQBzM2NyZXQ=",  // base64("\0ada\0s3cret")
                "MAIL FROM:<notify@example.org>", "RCPT TO:<ada@example.org>", "DATA",
                "Subject: hi", "", "Hello", ".", "",
            ])
    }

    @Test func multiLineRepliesAreOneReply() throws {
        var parser = SMTPReply.Parser()
        #expect(try parser.add("250-first line") == nil)
        #expect(parser.isMidReply)
        #expect(try parser.add("250-SIZE 35882577") == nil)
        let reply = try #require(try parser.add("250 last"))
        #expect(reply.code == 250)
        #expect(reply.lines == ["first line", "SIZE 35882577", "last"])
        #expect(!parser.isMidReply)
        #expect(try parser.add("354") == SMTPReply(code: 354, lines: [""]))
        // A reply line whose code changes mid-reply, or that is no reply at all, is refused.
        _ = try parser.add("250-one")
        #expect(throws: SMTPReply.Parser.Malformed.self) { try parser.add("251 two") }
        var fresh = SMTPReply.Parser()
        #expect(throws: SMTPReply.Parser.Malformed.self) { try fresh.add("hello") }
        #expect(throws: SMTPReply.Parser.Malformed.self) { try fresh.add("25") }
        #expect(throws: SMTPReply.Parser.Malformed.self) { try fresh.add("250+x") }
    }

    @Test func dotStuffingDoublesLeadingDotsAndEndsWithADotLine() {
        func stuffed(_ text: String) -> String { String(decoding: SMTPSession.dotStuffed(text), as: UTF8.self) }
        #expect(stuffed("a\r\n.b\r\n..c\r\nd.\r\n.\r\n") == "a\r\n..b\r\n...c\r\nd.\r\n..\r\n.\r\n")
        // Bare LF becomes CRLF; a message without a final line end gets one.
        #expect(stuffed("x\n.y") == "x\r\n..y\r\n.\r\n")
        #expect(stuffed(".") == "..\r\n.\r\n")
    }

    @Test func authLoginWhenPlainIsNotOffered() async throws {
        let transport = try ScriptedTransport(
            hello + ["250-mx", "250 AUTH LOGIN", "334 VXNlcm5hbWU6", "334 UGFzc3dvcmQ6", "235 ok"])
        _ = try await SMTPSession.open(
            on: transport, serverName: "mx", clientName: "c", security: .none,
            credentials: SMTPCredentials(user: "ada", password: "pw"))
        #expect(transport.commands == ["EHLO c", "AUTH LOGIN", "YWRh", "cHc=", ""])
    }

    @Test func refusesToGoOnWithoutSTARTTLS() async throws {
        let transport = try ScriptedTransport(hello + ["250-mx", "250 AUTH PLAIN"])
        let error = await #expect(throws: SMTPError.self) {
            try await SMTPSession.open(
                on: transport, serverName: "mx", clientName: "c", security: .startTLS,
                credentials: SMTPCredentials(user: "ada", password: "pw"))
        }
        #expect(error?.step == .startTLS)
        // No password went out in the clear, and the connection is closed.
        #expect(!transport.written.contains("AUTH"))
        #expect(transport.closed)
    }

    @Test func aRefusedRecipientIsPermanentAndTheSessionResetsBeforeTheNext() async throws {
        let transport = try ScriptedTransport(
            hello + ["250-mx", "250 PIPELINING"]
                + ["250 ok", "550 5.1.1 no such user", "554 no valid recipients"]
                + ["250 reset", "250 ok", "250 ok", "354 go", "250 queued"])
        let session = try await SMTPSession.open(
            on: transport, serverName: "mx", clientName: "c", security: .none, credentials: nil)
        let error = await #expect(throws: SMTPError.self) {
            try await session.send(from: "n@example.org", to: ["nobody@example.org"], message: "x")
        }
        #expect(error?.step == .recipient)
        #expect(error?.reply?.code == 550)
        #expect(error?.isPermanentRejection == true)
        #expect(error?.keepsConnection == true)
        try await session.send(from: "n@example.org", to: ["ada@example.org"], message: "x")
        // Pipelined: MAIL, RCPT and DATA went out in one write each time; RSET came between.
        #expect(
            transport.commands == [
                "EHLO c", "MAIL FROM:<n@example.org>", "RCPT TO:<nobody@example.org>", "DATA", "RSET",
                "MAIL FROM:<n@example.org>", "RCPT TO:<ada@example.org>", "DATA", "x", ".", "",
            ])
    }

    @Test func aTemporaryRefusalOfTheMessageIsNotPermanent() async throws {
        let transport = try ScriptedTransport(
            hello + ["250 mx"] + ["250 ok", "250 ok", "354 go", "451 4.3.0 try again later"])
        let session = try await SMTPSession.open(
            on: transport, serverName: "mx", clientName: "c", security: .none, credentials: nil)
        let error = await #expect(throws: SMTPError.self) {
            try await session.send(from: "n@example.org", to: ["ada@example.org"], message: "x")
        }
        #expect(error?.step == .message)
        #expect(error?.reply?.code == 451)
        #expect(error?.isPermanentRejection == false)
        // Without PIPELINING, each command waited for its reply.
        #expect(
            transport.commands.prefix(4) == [
                "EHLO c", "MAIL FROM:<n@example.org>", "RCPT TO:<ada@example.org>", "DATA",
            ])
    }

    @Test func nothingButANameOrAnAddressLiteralReachesEHLO() async throws {
        for bad in ["mail.example.org\r\nRSET", "a b", "", "[1.2.3.4\r\n]"] {
            let transport = try ScriptedTransport(hello)
            let error = await #expect(throws: SMTPError.self) {
                try await SMTPSession.open(
                    on: transport, serverName: "mx", clientName: bad, security: .none, credentials: nil)
            }
            #expect(error?.step == .hello)
            #expect(transport.written.isEmpty)
        }
        for good in ["notify.example.org", "[192.0.2.1]", "[IPv6:2001:db8::1]", "localhost"] {
            #expect(SMTPSession.isValidClientName(good), "\(good)")
        }
    }

    @Test func envelopeAddressesAreCheckedBeforeAnythingIsWritten() async throws {
        let transport = try ScriptedTransport(hello + ["250 mx"])
        let session = try await SMTPSession.open(
            on: transport, serverName: "mx", clientName: "c", security: .none, credentials: nil)
        let sent = transport.written
        for (sender, recipient) in [
            ("n@example.org\r\nRCPT TO:<x@y.org>", "a@example.org"), ("n@example.org", "a@b.org>\r\nDATA"),
        ] {
            await #expect(throws: SMTPError.self) {
                try await session.send(from: sender, to: [recipient], message: "x")
            }
        }
        #expect(transport.written == sent)
    }

    @Test func credentialsNeverShowInDescriptions() {
        let credentials = SMTPCredentials(user: "ada", password: "s3cret-password")
        #expect(!"\(credentials)".contains("s3cret"))
        #expect(!String(reflecting: credentials).contains("s3cret"))
    }
}
