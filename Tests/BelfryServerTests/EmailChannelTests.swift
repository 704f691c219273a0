import BelfryCore
import BelfryMail
import BelfryTestServers
import BelfryTestSupport
import Fluent
import Foundation
import SQLKit
import Testing
import Vapor

@testable import BelfryServer

/// A real mail server on loopback (Support/smtp_server.py: aiosmtpd, STARTTLS and AUTH
/// required, a certificate from a test authority) that reads what arrives with Python's own
/// email package and logs it.
final class SMTPTestServer: Sendable {
    static let user = "belfry-relay"
    static let password = "relay-password-0123456789"
    let process: BackgroundProcess
    let port: Int
    let log: String
    let authority: TestCertificateAuthority

    init(implicitTLS: Bool = false) async throws {
        authority = try TestCertificateAuthority()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "belfry-smtp-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let certificate = directory.appendingPathComponent("server.pem").path
        let key = directory.appendingPathComponent("server.key").path
        try authority.serverCertificatePEM.write(toFile: certificate, atomically: true, encoding: .utf8)
        try authority.serverKeyPEM.write(toFile: key, atomically: true, encoding: .utf8)
        log = directory.appendingPathComponent("received.jsonl").path
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("Support/smtp_server.py").path
        process = try BackgroundProcess(
            "/usr/bin/env",
            [
                "python3", script, log, "--cert", certificate, "--key", key, "--user", Self.user, "--password",
                Self.password,
            ]
                + (implicitTLS ? ["--implicit-tls"] : []))
        let output = try await process.waitForOutput(containing: "listening ")
        port = Int(try #require(output.firstMatch(of: /listening (\d+)/)).output.1)!
    }

    func location(security: SMTPSecurity = .startTLS) -> SMTPLocation {
        SMTPLocation(
            host: "localhost", port: port, security: security,
            credentials: SMTPCredentials(user: Self.user, password: Self.password))
    }

    struct Received: Decodable {
        struct Part: Decodable {
            var type: String
            var charset: String?
            var encoding: String?
            var content: String
        }

        var mail_from: String
        var rcpt_tos: [String]
        var login: String?
        var tls: Bool
        var headers: [String: String]
        var content_type: String
        var longest_line: Int
        var parts: [Part]

        func part(_ type: String) -> Part? { parts.first { $0.type == type } }
    }

    func received() throws -> [Received] {
        guard let text = try? String(contentsOfFile: log, encoding: .utf8) else { return [] }
        return try text.split(separator: "\n").map { try JSONDecoder().decode(Received.self, from: Data($0.utf8)) }
    }

    func stop() {
        process.terminate()
        try? FileManager.default.removeItem(atPath: URL(fileURLWithPath: log).deletingLastPathComponent().path)
    }
}

@Suite("Email channel against a real SMTP server")
struct EmailChannelTests {
    static let publicURL = "https://notify.example.org"

    /// The demo workspace and a category of replies whose email is on by default, with templates.
    static var workspace: WorkspaceConfig {
        var workspace = WorkspaceConfig.demo
        workspace.categories.append(
            CategoryDefinition(
                id: "reply", name: "Replies", section: "talk",
                channels: [.init(channel: "inbox"), .init(channel: "email")],
                actions: [NotificationAction(id: "view", title: "View", opensApp: true)],
                email: EmailTemplates(
                    subject: "{{title}}",
                    locales: ["de": EmailTemplates(subject: "Antwort: {{title}} ({{data.page}})")])))
        return workspace
    }

    static func withEmail(
        _ database: TestDatabase, security: SMTPSecurity = .startTLS, clock: TestClock = TestClock(),
        _ body: (Application, SMTPTestServer) async throws -> Void
    ) async throws {
        let server = try await SMTPTestServer(implicitTLS: security == .implicitTLS)
        defer { server.stop() }
        try await withBelfry(database, workspace: workspace, clock: clock, jitter: 1) { settings in
            settings.email = .init(smtp: server.location(security: security), from: "Belfry <notify@example.org>")
            settings.publicURL = publicURL
            settings.extraCertificatesPEM = server.authority.certificatePEM
        } _: { app in
            try await body(app, server)
        }
    }

