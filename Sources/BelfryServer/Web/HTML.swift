import Foundation

/// A piece of HTML built from typed parts. Text and attribute values are escaped when
/// rendered; tag and attribute names are string literals, so no user data can become markup.
indirect enum HTML: Sendable {
    case element(StaticString, [HTMLAttribute], [HTML])
    /// An element without content or end tag (`<input>`, `<meta>`, `<link>`).
    case void(StaticString, [HTMLAttribute])
    case text(String)
    case fragment([HTML])

    /// The markup, escaped.
    var rendered: String {
        var output = ""
        render(into: &output)
        return output
    }

    /// A whole document, with its doctype.
    var document: String { "<!doctype html>\n" + rendered }

    private func render(into output: inout String) {
        switch self {
        case .element(let tag, let attributes, let children):
            open(tag, attributes, into: &output)
            for child in children { child.render(into: &output) }
            output += "</\(tag)>"
        case .void(let tag, let attributes):
            open(tag, attributes, into: &output)
        case .text(let text):
            output += HTML.escape(text, quotes: false)
        case .fragment(let children):
            for child in children { child.render(into: &output) }
        }
    }

    private func open(_ tag: StaticString, _ attributes: [HTMLAttribute], into output: inout String) {
        output += "<\(tag)"
        for attribute in attributes {
            switch attribute.value {
            case .none: continue
            case .flag: output += " \(attribute.name)"
            case .text(let value): output += " \(attribute.name)=\"\(HTML.escape(value, quotes: true))\""
            }
        }
        output += ">"
    }

    /// Escapes `&`, `<`, `>` and, in attribute values, `"` and `'`.
    static func escape(_ text: String, quotes: Bool) -> String {
        var escaped = ""
        escaped.reserveCapacity(text.utf8.count)
        for character in text.unicodeScalars {
            switch character {
            case "&": escaped += "&amp;"
            case "<": escaped += "&lt;"
            case ">": escaped += "&gt;"
            case "\"" where quotes: escaped += "&quot;"
            case "'" where quotes: escaped += "&#39;"
            default: escaped.unicodeScalars.append(character)
            }
        }
        return escaped
    }
}

/// An attribute: a value, a boolean flag, or nothing (left out when rendered).
struct HTMLAttribute: Sendable {
    enum Value: Sendable {
        case text(String)
        case flag
        case none
    }

    let name: StaticString
    let value: Value

    init(_ name: StaticString, _ value: String?) {
        self.name = name
        self.value = value.map(Value.text) ?? .none
    }

    /// A boolean attribute (`disabled`, `checked`, `hidden`), present when `on`.
    static func flag(_ name: StaticString, _ on: Bool = true) -> HTMLAttribute {
        HTMLAttribute(name: name, value: on ? .flag : .none)
    }

    private init(name: StaticString, value: Value) {
        self.name = name
        self.value = value
    }

    static func `class`(_ value: String?) -> Self { .init("class", value) }
    static func id(_ value: String?) -> Self { .init("id", value) }
    static func href(_ value: String?) -> Self { .init("href", value) }
    static func name(_ value: String?) -> Self { .init("name", value) }
    static func type(_ value: String) -> Self { .init("type", value) }
    static func value(_ value: String?) -> Self { .init("value", value) }
    static func role(_ value: String) -> Self { .init("role", value) }
    static func `for`(_ value: String) -> Self { .init("for", value) }
    static func aria(_ name: StaticString, _ value: String?) -> Self { .init(name, value) }
    static func data(_ name: StaticString, _ value: String?) -> Self { .init(name, value) }
}

/// Builds lists of `HTML` with Swift's `if`, `for` and optionals.
@resultBuilder
enum HTMLBuilder {
    static func buildBlock(_ parts: [HTML]...) -> [HTML] { parts.flatMap { $0 } }
    static func buildExpression(_ node: HTML) -> [HTML] { [node] }
    static func buildExpression(_ nodes: [HTML]) -> [HTML] { nodes }
    static func buildExpression(_ text: String) -> [HTML] { [.text(text)] }
    static func buildOptional(_ part: [HTML]?) -> [HTML] { part ?? [] }
    static func buildEither(first: [HTML]) -> [HTML] { first }
    static func buildEither(second: [HTML]) -> [HTML] { second }
    static func buildArray(_ parts: [[HTML]]) -> [HTML] { parts.flatMap { $0 } }
}

/// An element with content: `el("p", .class("note")) { "Saved." }`.
func el(_ tag: StaticString, _ attributes: HTMLAttribute..., @HTMLBuilder content: () -> [HTML] = { [] }) -> HTML {
    .element(tag, attributes, content())
}

/// An element without content: `void("input", .type("checkbox"))`.
func void(_ tag: StaticString, _ attributes: HTMLAttribute...) -> HTML {
    .void(tag, attributes)
}

extension HTML {
    /// A data table whose body cells carry their column's heading as `data-label`: on a narrow
    /// screen the rows stack as cards and each value shows its heading (belfry.css).
    func labellingCells() -> HTML {
        guard case .element(let tag, let attributes, let children) = self, tag.description == "table" else {
            return self
        }
        let headings =
            children.lazy.compactMap { child -> [String]? in
                guard case .element(let part, _, let rows) = child, part.description == "thead",
                    case .element(_, _, let cells)? = rows.first
                else { return nil }
                return cells.map(\.plainText)
            }.first ?? []
        return .element(
            tag, attributes,
            children.map { child in
                guard case .element(let part, let partAttributes, let rows) = child, part.description == "tbody" else {
                    return child
                }
                return .element(part, partAttributes, rows.map { $0.labelled(headings) })
            })
    }

    private func labelled(_ headings: [String]) -> HTML {
        switch self {
        case .element(let tag, let attributes, let cells) where tag.description == "tr":
            var index = 0
            return .element(
                tag, attributes,
                cells.map { cell in
                    guard case .element(let name, let cellAttributes, let content) = cell, name.description == "td"
                    else { return cell }
                    defer { index += 1 }
                    guard index < headings.count, !headings[index].isEmpty else { return cell }
                    return .element(name, cellAttributes + [.data("data-label", headings[index])], content)
                })
        case .fragment(let parts):
            return .fragment(parts.map { $0.labelled(headings) })
        default:
            return self
        }
    }

    /// The text inside, without markup.
    var plainText: String {
        switch self {
        case .text(let text): text
        case .element(_, _, let children), .fragment(let children): children.map(\.plainText).joined()
        case .void: ""
        }
    }
}
