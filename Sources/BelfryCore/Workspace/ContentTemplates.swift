import Foundation

/// A category's content as Mustache templates over the event's `data` (with `tenant`, and
/// `count` in a digest), so that an event may leave its `content` out, or give only the parts
/// it overrides. Each recipient reads the variant for their locale; push channels read the
/// shorter `push` text where there is one.
public struct ContentTemplates: Codable, Hashable, Sendable {
    public var title: String?
    public var body: String?
    public var url: String?
    /// A shorter text for APNs, FCM and Web Push; a part left out is the `title` or `body`.
    public var push: TextTemplates?
    /// Variants by BCP 47 language tag (`de`, `pt-BR`); a part a variant leaves out comes from above.
    public var locales: [String: ContentTemplates]?

    public init(
        title: String? = nil, body: String? = nil, url: String? = nil, push: TextTemplates? = nil,
        locales: [String: ContentTemplates]? = nil
    ) {
        self.title = title
        self.body = body
        self.url = url
        self.push = push
        self.locales = locales
    }

    /// The templates for the variant `tag` names (`matchingLocale`), each part left out taken from
    /// the default. A variant's push text falls back to its own title and body before the
    /// default's push text: a reader of that language never gets the default's.
    public func variant(_ tag: String?) -> ContentTemplates {
        guard let tag, let chosen = locales?[tag] else {
            return ContentTemplates(title: title, body: body, url: url, push: push)
        }
        let push = TextTemplates(
            title: chosen.push?.title ?? (chosen.title == nil ? self.push?.title : nil),
            body: chosen.push?.body ?? (chosen.body == nil ? self.push?.body : nil))
        return ContentTemplates(
            title: chosen.title ?? title, body: chosen.body ?? body, url: chosen.url ?? url,
            push: push.title == nil && push.body == nil ? nil : push)
    }

    /// The key in `locales` for a user's `locale`: the whole tag, else its language; `nil` for the default.
    public func matchingLocale(_ locale: String?) -> String? {
        LanguageTag.match(locale, among: locales.map { Array($0.keys) } ?? [])
    }
}

/// A title and a body as templates: a channel's shorter text, or a digest's summary in a language.
public struct TextTemplates: Codable, Hashable, Sendable {
    public var title: String?
    public var body: String?

    public init(title: String? = nil, body: String? = nil) {
        self.title = title
        self.body = body
    }
}

/// The fields a category's events carry in `data`, declared (a small part of JSON Schema:
/// `properties`, each with an optional `type`, and `required`), so that templates naming
/// other fields are reported at load and events lacking a required one are refused.
public struct DataSchema: Codable, Hashable, Sendable {
    public enum FieldType: String, Codable, Hashable, Sendable, CaseIterable {
        case string, number, integer, boolean, object, array
    }

    /// One declared field.
    public struct Field: Codable, Hashable, Sendable {
        public var type: FieldType?

        public init(type: FieldType? = nil) {
            self.type = type
        }
    }

    public var properties: [String: Field]
    public var required: [String]

    public init(properties: [String: Field], required: [String] = []) {
        self.properties = properties
        self.required = required
    }
}

/// Matching a user's locale to the variants a config names.
public enum LanguageTag {
    /// The one of `tags` for `locale`: the whole tag, else its language; tags compare without
    /// regard to case or `_`/`-`.
    public static func match(_ locale: String?, among tags: [String]) -> String? {
        guard let locale, !tags.isEmpty else { return nil }
        let wanted = normal(locale)
        let language = String(wanted.prefix { $0 != "-" })
        let keys = tags.sorted()
        return keys.first { normal($0) == wanted } ?? keys.first { normal($0) == language }
    }

    /// Lower case with `-` between parts.
    public static func normal(_ tag: String) -> String { tag.lowercased().replacingOccurrences(of: "_", with: "-") }

    /// Whether `tag` is written right to left: Arabic, Hebrew, Persian, Urdu and the other
    /// languages (or scripts) so written.
    public static func isRightToLeft(_ tag: String?) -> Bool {
        guard let tag else { return false }
        let parts = normal(tag).split(separator: "-")
        if parts.contains(where: { ["arab", "hebr", "thaa", "syrc", "nkoo", "adlm", "rohg"].contains($0) }) {
            return true
        }
        return parts.first.map { ["ar", "he", "iw", "fa", "ur", "ps", "sd", "ug", "yi", "dv", "ckb"].contains($0) }
            ?? false
    }
}