    static func send(
        _ app: Application, to users: [String], title: String = "Grüße from Zoë ✓", body: String = "a < b & c",
        category: String = "reply"
    ) async throws -> UUID {
        let event = EventRequest(
            category: category, recipients: users, tenant: "dewiki",
            content: .init(title: title, body: body, url: "https://de.wikipedia.org/wiki/Diskussion:Glocke"),
            data: ["page": .string("Glocke")])
        let id = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: event).decode(EventAccepted.self)
            .eventID
        while try await app.belfryServices.fanout.processBatch(on: app.db) {}
        let queue = try #require(app.deliveryQueue)
        while try await queue.runOnce() > 0 {}
        return id
    }

    @Test(
        "an email goes out over STARTTLS with AUTH: two parts, encoded subject, escaped HTML, unsubscribe headers",
        arguments: TestDatabase.allCases)
    func endToEnd(database: TestDatabase) async throws {
        try await Self.withEmail(database) { app, server in
            _ = try await app.putUser("ada", UserUpsert(email: "ada@example.org", locale: "en-GB"))
            let id = try await Self.send(app, to: ["ada"])
            #expect(try await APNsChannelTests.status(app, id).deliveries["email"] == ["sent": 1])
            let mail = try #require(try server.received().first)
            #expect(mail.tls)
            #expect(mail.login == SMTPTestServer.user)
            #expect(mail.mail_from == "notify@example.org")
            #expect(mail.rcpt_tos == ["ada@example.org"])
            #expect(mail.headers["Subject"] == "Grüße from Zoë ✓")
            #expect(mail.headers["From"] == "Belfry <notify@example.org>")
            #expect(mail.headers["To"] == "ada@example.org")
            #expect(mail.headers["Message-ID"]?.hasSuffix("@example.org>") == true)
            #expect(mail.headers["Date"] != nil)
            #expect(mail.headers["Auto-Submitted"] == "auto-generated")
            #expect(mail.headers["X-Belfry-Category"] == "reply")
            // RFC 5321's hard limit; only the List-Unsubscribe URL is longer than 78.
            #expect(mail.longest_line <= 998)
            #expect(mail.content_type == "multipart/alternative")
            let text = try #require(mail.part("text/plain"))
            let html = try #require(mail.part("text/html"))
            for part in [text, html] {
                #expect(part.charset == "utf-8")
                #expect(part.encoding == "quoted-printable")
            }
            #expect(text.content.contains("Grüße from Zoë ✓"))
            #expect(text.content.contains("a < b & c"))
            #expect(text.content.contains("https://de.wikipedia.org/wiki/Diskussion:Glocke"))
            #expect(html.content.contains("a &lt; b &amp; c"))
            #expect(!html.content.contains("a < b"))
            #expect(html.content.contains("German Wikipedia"))
            // RFC 8058: a one-click POST target under the public address, and the preference center.
            let unsubscribe = try #require(mail.headers["List-Unsubscribe"])
            #expect(unsubscribe.hasPrefix("<\(Self.publicURL)/unsubscribe/") && unsubscribe.hasSuffix(">"))
            #expect(mail.headers["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click")
            #expect(text.content.contains("\(Self.publicURL)/preferences?link="))
            #expect(html.content.contains("\(Self.publicURL)/unsubscribe/"))
        }
    }

    @Test("the user's locale picks the category's template variant, with its data")
    func localeVariant() async throws {
        try await Self.withEmail(.sqlite) { app, server in
            _ = try await app.putUser("jonas", UserUpsert(email: "jonas@example.org", locale: "de-AT"))
            _ = try await app.putUser("ada", UserUpsert(email: "ada@example.org", locale: "en"))
            _ = try await Self.send(app, to: ["jonas", "ada"], title: "Neue Nachricht")
            let subjects = Dictionary(
                uniqueKeysWithValues: try server.received().map { ($0.rcpt_tos[0], $0.headers["Subject"] ?? "") })
            #expect(subjects["jonas@example.org"] == "Antwort: Neue Nachricht (Glocke)")
            #expect(subjects["ada@example.org"] == "Neue Nachricht")
        }
    }

