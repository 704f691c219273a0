import Foundation
import Mustache
import NIOConcurrencyHelpers

/// A template from the workspace config for text (a title, a body, a URL): Mustache with
/// nothing escaped, plus plural forms chosen by CLDR's rules for the reader's language:
///
///     {{#plural count}}one={{count}} new reply|other={{count}} new replies{{/plural}}
///
/// Forms are `zero`, `one`, `two`, `few`, `many` and `other` (required), separated by `|`;
/// a form the language does not use is never chosen, one it uses but the template lacks
/// falls back to `other`. Each form is itself a Mustache template.
struct TextTemplate: Sendable {
    struct Problem: Error, CustomStringConvertible {
        var description: String
    }

    private struct Plural: Sendable {
        var variable: String
        var forms: [PluralRules.Category: MustacheTemplate]
    }

    private let main: MustacheTemplate
    private let plurals: [Plural]
    /// The first part of every name the template reads (`page` of `page.title`).
    let variables: Set<String>

    /// What the template writes: text, where nothing is escaped, or a URL, where `{{name}}`
    /// percent-encodes the value (a page called "Talk:Bell tower" makes a working link) and
    /// `{{{name}}}` inserts it as it is (a whole URL given in `data`).
    enum Kind: String, Sendable {
        case text = "TEXT"
        case url = "PERCENT_ENCODED"
    }

    /// The compiled template for `text`, compiled once per process.
    static func compiled(_ text: String, kind: Kind = .text) throws -> TextTemplate {
        let key = kind.rawValue + ":" + text
        if let known = cache.withLockedValue({ $0[key] }) { return known }
        let template = try TextTemplate(text, kind: kind)
        cache.withLockedValue { cache in
            // Templates come from the config; a bound keeps a long-lived process small all the same.
            if cache.count >= 10_000 { cache.removeAll() }
            cache[key] = template
        }
        return template
    }

    private static let cache = NIOLockedValueBox<[String: TextTemplate]>([:])

    /// RFC 3986's unreserved characters, the only ones a URL template's `{{name}}` leaves as they are.
    private struct URLContentType: MustacheContentType {
        static let unreserved = CharacterSet(
            charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

        func escapeText(_ text: String) -> String {
            text.addingPercentEncoding(withAllowedCharacters: Self.unreserved) ?? text
        }
    }

    private static let registered: Void = MustacheContentTypes.register(URLContentType(), named: Kind.url.rawValue)
    private static var pluralBlock: Regex<(Substring, Substring, Substring)> {
        /\{\{#plural\s+([A-Za-z_][A-Za-z0-9_.]*)\s*\}\}(.*?)\{\{\/plural\}\}/.dotMatchesNewlines()
    }
    private static var tag: Regex<(Substring, Substring, Substring)> {
        /\{\{\{?\s*([#^&\/]?)\s*([A-Za-z_][A-Za-z0-9_.\-]*)/
    }

    init(_ text: String, kind: Kind = .text) throws {
        _ = Self.registered
        var plurals: [Plural] = []
        var variables = Set<String>()
        var source = ""
        var rest = Substring(text)
        while let match = rest.firstMatch(of: Self.pluralBlock) {
            source += rest[..<match.range.lowerBound]
            let variable = String(match.output.1)
            var forms: [PluralRules.Category: MustacheTemplate] = [:]
            for part in match.output.2.split(separator: "|", omittingEmptySubsequences: false) {
                guard let equals = part.firstIndex(of: "="),
                    let category = PluralRules.Category(rawValue: part[..<equals].trimmingCharacters(in: .whitespaces))
                else {
                    throw Problem(
                        description: "the plural form \"\(part.prefix(30))\" must start with one of "
                            + "zero=, one=, two=, few=, many=, other=")
                }
                let form = String(part[part.index(after: equals)...])
                forms[category] = try Self.mustache(form, kind: kind)
                variables.formUnion(Self.names(in: form))
            }
            guard forms[.other] != nil else {
                throw Problem(description: "the plural of \"\(variable)\" needs an \"other=\" form")
            }
            variables.insert(Self.first(of: variable))
            source += "{{{belfry_plural_\(plurals.count)}}}"
            plurals.append(Plural(variable: variable, forms: forms))
            rest = rest[match.range.upperBound...]
        }
        source += rest
        if source.contains("{{#plural") || source.contains("{{/plural}}") {
            throw Problem(description: "a {{#plural name}} block is not closed by {{/plural}}, or names no variable")
        }
        main = try Self.mustache(source, kind: kind)
        self.plurals = plurals
        self.variables = variables.union(Self.names(in: source)).filter { !$0.hasPrefix("belfry_plural_") }
    }

    /// The text for `context`, plural forms chosen for `locale`'s language; trimmed.
    func render(_ context: [String: Any], locale: String?) -> String {
        var context = context
        for (index, plural) in plurals.enumerated() {
            let value = Self.number(Self.lookUp(plural.variable, in: context))
            let category = value.map { PluralRules.category(of: $0, locale: locale) } ?? .other
            let form = plural.forms[category] ?? plural.forms[.other]
            context["belfry_plural_\(index)"] = form?.render(context) ?? ""
        }
        return main.render(context).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    private static func mustache(_ text: String, kind: Kind) throws -> MustacheTemplate {
        do {
            return try MustacheTemplate(string: "{{%CONTENT_TYPE:\(kind.rawValue)}}" + text)
        } catch {
            throw Problem(description: "is not a valid Mustache template: \(error)")
        }
    }

    private static func names(in text: String) -> Set<String> {
        Set(text.matches(of: tag).filter { $0.output.1 != "/" }.map { first(of: String($0.output.2)) })
    }

    private static func first(of path: String) -> String {
        String(path.prefix { $0 != "." })
    }

    private static func lookUp(_ path: String, in context: [String: Any]) -> Any? {
        var value: Any? = context
        for part in path.split(separator: ".") {
            value = (value as? [String: Any])?[String(part)]
        }
        return value
    }

    private static func number(_ value: Any?) -> Double? {
        switch value {
        case let int as Int: Double(int)
        case let double as Double: double
        case let text as String: Double(text)
        default: nil
        }
    }
}
