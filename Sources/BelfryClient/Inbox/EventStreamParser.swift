import Foundation

/// One server-sent event.
struct ServerSentEvent: Sendable, Equatable {
    var id: String?
    var event: String
    var data: String
}

/// Turns the bytes of a `text/event-stream` into events, as they arrive in any chunking
/// (the WHATWG "event stream interpretation": `id`, `event`, `data` lines, comments, blank
/// line ends an event).
struct EventStreamParser {
    private var buffer = Data()
    private var id: String?
    private var event = ""
    private var data: [String] = []
    /// The last `id` seen, for `Last-Event-ID` on reconnect.
    private(set) var lastEventID: String?
    /// The server's `retry`, in seconds.
    private(set) var retry: TimeInterval?

    mutating func feed(_ chunk: Data) -> [ServerSentEvent] {
        buffer.append(chunk)
        var events: [ServerSentEvent] = []
        while let newline = buffer.firstIndex(where: { $0 == 0x0A || $0 == 0x0D }) {
            var line = String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self)
            var next = buffer.index(after: newline)
            // CRLF counts as one line ending.
            if buffer[newline] == 0x0D, next < buffer.endIndex, buffer[next] == 0x0A {
                next = buffer.index(after: next)
            }
            buffer = Data(buffer[next...])
            if line.isEmpty {
                if !data.isEmpty {
                    events.append(
                        ServerSentEvent(
                            id: id, event: event.isEmpty ? "message" : event, data: data.joined(separator: "\n")))
                }
                event = ""
                data = []
                continue
            }
            if line.hasPrefix(":") { continue }
            var value = ""
            if let colon = line.firstIndex(of: ":") {
                value = String(line[line.index(after: colon)...])
                if value.hasPrefix(" ") { value.removeFirst() }
                line = String(line[..<colon])
            }
            switch line {
            case "id":
                id = value
                lastEventID = value
            case "event": event = value
            case "data": data.append(value)
            case "retry": retry = Int(value).map { TimeInterval($0) / 1000 }
            default: break
            }
        }
        return events
    }
}