    @Test("a notification rendered in Arabic is mailed right to left: <html lang=\"ar\" dir=\"rtl\">")
    func rightToLeftEmail() async throws {
        var workspace = Self.workspace
        let index = try #require(workspace.categories.firstIndex { $0.id == "reply" })
        workspace.categories[index].content = ContentTemplates(
            title: "{{actor}} replied on {{page}}", body: "Open the discussion.",
            locales: ["ar": ContentTemplates(title: "ردّ {{actor}} في {{page}}", body: "افتح النقاش.")])
        let server = try await SMTPTestServer(implicitTLS: false)
        defer { server.stop() }
        try await withBelfry(.sqlite, workspace: workspace, jitter: 1) { settings in
            settings.email = .init(smtp: server.location(), from: "Belfry <notify@example.org>")
            settings.publicURL = Self.publicURL
            settings.extraCertificatesPEM = server.authority.certificatePEM
        } _: { app in
            _ = try await app.putUser("amal", UserUpsert(email: "amal@example.org", locale: "ar-EG"))
            _ = try await app.putUser("ada", UserUpsert(email: "ada@example.org", locale: "en"))
            let event = EventRequest(
                category: "reply", recipients: ["amal", "ada"], tenant: "dewiki",
                data: ["actor": .string("Linus"), "page": .string("Glocke")])
            #expect(try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: event).status == .accepted)
            while try await app.belfryServices.fanout.processBatch(on: app.db) {}
            let queue = try #require(app.deliveryQueue)
            while try await queue.runOnce() > 0 {}
            let mails = Dictionary(uniqueKeysWithValues: try server.received().map { ($0.rcpt_tos[0], $0) })
            let arabic = try #require(mails["amal@example.org"])
            #expect(arabic.part("text/html")?.content.contains(#"<html lang="ar" dir="rtl">"#) == true)
            #expect(arabic.part("text/html")?.content.contains("ردّ Linus في Glocke") == true)
            let english = try #require(mails["ada@example.org"])
            #expect(english.part("text/html")?.content.contains(#"<html lang="en" dir="ltr">"#) == true)
        }
    }

    @Test(
        "one-click unsubscribe turns off that category's email for that site only; GET never does",
        arguments: TestDatabase.allCases)
    func oneClickUnsubscribe(database: TestDatabase) async throws {
        try await Self.withEmail(database) { app, server in
            _ = try await app.putUser("ada", UserUpsert(email: "ada@example.org"))
            _ = try await Self.send(app, to: ["ada"])
            let header = try #require(try server.received().first?.headers["List-Unsubscribe"])
            let path = String(header.dropFirst("<\(Self.publicURL)".count).dropLast())

            func emailSetting(
                _ tenant: String
            ) async throws -> (category: PreferenceOptions?, email: PreferenceOptions?) {
                let data = try await app.send(.GET, "/v1/users/ada/preferences?tenant=\(tenant)", bearer: testAPIKey)
                    .decode(PreferenceData.self)
                let category = (data.sections ?? []).flatMap { $0.subcategories ?? [] }.first { $0.category == "reply" }
                return (category?.preference, category?.channels?.first { $0.channel == "email" }?.preference)
            }

            // A mail scanner following the link changes nothing.
            let page = try await app.send(.GET, path)
            #expect(page.status == .ok)
            #expect(page.body.string.contains("List-Unsubscribe"))
            #expect(page.body.string.contains("Stop these emails"))
            #expect(try await emailSetting("dewiki").email == .optIn)

            // A tampered link is refused.
            let tampered = try await app.send(
                .POST, path.dropLast(2) + "AA", rawBody: "List-Unsubscribe=One-Click",
                headers: ["Content-Type": "application/x-www-form-urlencoded"])
            #expect(tampered.status.code >= 400 && tampered.status.code < 500)
            // A POST without the one-click body is refused too.
            let bare = try await app.send(
                .POST, path, rawBody: "x=1", headers: ["Content-Type": "application/x-www-form-urlencoded"])
            #expect(bare.status == .badRequest)
            #expect(try await emailSetting("dewiki").email == .optIn)

            for _ in 0..<2 {  // twice: the second changes nothing and still answers 200
                let done = try await app.send(
                    .POST, path, rawBody: "List-Unsubscribe=One-Click",
                    headers: ["Content-Type": "application/x-www-form-urlencoded"])
                #expect(done.status == .ok)
            }
            let after = try await emailSetting("dewiki")
            #expect(after.email == .optOut)
            #expect(after.category == .optIn)
            #expect(try await emailSetting("enwiki").email == .optIn)

            // The next event reaches the inbox, not the mailbox.
            let id = try await Self.send(app, to: ["ada"])
            let status = try await APNsChannelTests.status(app, id)
            #expect(status.skipped["email"] == ["channel_opted_out": 1])
            #expect(status.notifications == 1)
            #expect(try server.received().count == 1)
        }
    }

