import Logging

/// Writes log lines through `base` with credentials blanked out, whoever logged them. Belfry's
/// own messages never carry one, but a framework logging at trace level may: Vapor writes each
/// request head, `Authorization` header and query string included.
///
/// Generic over the handler it wraps, so that a logger holds one box, not a box in a box: Vapor
/// makes a logger for every request, and an open stream keeps its request's.
struct RedactingLogHandler<Base: LogHandler>: LogHandler {
    var base: Base

    var logLevel: Logger.Level {
        get { base.logLevel }
        set { base.logLevel = newValue }
    }

    var metadata: Logger.Metadata {
        get { base.metadata }
        set { base.metadata = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { base[metadataKey: key] }
        set { base[metadataKey: key] = newValue }
    }

    func log(event: LogEvent) {
        var event = event
        event.message = Logger.Message(stringLiteral: LogRedaction.redact(event.message.description))
        event.metadata = event.metadata?.mapValues { LogRedaction.redact($0) }
        base.log(event: event)
    }
}

/// What ``RedactingLogHandler`` blanks out.
enum LogRedaction {
    static func redact(_ value: Logger.Metadata.Value) -> Logger.Metadata.Value {
        switch value {
        case .string(let text): .string(redact(text))
        case .stringConvertible(let convertible): .string(redact(convertible.description))
        case .array(let values): .array(values.map(redact))
        case .dictionary(let values): .dictionary(values.mapValues(redact))
        }
    }

    /// `text` with bearer credentials, `token` and `link` query values, CSRF tokens (header or
    /// field), Belfry's cookies, and anything shaped like a JWT or one of Belfry's signed values
    /// (`base64url(JSON).signature`: sign-in links, session cookies, unsubscribe links) replaced
    /// by `[redacted]`.
    static func redact(_ text: String) -> String {
        // Most lines hold none of these: leave them untouched, cheaply.
        guard
            text.contains("earer") || text.contains("token=") || text.contains("link=") || text.contains("eyJ")
                || text.contains("vapid") || text.contains("srf") || text.contains("SRF") || text.contains("belfry_")
        else { return text }
        var text = text
        text.replace(/(?i)(bearer|basic|vapid)\s+[^\s;,"]+/) { match in "\(match.output.1) [redacted]" }
        text.replace(/(?i)([?&](?:token|link)=)[^&\s"]+/) { match in "\(match.output.1)[redacted]" }
        text.replace(/(?i)(x-csrf-token"?\s*[:=]\s*"?)[^\s,;"\]]+/) { match in "\(match.output.1)[redacted]" }
        text.replace(/(?i)((?:_csrf|belfry_[a-z]+)=)[^&;\s"]+/) { match in "\(match.output.1)[redacted]" }
        text.replace(/eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]*)?/) { _ in "[redacted]" }
        return text
    }
}
