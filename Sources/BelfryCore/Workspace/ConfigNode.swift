import Foundation

/// A problem found in a configuration value, with where it is.
public struct ConfigIssue: Hashable, Sendable, CustomStringConvertible {
    /// Where the bad value is, such as `categories[2].channels[0].default`.
    public var path: String
    public var message: String

    public init(path: String, message: String) {
        self.path = path
        self.message = message
    }

    public var description: String {
        path.isEmpty ? message : "\(path): \(message)"
    }
}

/// Every problem found in a configuration, reported together.
public struct ConfigError: Error, Hashable, Sendable, CustomStringConvertible {
    public var issues: [ConfigIssue]

    public init(issues: [ConfigIssue]) {
        self.issues = issues
    }

    public var description: String {
        let noun = issues.count == 1 ? "problem" : "problems"
        return (["configuration has \(issues.count) \(noun):"] + issues.map { "  - \($0)" })
            .joined(separator: "\n")
    }
}

/// A JSON document of any shape: config files (kept loose so that every bad value can be
/// reported, not just the first) and the free-form `data` of events.
public enum JSONValue: Codable, Hashable, Sendable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .number: "a number"
        case .string: "a string"
        case .array: "a list"
        case .object: "an object"
        }
    }
}

/// Collects issues while a configuration is read.
public final class ConfigIssueCollector {
    public private(set) var issues: [ConfigIssue] = []

    public init() {}

    public func add(_ path: String, _ message: String) {
        issues.append(ConfigIssue(path: path, message: message))
    }
}

/// One value of a configuration document and its path; reading it records any problem and goes on.
public struct ConfigNode {
    public let path: String
    /// `nil` when the key is absent.
    public let value: JSONValue?
    public let issues: ConfigIssueCollector

    public init(root value: JSONValue, issues: ConfigIssueCollector) {
        self.path = ""
        self.value = value
        self.issues = issues
    }

    init(path: String, value: JSONValue?, issues: ConfigIssueCollector) {
        self.path = path
        self.value = value
        self.issues = issues
    }

    public var isPresent: Bool {
        if case .some(.null) = value { return false }
        return value != nil
    }

    public subscript(key: String) -> ConfigNode {
        var child: JSONValue?
        if case .object(let fields) = value { child = fields[key] }
        return ConfigNode(path: path.isEmpty ? key : "\(path).\(key)", value: child, issues: issues)
    }

    public func fail(_ message: String) {
        issues.add(path, message)
    }

    /// Checks this is an object and reports keys it does not know, which are most often typos.
    @discardableResult
    public func object(keys: Set<String>) -> Bool {
        guard case .object(let fields) = value else {
            if isPresent || value == nil { expected("an object") }
            return false
        }
        for key in fields.keys.sorted() where !keys.contains(key) {
            self[key].fail("unknown key; expected one of \(keys.sorted().joined(separator: ", "))")
        }
        return true
    }

    /// The elements of a list, without reporting anything when this is not a list.
    public var elements: [ConfigNode] {
        guard case .some(.array(let elements)) = value else { return [] }
        return elements.enumerated().map { index, element in
            ConfigNode(path: "\(path)[\(index)]", value: element, issues: issues)
        }
    }

    /// The elements of a list; an absent key is an empty list.
    public func list(required: Bool = false) -> [ConfigNode] {
        switch value {
        case .none, .some(.null):
            if required { fail("is required") }
            return []
        case .some(.array):
            return elements
        case .some:
            expected("a list")
            return []
        }
    }

    public func string(required: Bool = false, maxLength: Int = 1_000) -> String? {
        switch value {
        case .none, .some(.null):
            if required { fail("is required") }
            return nil
        case .some(.string(let text)):
            if required && text.trimmingCharacters(in: .whitespaces).isEmpty {
                fail("must not be empty")
                return nil
            }
            if text.count > maxLength {
                fail("is \(text.count) characters long; at most \(maxLength) allowed")
                return nil
            }
            return text
        case .some:
            expected("a string")
            return nil
        }
    }

    public func bool(default defaultValue: Bool) -> Bool {
        switch value {
        case .none, .some(.null): return defaultValue
        case .some(.bool(let flag)): return flag
        case .some:
            expected("true or false")
            return defaultValue
        }
    }

    public func int(in range: ClosedRange<Int>) -> Int? {
        switch value {
        case .none, .some(.null): return nil
        case .some(.number(let number)):
            guard number.rounded() == number, let whole = Int(exactly: number), range.contains(whole) else {
                let shown = number.rounded() == number && abs(number) < 1e15 ? "\(Int(number))" : "\(number)"
                fail("expected a whole number from \(range.lowerBound) to \(range.upperBound), got \(shown)")
                return nil
            }
            return whole
        case .some:
            expected("a whole number")
            return nil
        }
    }

    /// One of a closed set of strings, such as `opt_in` / `opt_out`.
    public func choice<Choice: RawRepresentable & CaseIterable>(
        _: Choice.Type = Choice.self, default defaultValue: Choice? = nil
    ) -> Choice? where Choice.RawValue == String {
        guard isPresent else { return defaultValue }
        let allowed = Choice.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: " or ")
        guard case .some(.string(let text)) = value else {
            expected(allowed)
            return defaultValue
        }
        guard let choice = Choice(rawValue: text) else {
            fail("expected \(allowed), got \"\(text)\"")
            return defaultValue
        }
        return choice
    }

    /// An id: 1 to 64 letters, digits, `-`, `_` or `.`, starting with a letter or digit.
    public func identifier(required: Bool = true) -> String? {
        guard let text = string(required: required) else { return nil }
        guard Identifier.isValid(text) else {
            fail(
                "\"\(text)\" is not a valid id: use 1 to 64 letters, digits, '-', '_' or '.', starting with a letter or digit"
            )
            return nil
        }
        return text
    }

    private func expected(_ what: String) {
        if let value {
            fail("expected \(what), got \(value.typeName)")
        } else {
            fail("is required (expected \(what))")
        }
    }
}

/// The shape every workspace id (channel, section, category, tenant, action) has.
public enum Identifier {
    public static func isValid(_ text: String) -> Bool {
        guard (1...64).contains(text.utf8.count), let first = text.unicodeScalars.first,
            isAlphanumeric(first)
        else { return false }
        return text.unicodeScalars.allSatisfy { isAlphanumeric($0) || "-_.".unicodeScalars.contains($0) }
    }

    private static func isAlphanumeric(_ scalar: Unicode.Scalar) -> Bool {
        scalar.isASCII && (("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar) || ("0"..."9").contains(scalar))
    }
}
