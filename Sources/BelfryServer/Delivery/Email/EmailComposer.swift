import BelfryCore
import BelfryJSON
import BelfryMail
import Foundation
import Mustache

/// Turns a delivery into an email: the category's templates (or Belfry's own) for the user's
/// locale, rendered over the notification, with the links every email carries: the preference
/// center, and where the user may turn this email off, a one-click unsubscribe (RFC 8058).
struct EmailComposer: Sendable {
    let from: MailAddress
    /// The address users reach Belfry at, without a trailing slash.
    let publicURL: String
    let signer: WebSigner
    let workspace: WorkspaceConfig
    let now: @Sendable () -> Date
    private let templates: [String: Compiled]

    /// One category's templates compiled: for its own fields, and per locale tag.
    private struct Compiled: Sendable {
        var base: TemplateSet
        var locales: [String: TemplateSet]
    }

    struct TemplateSet: Sendable {
        var subject: MustacheTemplate
        var text: MustacheTemplate
        var html: MustacheTemplate
    }

    /// How long the links in an email work. Mail is read late; an unsubscribe link must work
    /// for at least 60 days (RFC 8058 leaves it open; mailbox providers ask for that much).
    static let unsubscribeLifetime = 180 * 86400
    static let pageLinkLifetime = 30 * 86400

    init(
        from: MailAddress, publicURL: String, signer: WebSigner, workspace: WorkspaceConfig,
        now: @escaping @Sendable () -> Date
    ) throws {
        self.from = from
        self.publicURL = publicURL
        self.signer = signer
        self.workspace = workspace
        self.now = now
        let defaults = try Self.defaultSet()
        var templates: [String: Compiled] = [:]
        for category in workspace.categories {
            guard let email = category.email else { continue }
            var compiled = Compiled(base: try Self.compile(email, over: defaults), locales: [:])
            for tag in (email.locales ?? [:]).keys {
                compiled.locales[tag] = try Self.compile(email.variant(for: tag), over: defaults)
            }
            templates[category.id] = compiled
        }
        self.templates = templates
        self.defaults = defaults
    }

    private let defaults: TemplateSet

    /// The email for `delivery`, to `address`.
    func message(for delivery: Delivery, to address: String, locale: String?) throws -> MailMessage {
        let content = delivery.content
        let category = content.category
        let set: TemplateSet
        if let compiled = templates[category.id] {
            let tag = category.email?.matchingLocale(locale)
            set = tag.flatMap { compiled.locales[$0] } ?? compiled.base
        } else {
            set = defaults
        }
        let links = try self.links(for: delivery)
        let context = self.context(for: delivery, links: links, locale: locale)
        var headers: [MailMessage.Header] = [
            .init("Auto-Submitted", "auto-generated", structured: true),
            .init("X-Belfry-Category", category.id, structured: true),
            .init("X-Belfry-Tenant", content.tenant, structured: true),
            .init("X-Belfry-Delivery", delivery.id.lowerCaseText, structured: true),
        ]
        if let unsubscribe = links.unsubscribe {
            headers.append(.init("List-Unsubscribe", "<\(unsubscribe)>", structured: true))
            headers.append(.init("List-Unsubscribe-Post", "List-Unsubscribe=One-Click", structured: true))
        }
        let subject = set.subject.render(context).trimmingCharacters(in: .whitespacesAndNewlines)
        return MailMessage(
            from: from, to: try MailAddress(address: address), subject: subject.isEmpty ? content.title : subject,
            text: set.text.render(context), html: set.html.render(context),
            date: Int64(now().timeIntervalSince1970),
            // One per delivery: a retry sends the same Message-ID, so mail systems see a repeat.
            messageID: "\(delivery.id.lowerCaseText)@\(from.domain)", headers: headers)
    }

    struct Links {
        var preferences: String
        var inbox: String
        /// `nil` when the user cannot turn this email off (the category or its email is not editable).
        var unsubscribe: String?
    }

