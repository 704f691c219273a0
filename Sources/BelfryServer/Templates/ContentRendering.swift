import BelfryCore
import Foundation

/// What a notification says in one language, rendered from its category's templates (or the
/// event's own text): what the inbox, the streams and every provider read.
struct RenderedContent: Codable, Hashable, Sendable {
    var title: String
    var body: String
    var url: String?
    /// The shorter text for push channels; `nil`: the title and body.
    var pushTitle: String?
    var pushBody: String?

    enum CodingKeys: String, CodingKey {
        case title, body, url
        case pushTitle = "push_title"
        case pushBody = "push_body"
    }
}

/// An event's content in every language its category has templates for: rendered once per
/// event at intake, so that fan-out only picks each recipient's variant, and a template that
/// fails or renders badly is refused with the event rather than met at delivery.
struct LocalizedContent: Codable, Hashable, Sendable {
    /// The default (for users whose locale no variant matches).
    var base: RenderedContent
    /// By the config's language tag.
    var locales: [String: RenderedContent]

    /// The variant for a user's `locale`, with its tag (`nil`: the default).
    func variant(for locale: String?) -> (tag: String?, content: RenderedContent) {
        guard let tag = LanguageTag.match(locale, among: Array(locales.keys)), let content = locales[tag] else {
            return (nil, base)
        }
        return (tag, content)
    }

    /// The default, then each language by its tag: what intake checks and a preview shows.
    var every: [(tag: String?, content: RenderedContent)] {
        [(nil, base)] + locales.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
    }

    /// Picks each user's variant, matching each distinct locale once: fan-out asks for every
    /// recipient, and matching a tag (case and `_`/`-` folded) per recipient was a few per cent
    /// of a templated fan-out.
    struct Picker {
        let content: LocalizedContent
        private var picked: [String?: (tag: String?, content: RenderedContent)] = [:]

        init(_ content: LocalizedContent) {
            self.content = content
        }

        mutating func variant(for locale: String?) -> (tag: String?, content: RenderedContent) {
            if let known = picked[locale] { return known }
            let variant = content.variant(for: locale)
            picked[locale] = variant
            return variant
        }
    }

    /// As the `content_variants` column of an event keeps it.
    var stored: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return String(decoding: (try? encoder.encode(self)) ?? Data("{}".utf8), as: UTF8.self)
    }

    init(base: RenderedContent, locales: [String: RenderedContent]) {
        self.base = base
        self.locales = locales
    }

    init?(stored text: String?) {
        guard let text, let content = try? JSONDecoder().decode(Self.self, from: Data(text.utf8)) else { return nil }
        self = content
    }
}

/// Rendering a category's content templates.
enum ContentRendering {
    /// What content templates see: the event's `data` fields by name (and whole, as `data`),
    /// `tenant` and `category` (each with `id` and `name`), and `locale`.
    static func context(
        data: [String: JSONValue]?, category: CategoryDefinition, tenant: String, workspace: WorkspaceConfig,
        locale: String?
    ) -> [String: Any] {
        let fields = data.map { EmailComposer.plain(.object($0)) as? [String: Any] ?? [:] } ?? [:]
        var context: [String: Any] = [
            "tenant": ["id": tenant, "name": workspace.tenant(tenant)?.name ?? tenant],
            "category": ["id": category.id, "name": category.name],
        ]
        if let locale { context["locale"] = locale }
        context.merge(fields) { _, field in field }
        context["data"] = fields
        return context
    }

    /// The event's content in the default and each of the templates' languages; the parts the
    /// event gives itself (`title`, `body`, `url`) stand for every language.
    static func render(
        _ templates: ContentTemplates, given: EventRequest.Content, data: [String: JSONValue]?,
        category: CategoryDefinition, tenant: String, workspace: WorkspaceConfig
    ) throws -> LocalizedContent {
        // The data as Mustache walks it, once; each language adds only its tag.
        let shared = self.context(data: data, category: category, tenant: tenant, workspace: workspace, locale: nil)
        func one(_ tag: String?) throws -> RenderedContent {
            let variant = templates.variant(tag)
            var context = shared
            if let tag { context["locale"] = tag }
            func render(_ template: String?, _ part: String) throws -> String? {
                guard let template else { return nil }
                do {
                    return try TextTemplate.compiled(template, kind: part == "url" ? .url : .text)
                        .render(context, locale: tag)
                } catch {
                    throw TextTemplate.Problem(description: "\(part) \(error)")
                }
            }
            let title = try given.title ?? render(variant.title, "title") ?? ""
            let body = try given.body ?? render(variant.body, "body") ?? ""
            let url = try given.url ?? render(variant.url, "url").flatMap { $0.isEmpty ? nil : $0 }
            // Text the event gives itself is what every channel shows.
            let pushTitle = given.title == nil ? try render(variant.push?.title, "push.title") : nil
            let pushBody = given.body == nil ? try render(variant.push?.body, "push.body") : nil
            return RenderedContent(title: title, body: body, url: url, pushTitle: pushTitle, pushBody: pushBody)
        }
        var locales: [String: RenderedContent] = [:]
        for tag in (templates.locales ?? [:]).keys.sorted() {
            locales[tag] = try one(tag)
        }
        return LocalizedContent(base: try one(nil), locales: locales)
    }

    /// Each template of `category` that does not compile or reads a field its `data_schema`
    /// does not declare, with its path under the category.
    static func problems(in category: CategoryDefinition) -> [(path: String, message: String)] {
        var problems: [(String, String)] = []
        let declared = category.dataSchema.map {
            Set($0.properties.keys).union(["tenant", "category", "locale", "data"])
        }
        func check(_ template: String?, _ path: String, known: Set<String>?) {
            guard let template else { return }
            do {
                let compiled = try TextTemplate.compiled(template)
                if let known {
                    for name in compiled.variables.subtracting(known).sorted() {
                        problems.append((path, "reads \"\(name)\", which the category's data_schema does not declare"))
                    }
                }
            } catch {
                problems.append((path, "\(error)"))
            }
        }
        if let content = category.content {
            for (prefix, variant) in [("content", content)]
                + (content.locales ?? [:]).sorted(by: { $0.key < $1.key })
                .map({ ("content.locales.\($0.key)", $0.value) })
            {
                check(variant.title, "\(prefix).title", known: declared)
                check(variant.body, "\(prefix).body", known: declared)
                check(variant.url, "\(prefix).url", known: declared)
                check(variant.push?.title, "\(prefix).push.title", known: declared)
                check(variant.push?.body, "\(prefix).push.body", known: declared)
            }
        }
        if let batch = category.batch {
            for (prefix, variant) in [("batch", TextTemplates(title: batch.title, body: batch.body))]
                + (batch.locales ?? [:]).sorted(by: { $0.key < $1.key }).map({ ("batch.locales.\($0.key)", $0.value) })
            {
                check(variant.title, "\(prefix).title", known: nil)
                check(variant.body, "\(prefix).body", known: nil)
            }
        }
        return problems
    }
}
