import FluentPostgresDriver
import Foundation

/// Where Belfry keeps its data.
public enum DatabaseLocation: Hashable, Sendable, CustomStringConvertible {
    case sqlite(path: String)
    case postgres(url: String)

    /// Reads `--database` / `DATABASE_URL`: a `postgres://` or `postgresql://` URL, a `sqlite://` URL, or a file path.
    public static func parse(_ text: String) -> Result<Self, ConfigurationProblem> {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if trimmed.isEmpty {
            return .failure(.init("must not be empty"))
        }
        if trimmed.hasPrefix("postgres://") || trimmed.hasPrefix("postgresql://") {
            guard let components = URLComponents(string: trimmed), components.host?.isEmpty == false else {
                return .failure(
                    .init(
                        "\(redact(trimmed)) is not a valid PostgreSQL URL (postgres://user:password@host:port/database)"
                    ))
            }
            return .success(.postgres(url: trimmed))
        }
        if trimmed.hasPrefix("sqlite://") {
            let path = String(trimmed.dropFirst("sqlite://".count))
            return path.isEmpty ? .failure(.init("a sqlite:// URL needs a file path")) : .success(.sqlite(path: path))
        }
        if let scheme = trimmed.range(of: "://") {
            let name = trimmed[..<scheme.lowerBound]
            return .failure(.init("unsupported database \"\(name)://\"; use a SQLite file path or a postgres:// URL"))
        }
        return .success(.sqlite(path: trimmed))
    }

    /// Names the database without its password, for logs and start-up output.
    public var description: String {
        switch self {
        case .sqlite(let path):
            "SQLite at \(URL(fileURLWithPath: path).standardizedFileURL.path)"
        case .postgres(let url):
            "PostgreSQL at \(Self.redact(url))"
        }
    }

    /// The URL with its password replaced; a URL that cannot be parsed is not shown at all.
    static func redact(_ url: String) -> String {
        guard var components = URLComponents(string: url), let scheme = components.scheme else {
            return "(a URL that could not be parsed, not shown)"
        }
        guard components.password != nil else { return url }
        components.password = "redacted"
        return components.string ?? "\(scheme)://(not shown)"
    }
}

/// One bad configuration value, before it is given its path.
public struct ConfigurationProblem: Error, Hashable, Sendable {
    public var message: String

    public init(_ message: String) {
        self.message = message
    }
}