    @Test("a foreign or expired unsubscribe link is refused; mail clients may post multipart form data")
    func unsubscribeLinkChecks() async throws {
        let clock = TestClock()
        try await Self.withEmail(.sqlite, clock: clock) { app, server in
            _ = try await app.putUser("ada", UserUpsert(email: "ada@example.org"))
            _ = try await Self.send(app, to: ["ada"])
            let header = try #require(try server.received().first?.headers["List-Unsubscribe"])
            let path = String(header.dropFirst("<\(Self.publicURL)".count).dropLast())
            let userID = try #require(try await UserModel.query(on: app.db).filter(\.$externalID == "ada").first()?.id)

            // Signed by another server's secret: refused, and nothing changes.
            let foreign = try WebSigner(secret: "another-server-secret-0123456789").sign(
                UnsubscribeLink(
                    uid: userID, category: "reply", channel: "email", tenant: "dewiki",
                    exp: Int(clock.now.timeIntervalSince1970) + 86400))
            let refused = try await app.send(
                .POST, "/unsubscribe/\(foreign)", rawBody: "List-Unsubscribe=One-Click",
                headers: ["Content-Type": "application/x-www-form-urlencoded"])
            #expect(refused.status == .unauthorized)
            #expect(refused.body.string.contains("not valid"))

            // RFC 8058 asks mail clients for multipart/form-data.
            let boundary = "belfry-test-boundary"
            let multipart =
                "--\(boundary)\r\nContent-Disposition: form-data; name=\"List-Unsubscribe\"\r\n\r\nOne-Click\r\n--\(boundary)--\r\n"
            let accepted = try await app.send(
                .POST, path, rawBody: multipart,
                headers: ["Content-Type": "multipart/form-data; boundary=\(boundary)"])
            #expect(accepted.status == .ok)

            // Still good at 179 days; gone after 180.
            clock.advance(by: 179 * 86400)
            #expect(try await app.send(.GET, path).status == .ok)
            clock.advance(by: 2 * 86400)
            let expired = try await app.send(.GET, path)
            #expect(expired.status == .unauthorized)
            #expect(expired.body.string.contains("expired"))
        }
    }

    @Test("a mandatory email carries no unsubscribe header")
    func mandatoryEmailHasNoUnsubscribe() async throws {
        try await Self.withEmail(.sqlite) { app, server in
            _ = try await app.putUser("ada", UserUpsert(email: "ada@example.org"))
            _ = try await Self.send(app, to: ["ada"], category: "login-success")
            let mail = try #require(try server.received().first)
            #expect(mail.headers["List-Unsubscribe"] == nil)
            #expect(mail.part("text/plain")?.content.contains("/preferences?link=") == true)
        }
    }

