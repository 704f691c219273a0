import BelfryCore

/// A platform's senders by app: the implicit one from the server settings (no id) and the
/// workspace file's `apps`, each with its own credentials, token cache and connections.
struct ByApp<Value: Sendable>: Sendable {
    var implicit: Value?
    var apps: [String: Value] = [:]

    /// The sender of a device's app (`nil`: the implicit one).
    subscript(app: String?) -> Value? {
        app.map { apps[$0] } ?? implicit
    }

    var isEmpty: Bool { implicit == nil && apps.isEmpty }

    /// Any one of them, for what they all share.
    var any: Value? { implicit ?? apps.values.first }

    /// Why a device of `app` cannot be sent to: its app is not configured (any more).
    static func missing(_ app: String?, _ kind: ChannelKind) -> DeliveryResult {
        .failed(
            reason: app.map { "the device's app \"\($0)\" is not one of this server's \(kind.rawValue) apps" }
                ?? "the device has no app and this server has no \(kind.rawValue) credentials of its own: "
                + "register it with one of the apps")
    }
}

extension ByApp {
    /// The same apps, each value made by `transform`.
    func map<Other: Sendable>(_ transform: (Value) throws -> Other) rethrows -> ByApp<Other> {
        ByApp<Other>(implicit: try implicit.map(transform), apps: try apps.mapValues(transform))
    }
}

extension ServerConfiguration {
    /// A platform's credentials by app: the implicit one, and those `extract` finds among the apps.
    func byApp<Value: Sendable>(
        _ implicit: Value?, _ extract: (PushApp.Credentials) throws -> Value?
    ) rethrows -> ByApp<Value> {
        var byApp = ByApp(implicit: implicit)
        for app in apps {
            if let value = try extract(app.credentials) { byApp.apps[app.id] = value }
        }
        return byApp
    }
}
