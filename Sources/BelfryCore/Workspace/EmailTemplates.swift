import Foundation

/// A category's own email: Mustache templates for the subject, the text part and the HTML
/// part, each optional (Belfry's default stands in), with variants per locale.
public struct EmailTemplates: Codable, Hashable, Sendable {
    public var subject: String?
    public var text: String?
    public var html: String?
    /// Variants by BCP 47 language tag (`de`, `pt-BR`); a field a variant leaves out comes from above.
    public var locales: [String: EmailTemplates]?

    public init(
        subject: String? = nil, text: String? = nil, html: String? = nil, locales: [String: EmailTemplates]? = nil
    ) {
        self.subject = subject
        self.text = text
        self.html = html
        self.locales = locales
    }

    /// The templates for a user's `locale`: the variant for the whole tag (`pt-BR`), else for its
    /// language (`pt`), else these; tags compare without regard to case or `_`/`-`.
    public func variant(for locale: String?) -> EmailTemplates {
        guard let tag = matchingLocale(locale), let chosen = locales?[tag] else { return self }
        return EmailTemplates(
            subject: chosen.subject ?? subject, text: chosen.text ?? text, html: chosen.html ?? html)
    }

    /// The key in `locales` for a user's `locale`: the whole tag, else its language.
    public func matchingLocale(_ locale: String?) -> String? {
        LanguageTag.match(locale, among: locales.map { Array($0.keys) } ?? [])
    }
}