    private func links(for delivery: Delivery) throws -> Links {
        let content = delivery.content
        let now = now()
        let tenant = "&tenant=" + (content.tenant.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")
        func page(_ name: String) throws -> String {
            let link = try signer.link(
                page: name, userID: delivery.userID, externalID: delivery.externalUserID, now: now,
                lifetime: Self.pageLinkLifetime)
            return "\(publicURL)/\(name)?link=\(link)\(tenant)"
        }
        var unsubscribe: String?
        if Self.canUnsubscribe(from: delivery.channel.id, in: content.category) {
            let token = try signer.sign(
                UnsubscribeLink(
                    uid: delivery.userID, category: content.category.id, channel: delivery.channel.id,
                    tenant: content.tenant, exp: Int(now.timeIntervalSince1970) + Self.unsubscribeLifetime))
            unsubscribe = "\(publicURL)/unsubscribe/\(token)"
        }
        return Links(preferences: try page("preferences"), inbox: try page("inbox"), unsubscribe: unsubscribe)
    }

    /// Whether the user may turn `channel` off for `category`: both editable, and not a channel
    /// the category always uses.
    static func canUnsubscribe(from channel: String, in category: CategoryDefinition) -> Bool {
        category.isEditable && category.channel(channel)?.isEditable == true && !category.isMandatory(channel)
    }

    /// What templates see: the notification's fields, its `data`, the category, tenant, user,
    /// links, and for a digest its `batch`.
    private func context(for delivery: Delivery, links: Links, locale: String?) -> [String: Any] {
        let content = delivery.content
        let data = content.data.flatMap(JSONValue.storedData).map { Self.plain(.object($0)) } ?? [String: Any]()
        let actions: [[String: Any]] = content.category.actions.map { action in
            [
                "id": action.id, "title": action.title,
                "url": action.opensApp ? (content.url ?? links.inbox) : links.inbox,
            ]
        }
        // The language of the text: the template variant's, else the user's.
        let language = content.locale ?? (locale?.split(separator: "-").first).map(String.init) ?? "en"
        var linkValues: [String: Any] = ["preferences": links.preferences, "inbox": links.inbox]
        if let unsubscribe = links.unsubscribe { linkValues["unsubscribe"] = unsubscribe }
        var context: [String: Any] = [
            "title": content.title, "body": content.body,
            "category": ["id": content.category.id, "name": content.category.name],
            "tenant": ["id": content.tenant, "name": workspace.tenant(content.tenant)?.name ?? content.tenant],
            "user": ["id": delivery.externalUserID],
            "data": data, "actions": actions, "has_actions": !actions.isEmpty, "links": linkValues,
            "created_at": content.createdAt.ISO8601Format(),
            "language": language,
            "direction": LanguageTag.isRightToLeft(language) ? "rtl" : "ltr",
        ]
        if let url = content.url { context["url"] = url }
        if let image = content.imageURL { context["image_url"] = image }
        // A digest lists its events: `batch.count`, `batch.more`, `batch.items`, `batch.first`.
        if let batch = content.batch { context["batch"] = BatchText.context(batch) }
        return context
    }

    /// JSON as the plain values Mustache walks: dictionaries, arrays, strings, numbers, booleans.
    static func plain(_ value: JSONValue) -> Any {
        switch value {
        case .object(let fields): fields.mapValues(plain)
        case .array(let elements): elements.map(plain)
        case .string(let text): text
        case .number(let number): number.rounded() == number && abs(number) < 1e15 ? Int(number) : number
        case .bool(let flag): flag
        case .null: ""
        }
    }

    private static func compile(_ email: EmailTemplates, over defaults: TemplateSet) throws -> TemplateSet {
        TemplateSet(
            subject: try email.subject.map { try MustacheTemplate(string: plainText + $0) } ?? defaults.subject,
            text: try email.text.map { try MustacheTemplate(string: plainText + $0) } ?? defaults.text,
            html: try email.html.map { try MustacheTemplate(string: $0) } ?? defaults.html)
    }

    /// Subjects and text parts are not HTML: nothing in them is escaped.
    static let plainText = "{{%CONTENT_TYPE:TEXT}}"

    /// What is wrong with a template from the workspace config, or `nil` when it compiles.
    static func templateProblem(_ template: String, plain: Bool) -> String? {
        do {
            _ = try MustacheTemplate(string: (plain ? plainText : "") + template)
            return nil
        } catch {
            return "is not a valid Mustache template: \(error)"
        }
    }

    private static func defaultSet() throws -> TemplateSet {
        func resource(_ name: String) throws -> String {
            guard
                let url = Bundle.module.url(
                    forResource: name, withExtension: "mustache", subdirectory: "Resources/email")
            else { throw StartupError("the email template \(name) is missing from the BelfryServer bundle") }
            return try String(contentsOf: url, encoding: .utf8)
        }
        return TemplateSet(
            subject: try MustacheTemplate(string: plainText + "{{title}}"),
            text: try MustacheTemplate(string: plainText + (try resource("notification.txt"))),
            html: try MustacheTemplate(string: try resource("notification.html")))
    }
}

extension EmailTemplates {
    /// Each template that does not compile, with its path under `email` and what is wrong.
    static func problems(in category: CategoryDefinition) -> [(path: String, message: String)] {
        guard let email = category.email else { return [] }
        var problems: [(String, String)] = []
        func check(_ template: String?, _ path: String, plain: Bool) {
            if let problem = template.flatMap({ EmailComposer.templateProblem($0, plain: plain) }) {
                problems.append((path, problem))
            }
        }
        check(email.subject, "subject", plain: true)
        check(email.text, "text", plain: true)
        check(email.html, "html", plain: false)
        for (tag, variant) in email.locales ?? [:] {
            check(variant.subject, "locales.\(tag).subject", plain: true)
            check(variant.text, "locales.\(tag).text", plain: true)
            check(variant.html, "locales.\(tag).html", plain: false)
        }
        return problems
    }
}
