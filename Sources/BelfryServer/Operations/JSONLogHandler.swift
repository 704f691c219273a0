import Foundation
import Logging

/// How log lines are written.
public enum LogFormat: String, Sendable, CaseIterable {
    /// Lines for people: time, level, label, metadata, message.
    case text
    /// One JSON object per line, for a log pipeline.
    case json
}

/// Writes each log event to standard error as one line of JSON:
/// `{"time", "level", "label", "message", "request_id", "metadata": {...}, "source"}`. The
/// metadata keeps its namespaced keys (`belfry.user`, `belfry.delivery.id`); the request id
/// Vapor gives each request (`request-id`) is lifted to the top. `RedactingLogHandler` wraps
/// it, so no secret reaches a line.
struct JSONLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]

    init(label: String) {
        self.label = label
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        FileHandle.standardError.write(Data(line(for: event).utf8))
    }

    /// The JSON line for `event`, newline included.
    func line(for event: LogEvent, now: Date = Date()) -> String {
        var merged = metadata
        if let extra = event.metadata { merged.merge(extra) { _, new in new } }
        var fields: [String: Any] = [
            "time": now.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true)),
            "level": event.level.rawValue, "label": label, "message": event.message.description,
            "source": event.source,
        ]
        if let requestID = merged.removeValue(forKey: "request-id") { fields["request_id"] = Self.plain(requestID) }
        if !merged.isEmpty { fields["metadata"] = merged.mapValues(Self.plain) }
        // Every value is a string, or an array or dictionary of them: always writable.
        let data =
            (try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys, .withoutEscapingSlashes]))
            ?? Data(#"{"message":"a log line could not be written as JSON"}"#.utf8)
        return String(decoding: data, as: UTF8.self) + "\n"
    }

    private static func plain(_ value: Logger.Metadata.Value) -> Any {
        switch value {
        case .string(let text): text
        case .stringConvertible(let convertible): convertible.description
        case .array(let values): values.map(plain)
        case .dictionary(let values): values.mapValues(plain)
        }
    }
}
