import Foundation

/// CLDR's plural categories for whole numbers, by language: which form of a word a count takes
/// ("1 item", "5 items"; Russian "1 статья", "2 статьи", "5 статей", "21 статья"). The rules
/// are those of the Unicode CLDR plural rules chart (cldr.unicode.org, "Language Plural Rules")
/// for integers, the only numbers templates count.
enum PluralRules {
    enum Category: String, CaseIterable, Sendable {
        case zero, one, two, few, many, other
    }

    /// The category of `count` in the language of `locale` (its first part); `other` for a
    /// language without a rule here, and for a number that is not whole.
    static func category(of count: Double, locale: String?) -> Category {
        guard count.rounded() == count, abs(count) < 1e15 else { return .other }
        let n = Int(abs(count))
        let language = (locale.map(LanguageTagPart.language) ?? "en")
        let rule = rules[language] ?? .oneOther
        return rule.category(n)
    }

    /// The categories a language uses, for checking a template's forms.
    static func categories(locale: String?) -> [Category] {
        let language = (locale.map(LanguageTagPart.language) ?? "en")
        return (rules[language] ?? .oneOther).categories
    }

    private enum Rule {
        /// No forms by number: Japanese, Chinese, Korean, Thai, Vietnamese, Indonesian.
        case otherOnly
        /// one: n = 1. English, German, Dutch, Swedish, Greek, Hungarian, Turkish…
        case oneOther
        /// one: n = 0 or 1. Hindi, Bengali, Persian, Gujarati, Kannada, Zulu, Amharic.
        case zeroOrOne
        /// one: n = 1; many: a non-zero multiple of a million. Spanish, Italian, Catalan.
        case oneManyOther
        /// one: n = 0 or 1; many: a non-zero multiple of a million. French, Portuguese (Brazil).
        case french
        /// one, few, many by the last digits. Russian, Ukrainian, Belarusian.
        case eastSlavic
        /// one: n = 1; few, many by the last digits. Polish.
        case polish
        /// one: n = 1; few: 2–4. Czech, Slovak.
        case czech
        /// zero, one, two, few (3–10), many (11–99) by the last two digits. Arabic.
        case arabic
        /// one: n = 1; two: n = 2; other. Hebrew.
        case hebrew

        func category(_ n: Int) -> Category {
            let mod10 = n % 10
            let mod100 = n % 100
            switch self {
            case .otherOnly:
                return .other
            case .oneOther:
                return n == 1 ? .one : .other
            case .zeroOrOne:
                return n <= 1 ? .one : .other
            case .oneManyOther:
                if n == 1 { return .one }
                return n != 0 && n % 1_000_000 == 0 ? .many : .other
            case .french:
                if n == 0 || n == 1 { return .one }
                return n % 1_000_000 == 0 ? .many : .other
            case .eastSlavic:
                if mod10 == 1 && mod100 != 11 { return .one }
                if (2...4).contains(mod10) && !(12...14).contains(mod100) { return .few }
                return .many
            case .polish:
                if n == 1 { return .one }
                if (2...4).contains(mod10) && !(12...14).contains(mod100) { return .few }
                return .many
            case .czech:
                if n == 1 { return .one }
                return (2...4).contains(n) ? .few : .other
            case .arabic:
                switch n {
                case 0: return .zero
                case 1: return .one
                case 2: return .two
                default:
                    if (3...10).contains(mod100) { return .few }
                    if (11...99).contains(mod100) { return .many }
                    return .other
                }
            case .hebrew:
                return n == 1 ? .one : n == 2 ? .two : .other
            }
        }

        var categories: [Category] {
            switch self {
            case .otherOnly: [.other]
            case .oneOther, .zeroOrOne: [.one, .other]
            case .oneManyOther: [.one, .many, .other]
            case .french: [.one, .many, .other]
            case .eastSlavic, .polish: [.one, .few, .many, .other]
            case .czech: [.one, .few, .other]
            case .arabic: [.zero, .one, .two, .few, .many, .other]
            case .hebrew: [.one, .two, .other]
            }
        }
    }

    private static let rules: [String: Rule] = {
        var rules: [String: Rule] = [:]
        for language in ["ja", "zh", "ko", "th", "vi", "id", "ms", "my", "lo", "km"] { rules[language] = .otherOnly }
        for language in [
            "en", "de", "nl", "sv", "da", "nb", "no", "nn", "fi", "et", "el", "hu", "tr", "bg", "eu", "gl", "af",
            "sw", "ur", "az", "ka", "kk", "uz", "ta", "te", "ml", "mr",
        ] {
            rules[language] = .oneOther
        }
        for language in ["hi", "bn", "fa", "gu", "kn", "zu", "am"] { rules[language] = .zeroOrOne }
        for language in ["es", "it", "ca"] { rules[language] = .oneManyOther }
        rules["fr"] = .french
        rules["pt"] = .french
        for language in ["ru", "uk", "be"] { rules[language] = .eastSlavic }
        rules["pl"] = .polish
        for language in ["cs", "sk"] { rules[language] = .czech }
        rules["ar"] = .arabic
        rules["he"] = .hebrew
        rules["iw"] = .hebrew
        return rules
    }()
}

/// Parts of a language tag.
enum LanguageTagPart {
    /// `de` of `de-AT`, lower case.
    static func language(_ tag: String) -> String {
        String(tag.lowercased().prefix { $0 != "-" && $0 != "_" })
    }
}
