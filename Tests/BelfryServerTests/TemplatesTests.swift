import BelfryCore
import BelfryTestServers
import BelfryTestSupport
import Foundation
import SQLKit
import Testing
import Vapor
import VaporTesting

@testable import BelfryServer

@Suite("Content templates: plural rules, rendering and checks")
struct TemplateRenderingTests {
    @Test("CLDR plural categories for whole numbers in the demo's languages and a few more")
    func pluralRules() {
        func forms(_ locale: String, _ counts: [Int]) -> [String] {
            counts.map { PluralRules.category(of: Double($0), locale: locale).rawValue }
        }
        #expect(forms("en", [0, 1, 2, 5, 21]) == ["other", "one", "other", "other", "other"])
        #expect(forms("de-AT", [0, 1, 2, 21]) == ["other", "one", "other", "other"])
        #expect(forms("fr", [0, 1, 2, 1_000_000]) == ["one", "one", "other", "many"])
        #expect(
            forms("ru", [1, 2, 4, 5, 11, 12, 14, 21, 22, 25, 101, 111])
                == ["one", "few", "few", "many", "many", "many", "many", "one", "few", "many", "one", "many"])
        #expect(
            forms("ar", [0, 1, 2, 3, 10, 11, 99, 100, 102, 103, 111])
                == ["zero", "one", "two", "few", "few", "many", "many", "other", "other", "few", "many"])
        #expect(forms("ja", [0, 1, 2, 21]) == ["other", "other", "other", "other"])
        #expect(forms("pl", [1, 2, 5, 12, 22, 25]) == ["one", "few", "many", "many", "few", "many"])
        #expect(forms("xx", [1, 2]) == ["one", "other"], "an unknown language counts as English does")
        #expect(PluralRules.category(of: 1.5, locale: "en") == .other, "a fraction is other")
    }

    @Test("a template renders its data, plural forms by the language, and nothing escaped")
    func rendering() throws {
        let template = try TextTemplate(
            "{{reviewer}} & {{page}}: {{#plural count}}one=eine Änderung|other={{count}} Änderungen{{/plural}}")
        #expect(template.variables == ["reviewer", "page", "count"])
        #expect(
            template.render(["reviewer": "Zoë", "page": "A<B", "count": 1], locale: "de") == "Zoë & A<B: eine Änderung")
        #expect(
            template.render(["reviewer": "Zoë", "page": "A<B", "count": 7], locale: "de") == "Zoë & A<B: 7 Änderungen")
        let russian = try TextTemplate(
            "{{#plural n}}one={{n}} правка|few={{n}} правки|many={{n}} правок|other={{n}} правки{{/plural}}")
        #expect(
            [1, 5, 21, 3].map { russian.render(["n": $0], locale: "ru") } == [
                "1 правка", "5 правок", "21 правка", "3 правки",
            ])
        #expect(russian.render(["n": "21"], locale: "ru") == "21 правка", "a number given as text counts too")
        #expect(russian.render([:], locale: "ru") == "правки", "no number: the other form")
    }

    @Test("in a URL template {{name}} is percent-encoded and {{{name}}} inserted as it is")
    func urlTemplates() throws {
        let template = try TextTemplate("https://example.org/wiki/{{page}}?from={{{back}}}", kind: .url)
        let url = template.render(["page": "Talk:Bell tower/ä", "back": "https://x.org/a?b=1"], locale: nil)
        #expect(url == "https://example.org/wiki/Talk%3ABell%20tower%2F%C3%A4?from=https://x.org/a?b=1")
        #expect(try TextTemplate("{{page}}").render(["page": "Talk:Bell tower"], locale: nil) == "Talk:Bell tower")
        let templates = ContentTemplates(title: "{{page}}", url: "https://example.org/wiki/{{page}}")
        let rendered = try ContentRendering.render(
            templates, given: .init(), data: ["page": .string("Talk:Bell tower")],
            category: WorkspaceConfig.demo.categories[0], tenant: "enwiki", workspace: .demo)
        #expect(rendered.base.title == "Talk:Bell tower")
        #expect(rendered.base.url == "https://example.org/wiki/Talk%3ABell%20tower")
    }

    @Test("a template that does not compile says why")
    func badTemplates() {
        for (text, problem) in [
            ("{{#plural n}}one=a{{/plural}}", "needs an \"other=\" form"),
            ("{{#plural n}}some=a|other=b{{/plural}}", "must start with one of"),
            ("{{#plural n}}other=b", "is not closed"),
            ("{{#section}}", "is not a valid Mustache template"),
        ] {
            #expect(throws: TextTemplate.Problem.self) { try TextTemplate(text) }
            do {
                _ = try TextTemplate(text)
            } catch {
                #expect("\(error)".contains(problem), "\(error)")
            }
        }
    }

    @Test("the config check reports templates that do not compile, bad language tags and undeclared fields")
    func configChecks() throws {
        let file = Data(
            #"""
            {"channels": [{"id": "inbox", "kind": "inbox", "name": "Inbox"}],
             "categories": [{"id": "review", "name": "Review", "channels": ["inbox"],
               "data_schema": {"properties": {"page": {"type": "string"}}, "required": ["page", "user"]},
               "content": {"title": "{{page}} by {{reviewer}}", "body": "{{#plural n}}one=x{{/plural}}",
                 "locales": {"de": {"title": "{{page}}"}, "not a tag": {"title": "x"}}}}],
             "tenants": [{"id": "w", "name": "W"}]}
            """#.utf8)
        do {
            _ = try WorkspaceConfig.decodeFile(file)
            Issue.record("the file has problems")
        } catch {
            let paths = error.issues.map(\.path)
            #expect(paths.contains("categories[0].content.locales.not a tag"), "\(error.issues)")
            #expect(paths.contains("categories[0].data_schema.required[1]"), "\(error.issues)")
        }
        var category = WorkspaceConfig.demo.categories[0]
        category.content = ContentTemplates(
            title: "{{page}} by {{reviewer}}", body: "{{#plural n}}one=x{{/plural}}",
            locales: ["de": ContentTemplates(title: "{{page}} {{tenant.name}}")])
        category.dataSchema = DataSchema(properties: ["page": .init(type: .string)])
        let problems = ContentRendering.problems(in: category)
        #expect(
            problems.map(\.path) == ["content.title", "content.body"],
            "\(problems)")
        #expect(problems[0].message.contains("\"reviewer\""))
        #expect(problems[1].message.contains("other="))
    }
}

/// One event to 3 000 readers of several languages, through every channel.
@Suite("Content templates end to end", .serialized)
struct TemplatesTests {
    /// Pages reviewed, in English (default), German, French and Arabic; push shorter.
    static var category: CategoryDefinition {
        CategoryDefinition(
            id: "page-review", name: "Page reviewed", section: "edits",
            channels: ["inbox", "ios_push", "android_push", "web_push", "webhook", "email"].map {
                CategoryChannelDefinition(channel: $0)
            },
            content: ContentTemplates(
                title: "{{reviewer}} reviewed {{page}}",
                body: "{{#plural count}}one=One change checked.|other={{count}} changes checked.{{/plural}}",
                url: "https://example.org/wiki/{{page}}",
                push: TextTemplates(title: "Reviewed: {{page}}"),
                locales: [
                    "de": ContentTemplates(
                        title: "{{reviewer}} hat {{page}} gesichtet",
                        body:
                            "{{#plural count}}one=Eine Änderung geprüft.|other={{count}} Änderungen geprüft.{{/plural}}",
                        url: "https://example.org/de/{{page}}", push: TextTemplates(title: "Gesichtet: {{page}}")),
                    "fr": ContentTemplates(
                        title: "{{reviewer}} a relu {{page}}",
                        body:
                            "{{#plural count}}one={{count}} modification vérifiée.|other={{count}} modifications vérifiées.{{/plural}}"
                    ),
                    "ar": ContentTemplates(
                        title: "راجع {{reviewer}} صفحة {{page}}", body: "تمت مراجعة {{count}} تعديلات."),
                ]),
            dataSchema: DataSchema(
                properties: [
                    "reviewer": .init(type: .string), "page": .init(type: .string), "count": .init(type: .integer),
                ],
                required: ["page"]))
    }

    static var workspace: WorkspaceConfig {
        var workspace = WorkspaceConfig.demo
        workspace.categories.append(category)
        return workspace
    }

    static let locales: [String?] = ["de-AT", "de", "fr", nil, "xx"]
    static let german = (title: "Ada hat Glocke gesichtet", body: "5 Änderungen geprüft.", push: "Gesichtet: Glocke")
    static let french = (title: "Ada a relu Glocke", body: "5 modifications vérifiées.", push: "Ada a relu Glocke")
    static let english = (title: "Ada reviewed Glocke", body: "5 changes checked.", push: "Reviewed: Glocke")

    /// What reader `index` should read, by their locale.
    static func expected(_ index: Int) -> (title: String, body: String, push: String) {
        switch index % 5 {
        case 0, 1: german
        case 2: french
        default: english
        }
    }

    @Test(
        "3 000 readers in de-AT, de, fr, no locale and xx read German, French or the default on every channel",
        arguments: TestDatabase.allCases)
    func everyChannel(database: TestDatabase) async throws {
        let apns = try await APNsTestServer()
        let fcm = try await FCMTestServer()
        let webPush = try await WebPushTestEndpoint()
        let smtp = try await SMTPTestServer(implicitTLS: false)
        let receiver = try await WebhookReceiver(answers: "200")
        defer {
            smtp.stop()
            receiver.stop()
            Task {
                await apns.shutdown()
                await fcm.shutdown()
                await webPush.shutdown()
            }
        }
        try await withBelfry(database, workspace: Self.workspace, jitter: 0.5, webhook: receiver.webhook) { settings in
            APNsChannelTests.settings(apns)(&settings)
            FCMChannelTests.settings(fcm)(&settings)
            settings.vapidSubject = WebPushChannelTests.subject
            settings.webPushAllowsLoopback = true
            settings.email = .init(smtp: smtp.location(), from: "Belfry <notify@example.org>")
            settings.publicURL = EmailChannelTests.publicURL
            settings.extraCertificatesPEM = [apns.authority, fcm.authority, webPush.authority, smtp.authority]
                .map(\.certificatePEM).joined(separator: "\n")
        } _: { app in
            // Five readers with an iPhone, an Android phone, a browser and an address; the rest inbox and webhook.
            var tokens: [String: Int] = [:]
            var endpoints: [String: Int] = [:]
            for index in 0..<5 {
                let id = "r-\(index)"
                let put = try await app.putUser(
                    id, UserUpsert(email: "\(id)@example.org", locale: Self.locales[index]))
                #expect(put.status == .ok || put.status == .created, "\(put.body.string)")
                let bearer = try await app.userToken(id)
                let apnsToken = String(repeating: String(format: "%02x", index), count: 32)
                tokens[apnsToken] = index
                _ = try await APNsChannelTests.register(app, bearer, token: apnsToken)
                let fcmToken = "fcm-\(index):APA91b" + String(repeating: "Xy_9-", count: 24)
                tokens[fcmToken] = index
                let android = try await app.send(
                    .POST, "/v1/me/devices", bearer: bearer,
                    json: DeviceRegistration(platform: .fcm, token: fcmToken, authorization: .authorized))
                #expect(android.status == .created, "\(android.body.string)")
                let browser = webPush.subscribe("reader-\(index)")
                endpoints[URL(string: browser.endpoint)!.path] = index
                #expect(try await WebPushChannelTests.register(app, bearer, browser).status == .created)
            }
            let readers = 3_000
            let storage = app.belfry.database
            let now = Date()
            try await storage.insert(
                into: "users", columns: ["id", "external_id", "locale", "created_at", "updated_at"],
                rows: (5..<readers).map { index in
                    [.id(UUID()), .text("r-\(index)"), .text(Self.locales[index % 5]), .date(now), .date(now)]
                }, rowsPerStatement: 500, on: app.db)

            let event = EventRequest(
                category: "page-review", recipients: (0..<readers).map { "r-\($0)" }, tenant: "dewiki",
                data: ["reviewer": .string("Ada"), "page": .string("Glocke"), "count": .number(5)])
            let accepted = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: event)
            #expect(accepted.status == .accepted, "\(accepted.body.string)")
            let id = try accepted.decode(EventAccepted.self).eventID
            while try await app.belfryServices.fanout.processBatch(on: app.db) {}
            let queue = try #require(app.deliveryQueue)
            while try await queue.runOnce() > 0 {}

            // Rendered once per language: every notification keeps its text and the variant's tag.
            let rows = try await app.db.sql.raw(
                """
                SELECT COALESCE(locale, '-') AS tag, title, COUNT(*) AS n FROM notifications
                WHERE event_id = \(bind: id) GROUP BY COALESCE(locale, '-'), title
                """
            ).all()
            var byTag: [String: (String, Int)] = [:]
            for row in rows {
                byTag[try row.decode(column: "tag", as: String.self)] = (
                    try row.decode(column: "title", as: String.self), try row.decode(column: "n", as: Int.self)
                )
            }
            #expect(byTag["de"]?.0 == Self.german.title && byTag["de"]?.1 == 1_200, "\(byTag)")
            #expect(byTag["fr"]?.0 == Self.french.title && byTag["fr"]?.1 == 600, "\(byTag)")
            #expect(byTag["-"]?.0 == Self.english.title && byTag["-"]?.1 == 1_200, "\(byTag)")
            #expect(byTag.count == 3, "\(byTag)")

            // The inbox, as each reader's app reads it.
            for index in 0..<5 {
                let page = try await InboxAPITests.page(app, try await app.userToken("r-\(index)"))
                let item = try #require(page.notifications.first)
                #expect(item.title == Self.expected(index).title && item.body == Self.expected(index).body)
                let tag: String? = [0, 1].contains(index) ? "de" : index == 2 ? "fr" : nil
                #expect(item.locale == tag)
                #expect(
                    item.url
                        == ([0, 1].contains(index)
                            ? "https://example.org/de/Glocke" : "https://example.org/wiki/Glocke"))
            }

            // APNs and FCM: the push text of each reader's language.
            #expect(apns.received.count == 5 && fcm.received.count == 5)
            for push in apns.received {
                let index = try #require(tokens[push.deviceToken])
                let alert = push.aps["alert"] as? [String: Any]
                #expect(alert?["title"] as? String == Self.expected(index).push, "reader \(index)")
                #expect(alert?["body"] as? String == Self.expected(index).body, "reader \(index)")
            }
            for push in fcm.received {
                let index = try #require(tokens[push.token])
                let notification = push.message["notification"] as? [String: String]
                #expect(notification?["title"] == Self.expected(index).push, "reader \(index)")
            }
            // Web Push, decrypted.
            #expect(webPush.received.count == 5)
            for push in webPush.received {
                let index = try #require(endpoints[push.path])
                let message = try #require(
                    push.plaintext.flatMap { try JSONSerialization.jsonObject(with: $0) as? [String: Any] })
                #expect(message["title"] as? String == Self.expected(index).push, "reader \(index)")
                #expect(message["body"] as? String == Self.expected(index).body, "reader \(index)")
            }
            // The webhook: one body per reader, in their language.
            var titles: [String: Int] = [:]
            for entry in try receiver.entries() {
                guard case .object(let body) = entry.body, case .object(let notification)? = body["notification"],
                    case .string(let title)? = notification["title"]
                else { continue }
                titles[title, default: 0] += 1
            }
            #expect(
                titles == [Self.german.title: 1_200, Self.french.title: 600, Self.english.title: 1_200], "\(titles)")
            // Email: the subject (the default email's `{{title}}`) and the text part.
            let mails = try smtp.received()
            #expect(mails.count == 5)
            for mail in mails {
                let index = try #require(Int(mail.rcpt_tos[0].dropFirst(2).prefix { $0 != "@" }))
                #expect(mail.headers["Subject"] == Self.expected(index).title, "reader \(index)")
                #expect(mail.part("text/plain")?.content.contains(Self.expected(index).body) == true, "reader \(index)")
            }
        }
    }

    @Test("an event may override parts of the template; a template event lacking required data is refused")
    func overridesAndRefusals() async throws {
        try await withBelfry(.sqlite, workspace: Self.workspace) { app in
            _ = try await app.putUser("jonas", UserUpsert(locale: "de"))
            let event = EventRequest(
                category: "page-review", recipients: ["jonas"], tenant: "dewiki",
                content: .init(title: "Eigener Titel"),
                data: ["reviewer": .string("Ada"), "page": .string("Glocke"), "count": .number(1)])
            #expect(try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: event).status == .accepted)
            while try await app.belfryServices.fanout.processBatch(on: app.db) {}
            let item = try #require(
                try await InboxAPITests.page(app, try await app.userToken("jonas")).notifications.first)
            #expect(item.title == "Eigener Titel", "the event's own title stands for every language")
            #expect(item.body == "Eine Änderung geprüft.", "the body is the template's, in German, singular")

            let missing = EventRequest(
                category: "page-review", recipients: ["jonas"],
                data: ["reviewer": .string("Ada"), "count": .string("x")])
            let refused = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: missing)
            #expect(refused.status == .unprocessableEntity)
            #expect(refused.body.string.contains(#"field \"data.page\" is required by category \"page-review\""#))
            #expect(refused.body.string.contains(#"field \"data.count\" must be of type integer"#))

            let literal = EventRequest(category: "reverted", recipients: ["jonas"], content: .init(body: "no title"))
            let noTitle = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: literal)
            #expect(noTitle.status == .unprocessableEntity)
            #expect(
                noTitle.body.string.contains("category \\\"reverted\\\" has no content templates"),
                "\(noTitle.body.string)")
        }
    }

    @Test("a digest's summary is in the reader's language, its plural by the language's rules")
    func digestInRussian() {
        let rule = BatchRule(
            windowSeconds: 60, title: "{{count}} new edits",
            locales: [
                "ru": TextTemplates(
                    title:
                        "{{#plural count}}one={{count}} новая правка|few={{count}} новые правки|many={{count}} новых правок|other={{count}} правки{{/plural}}"
                )
            ])
        func title(_ count: Int, _ locale: String?) -> String {
            let item = NotificationBatch.Item(
                eventID: UUID(), title: "T", body: "B", url: nil, data: nil, createdAt: Date())
            return BatchText.render(rule, NotificationBatch(count: count, items: [item]), locale: locale).title
        }
        #expect(title(1, "ru-RU") == "1 новая правка")
        #expect(title(5, "ru") == "5 новых правок")
        #expect(title(21, "ru") == "21 новая правка")
        #expect(title(3, "ru") == "3 новые правки")
        #expect(title(5, "en") == "5 new edits")
        #expect(BatchText.render(rule, NotificationBatch(count: 5, items: []), locale: "ru").locale == "ru")
    }

    @Test(
        "the console and belfry templates render preview the demo's templates in every language, Arabic right to left")
    func previews() async throws {
        try await withBelfry(.sqlite) { app in
            let signedIn = try await app.send(
                .POST, "/admin/session", rawBody: "api_key=\(testAPIKey)", headers: ConsoleTests.form)
            let cookie = try #require(signedIn.headers.setCookie?[ConsoleSession.cookieName])
            let session: HTTPHeaders = ["Cookie": "\(ConsoleSession.cookieName)=\(cookie.string)"]
            let data = #"{"actor":"Ada","page":"Glocke","edits":11}"#
            let query = "category=edit-thank&data=\(data.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)"
            let page = try await app.send(.GET, "/admin/templates?\(query)", headers: session)
            #expect(page.status == .ok)
            let html = page.body.string
            #expect(html.contains("Ada thanked you for your edit on Glocke"), "the default")
            #expect(html.contains("Deine 11 Bearbeitungen wurden geschätzt."), "German, plural")
            #expect(html.contains(#"<dd lang="ar" dir="rtl">قُدِّر 11 تعديلًا.</dd>"#), "Arabic, many, right to left")

            let bad = try await app.send(.GET, "/admin/templates?category=mention&data=%5B1%5D", headers: session)
            #expect(bad.body.string.contains("must be a JSON object"))
            let signedOut = try await app.send(.GET, "/admin/templates")
            #expect(signedOut.status == .unauthorized)
        }
        let workspace = WorkspaceConfig.demo
        let digest = try TemplatesCommand.Render.preview(
            try #require(workspace.category("new-activity-digest")), data: [:], tenant: "enwiki", locale: "ar",
            count: 2, workspace: workspace)
        #expect(digest.contains("[digest of 2, ar for ar]\ntitle: تغييران في الصفحات التي تراقبها"), "\(digest)")
        let mention = try TemplatesCommand.Render.preview(
            try #require(workspace.category("mention")), data: ["actor": .string("Ada"), "page": .string("Glocke")],
            tenant: "dewiki", locale: "de-AT", count: 1, workspace: workspace)
        #expect(mention.contains("[de for de-AT]\ntitle: Ada hat dich auf Glocke erwähnt"), "\(mention)")
        #expect(mention.contains("push title: Erwähnung auf Glocke"))
    }
}
