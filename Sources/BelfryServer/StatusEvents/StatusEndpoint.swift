import BelfryCore
import Foundation

/// What a status event reports: what became of a message, a device or a user's choices.
public enum StatusEventType: String, Sendable, Hashable, CaseIterable, Codable {
    /// Fan-out queued a delivery for a channel (and device).
    case messageQueued = "message.queued"
    /// The provider accepted the message (the inbox: it is in the inbox).
    case messageSent = "message.sent"
    /// The message failed for good: the provider refused it, or the device is gone.
    case messageFailed = "message.failed"
    /// Every attempt failed.
    case messageDead = "message.dead"
    /// Not needed any more (a fallback whose notification was read in time).
    case messageSkipped = "message.skipped"
    case messageRead = "message.read"
    case messageSeen = "message.seen"
    case messageArchived = "message.archived"
    /// The user answered one of the notification's actions.
    case messageAction = "message.action"
    /// A provider refused a device for good: the app may drop its token.
    case deviceRetired = "device.retired"
    /// A user's preferences changed.
    case preferencesUpdated = "preferences.updated"
    /// A user turned a category's emails off with the one-click link in one of them.
    case emailUnsubscribed = "email.unsubscribed"
    /// A digest's window ended: its items became one notification (or none, when nothing reaches the user).
    case batchClosed = "batch.closed"
}

/// One of the workspace file's `webhooks`: where status events go, which ones, and the secret
/// that signs them (Standard Webhooks). Read from the file at start; the secret comes from the
/// file `secret_path` names and never appears in `/v1/config`.
public struct StatusEndpoint: Sendable, Hashable {
    public var id: String
    public var url: String
    public var events: Set<StatusEventType>
    /// `whsec_` and base64, or any text of 16 characters or more (its bytes are the key).
    public var secret: String

    public init(id: String, url: String, events: Set<StatusEventType>, secret: String) {
        self.id = id
        self.url = url
        self.events = events
        self.secret = secret
    }

    static let keys: Set<String> = ["id", "url", "events", "secret_path"]

    /// Reads the file's `webhooks`, each problem recorded at its path (`webhooks[0].url`).
    static func read(_ node: ConfigNode, readFile: (String) throws -> Data) -> [StatusEndpoint] {
        var endpoints: [StatusEndpoint] = []
        var seen: Set<String> = []
        for entry in node.list() {
            guard entry.object(keys: keys), let id = entry["id"].identifier() else { continue }
            guard seen.insert(id).inserted else {
                entry["id"].fail("another webhook already has the id \"\(id)\"")
                continue
            }
            let url = entry["url"].string(required: true)
            if let url, let problem = urlProblem(url) { entry["url"].fail(problem) }
            var events: Set<StatusEventType> = []
            for item in entry["events"].list(required: true) {
                if let type = item.choice(StatusEventType.self) { events.insert(type) }
            }
            if entry["events"].isPresent && entry["events"].elements.isEmpty {
                entry["events"].fail("name at least one event")
            }
            var secret: String?
            if let path = entry["secret_path"].string(required: true) {
                do {
                    let text = String(decoding: try readFile(path), as: UTF8.self)
                        .trimmingCharacters(in: .whitespacesAndNewlines)
                    if let problem = secretProblem(text) {
                        entry["secret_path"].fail("\(path): \(problem)")
                    } else {
                        secret = text
                    }
                } catch {
                    entry["secret_path"].fail("cannot read \(path): \(error.localizedDescription)")
                }
            }
            guard let url, urlProblem(url) == nil, let secret, !events.isEmpty else { continue }
            endpoints.append(StatusEndpoint(id: id, url: url, events: events, secret: secret))
        }
        return endpoints
    }

    /// `https`, or `http` to a loopback address (a receiver on the same machine).
    static func urlProblem(_ text: String) -> String? {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), let host = url.host, !host.isEmpty
        else { return "expected an https URL, got \"\(text)\"" }
        if scheme == "https" { return nil }
        let loopback = ["127.0.0.1", "localhost", "::1", "[::1]"].contains(host.lowercased())
        return scheme == "http" && loopback ? nil : "must be https (http only to 127.0.0.1, localhost or [::1])"
    }

    static func secretProblem(_ text: String) -> String? {
        if text.hasPrefix("whsec_") {
            let bytes = Data(base64Encoded: String(text.dropFirst(6)))
            return (bytes?.count ?? 0) >= 16
                ? nil : "a whsec_ secret needs at least 16 bytes of base64 after the prefix"
        }
        return text.count >= 16 ? nil : "the secret needs at least 16 characters (or whsec_ and base64)"
    }
}

extension StatusEndpoint: CustomStringConvertible, CustomDebugStringConvertible {
    /// The endpoint without its secret, for logs and settings dumps.
    public var description: String {
        "StatusEndpoint(id: \(id), url: \(url), events: \(events.map(\.rawValue).sorted()), secret: <redacted>)"
    }

    public var debugDescription: String { description }
}
