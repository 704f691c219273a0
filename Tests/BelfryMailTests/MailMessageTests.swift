import Foundation
import Testing

@testable import BelfryMail

@Suite struct MailMessageTests {
    @Test func addressesParseWithAndWithoutNames() throws {
        let named = try MailAddress(parsing: "Belfry Notifications <notify@example.org>")
        #expect(named.name == "Belfry Notifications")
        #expect(named.address == "notify@example.org")
        #expect(named.domain == "example.org")
        #expect(named.headerValue == "Belfry Notifications <notify@example.org>")
        #expect(try MailAddress(parsing: "\"Zoë, the bot\" <z@example.org>").name == "Zoë, the bot")
        #expect(try MailAddress(parsing: " ada@example.org ").name == nil)
        #expect(try MailAddress(address: "a@b.org", name: "O'Brien, Ada").headerValue == "\"O'Brien, Ada\" <a@b.org>")
        for bad in [
            "", "ada", "ada@", "@example.org", "a b@example.org", "a@b@c", "ada@example..org", "<a@b.org",
            "zoë@example.org", "a@b.org\r\nBcc: x@y.org",
        ] {
            #expect(throws: MailAddress.Invalid.self, "\(bad)") { try MailAddress(parsing: bad) }
        }
    }

    @Test func nonASCIISubjectsBecomeEncodedWordsOfWholeCharacters() {
        let encoded = HeaderEncoding.text("Grüße from Zoë ✓")
        #expect(encoded == "=?UTF-8?B?R3LDvMOfZSBmcm9tIFpvw6sg4pyT?=")
        // A long subject folds into several words; none longer than 75, none splitting a character.
        let long = String(repeating: "Ünïcödé ✓ ", count: 12)
        let words = HeaderEncoding.text(long).components(separatedBy: "\r\n ")
        #expect(words.count > 1)
        for word in words {
            #expect(word.count <= 75)
            #expect(word.hasPrefix("=?UTF-8?B?") && word.hasSuffix("?="))
        }
        // Plain ASCII stays readable; CR and LF can never start a new header.
        #expect(HeaderEncoding.text("Your edit was thanked") == "Your edit was thanked")
        #expect(HeaderEncoding.text("a\r\nBcc: evil@example.org") == "a  Bcc: evil@example.org")
        #expect(HeaderEncoding.phrase("Zoë") == "=?UTF-8?B?Wm/Dqw==?=")
    }

    @Test func everyLineWithAnEncodedWordFitsRFC2047() throws {
        let message = MailMessage(
            from: try MailAddress(address: "notify@example.org", name: "Benachrichtigungen der Wikipedia für Zoë"),
            to: try MailAddress(address: "ada@example.org"),
            subject: String(repeating: "Grüße from Zoë ✓ ", count: 8), text: "x", date: 0, messageID: "a@example.org")
        let lines = message.rendered().components(separatedBy: "\r\n")
        let encoded = lines.filter { $0.contains("=?UTF-8?B?") }
        #expect(encoded.count > 4)
        for line in encoded { #expect(line.count <= 76, "\(line)") }
        #expect(lines.contains(" <notify@example.org>"), "the address follows the encoded name on a line of its own")
    }

    @Test func quotedPrintableKeepsLinesShortAndEncodesWhatItMust() {
        #expect(QuotedPrintable.encode("a=b café") == "a=3Db caf=C3=A9")
        #expect(QuotedPrintable.encode("trailing \nline") == "trailing=20\r\nline")
        let long = String(repeating: "x", count: 200)
        let lines = QuotedPrintable.encode(long).components(separatedBy: "\r\n")
        #expect(lines.allSatisfy { $0.count <= 76 })
        #expect(lines.map { $0.hasSuffix("=") ? String($0.dropLast()) : $0 }.joined() == long)
        // An escape is never split by a soft break.
        let escapes = QuotedPrintable.encode(String(repeating: "é", count: 40)).components(separatedBy: "\r\n")
        for line in escapes {
            let width = line.count - (line.hasSuffix("=") ? 1 : 0)
            #expect(line.count <= 76 && width % 3 == 0)
        }
    }

    @Test func aMessageHasItsHeadersAndTwoPartsWithinTheLineLimit() throws {
        let message = MailMessage(
            from: try MailAddress(parsing: "Belfry <notify@example.org>"),
            to: try MailAddress(address: "ada@example.org"),
            subject: "Grüße from Zoë ✓", text: "Hello <Ada> & co\n" + String(repeating: "long ", count: 300),
            html: "<p>Hello &lt;Ada&gt;</p>", date: 1_795_453_598, messageID: "abc@example.org",
            headers: [
                .init("List-Unsubscribe", "<https://n.example.org/u/x>", structured: true),
                .init("List-Unsubscribe-Post", "List-Unsubscribe=One-Click", structured: true),
                .init("Bad:Name", "dropped"),
            ])
        let rendered = message.rendered(boundary: "=_b")
        let lines = rendered.components(separatedBy: "\r\n")
        #expect(lines.allSatisfy { $0.utf8.count <= 78 })
        #expect(!rendered.replacingAll("\r\n", with: "").contains("\n"))
        #expect(lines.contains("Date: Mon, 23 Nov 2026 17:06:38 +0000"))
        #expect(lines.contains("From: Belfry <notify@example.org>"))
        #expect(lines.contains("To: ada@example.org"))
        #expect(lines.contains("Message-ID: <abc@example.org>"))
        #expect(lines.contains("Subject: =?UTF-8?B?R3LDvMOfZSBmcm9tIFpvw6sg4pyT?="))
        #expect(lines.contains("List-Unsubscribe: <https://n.example.org/u/x>"))
        #expect(!rendered.contains("dropped"))
        #expect(lines.contains("Content-Type: multipart/alternative; boundary=\"=_b\""))
        #expect(lines.filter { $0 == "--=_b" }.count == 2)
        #expect(lines.contains("--=_b--"))
        #expect(lines.contains("Content-Type: text/plain; charset=utf-8"))
        #expect(lines.contains("Content-Type: text/html; charset=utf-8"))
    }

    @Test func datesAreRFC5322InUTC() {
        #expect(MailMessage.rfc5322Date(0) == "Thu, 01 Jan 1970 00:00:00 +0000")
        #expect(MailMessage.rfc5322Date(951_782_400) == "Tue, 29 Feb 2000 00:00:00 +0000")
        #expect(MailMessage.rfc5322Date(-1) == "Wed, 31 Dec 1969 23:59:59 +0000")
    }
}