    @Test("451 is retried and then delivered; 550 fails at once with the reply; no address is skipped")
    func outcomes() async throws {
        let clock = TestClock()
        try await Self.withEmail(.sqlite, clock: clock) { app, server in
            _ = try await app.putUser("bob", UserUpsert(email: "retry-bob@example.org"))
            _ = try await app.putUser("carol", UserUpsert(email: "reject-carol@example.org"))
            _ = try await app.putUser("dave", UserUpsert())
            let id = try await Self.send(app, to: ["bob", "carol", "dave"])
            var status = try await APNsChannelTests.status(app, id)
            #expect(status.deliveries["email"] == ["queued": 1, "failed": 1])
            #expect(status.skipped["email"] == ["no_address": 1])
            #expect(status.lastErrors["email"]?.contains("550") == true)
            #expect(status.lastErrors["email"]?.contains("no such user here") == true)
            clock.advance(by: 10)
            while try await app.deliveryQueue!.runOnce() > 0 {}
            status = try await APNsChannelTests.status(app, id)
            #expect(status.deliveries["email"] == ["sent": 1, "failed": 1])
            let attempts = try await DeliveryQueueTests.attempts(app, channel: "email")
            #expect(attempts.map(\.outcome).sorted() == ["failed", "retry", "sent"])
            #expect(attempts.compactMap(\.status).sorted() == [250, 451, 550])
            #expect(try server.received().map(\.rcpt_tos) == [["retry-bob@example.org"]])
        }
    }

    @Test("smtps:// speaks TLS from the first byte")
    func implicitTLS() async throws {
        try await Self.withEmail(.sqlite, security: .implicitTLS) { app, server in
            _ = try await app.putUser("ada", UserUpsert(email: "ada@example.org"))
            _ = try await Self.send(app, to: ["ada"])
            let mail = try #require(try server.received().first)
            #expect(mail.tls && mail.login == SMTPTestServer.user)
        }
    }

    @Test("a relay that never answers costs an attempt at most half the lease, and the delivery is retried")
    func silentRelay() async throws {
        let silent = try await SilentServer()
        defer { silent.stop() }
        let port = silent.port
        try await withBelfry(.sqlite, workspace: Self.workspace, jitter: 1) { settings in
            settings.email = .init(
                smtp: SMTPLocation(host: "127.0.0.1", port: port, security: .none), from: "n@example.org")
            settings.deliveryLease = 8
        } _: { app in
            _ = try await app.putUser("ada", UserUpsert(email: "ada@example.org"))
            let id = try await Self.send(app, to: ["ada"])
            // On a machine loaded enough that the claimed delivery waited half its lease before it
            // started, the queue put it back unattempted and without an error: claim it again.
            let queue = try #require(app.deliveryQueue)
            var status = try await APNsChannelTests.status(app, id)
            for _ in 0..<3 where status.lastErrors["email"] == nil {
                _ = try await queue.runOnce()
                status = try await APNsChannelTests.status(app, id)
            }
            #expect(status.deliveries["email"] == ["queued": 1])
            // Ended within half the lease (4 s): by the attempt's deadline or the greeting's, both
            // capped there, never by RFC 5321's five minutes.
            let error = status.lastErrors["email"] ?? ""
            #expect(
                error.contains("gave up after 4 s") || error.contains("no reply within 4 s"), "\(status.lastErrors)")
        }
    }

    @Test("a relay whose certificate is not trusted gets nothing, and the delivery is retried")
    func untrustedCertificate() async throws {
        let server = try await SMTPTestServer()
        defer { server.stop() }
        try await withBelfry(.sqlite, workspace: Self.workspace) { settings in
            settings.email = .init(smtp: server.location(), from: "notify@example.org")
            settings.publicURL = Self.publicURL
        } _: { app in
            _ = try await app.putUser("ada", UserUpsert(email: "ada@example.org"))
            let id = try await Self.send(app, to: ["ada"])
            let status = try await APNsChannelTests.status(app, id)
            #expect(status.deliveries["email"] == ["queued": 1])
            #expect(status.lastErrors["email"]?.contains("STARTTLS") == true)
            #expect(try server.received().isEmpty)
        }
    }
}
