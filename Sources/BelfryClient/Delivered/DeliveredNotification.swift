import BelfryCore
import Foundation

/// A notification the system delivered (seed 003: "process already delivered notifications"):
/// an APNs payload's `userInfo` or a Web Push message, read into one typed value.
public struct DeliveredNotification: Sendable, Equatable {
    /// The notification's id in the user's inbox.
    public var id: UUID
    public var category: String?
    public var tenant: String?
    public var title: String?
    public var body: String?
    public var url: URL?
    /// The custom actions the message listed (Web Push), with whether each opens the app; APNs
    /// names its category instead, whose actions the app registered (``OpenedNotifications``
    /// reads them from the workspace it last fetched).
    public var actions: [NotificationAction]
    /// The unread count the server sent, for the app's badge.
    public var badge: Int?
    /// The event's `data`.
    public var data: JSONValue?
    /// For a digest: how many events it gathered and, from Web Push, the first of them (APNs
    /// carries the count alone; the inbox has the items).
    public var batch: NotificationBatch?

    public init(
        id: UUID, category: String? = nil, tenant: String? = nil, title: String? = nil, body: String? = nil,
        url: URL? = nil, actions: [NotificationAction] = [], badge: Int? = nil, data: JSONValue? = nil,
        batch: NotificationBatch? = nil
    ) {
        self.id = id
        self.category = category
        self.tenant = tenant
        self.title = title
        self.body = body
        self.url = url
        self.actions = actions
        self.badge = badge
        self.data = data
        self.batch = batch
    }

    /// Reads an APNs notification's `userInfo` (`aps` and Belfry's `belfry` dictionary).
    /// - Returns: `nil` for a notification Belfry did not send.
    public init?(apnsUserInfo userInfo: [AnyHashable: Any]) {
        guard let belfry = userInfo["belfry"] as? [String: Any],
            let id = (belfry["notification_id"] as? String).flatMap(UUID.init(uuidString:))
        else { return nil }
        let aps = userInfo["aps"] as? [String: Any] ?? [:]
        let alert = aps["alert"] as? [String: Any]
        self.init(
            id: id, category: aps["category"] as? String, tenant: belfry["tenant"] as? String,
            title: alert?["title"] as? String, body: alert?["body"] as? String,
            url: (belfry["url"] as? String).flatMap(URL.init(string:)), badge: aps["badge"] as? Int,
            data: belfry["data"].flatMap(JSONValue.init(foundation:)),
            batch: belfry["batch"].flatMap(NotificationBatch.init(foundation:)))
    }

    /// Reads a Web Push message as Belfry sends it (the JSON a service worker receives).
    /// - Returns: `nil` for a message that is not one of Belfry's.
    public init?(webPushMessage data: Data) {
        struct Message: Decodable {
            struct Action: Decodable {
                var action: String
                var title: String
                var opens_app: Bool?
            }

            var notification_id: UUID
            var title: String?
            var body: String?
            var url: String?
            var category: String?
            var tenant: String?
            var actions: [Action]?
            var badge: Int?
            var data: JSONValue?
            var batch: NotificationBatch?
        }
        guard let message = try? BelfryAPI.decoder.decode(Message.self, from: data) else { return nil }
        self.init(
            id: message.notification_id, category: message.category, tenant: message.tenant, title: message.title,
            body: message.body, url: message.url.flatMap(URL.init(string:)),
            actions: (message.actions ?? []).map {
                // Messages from servers before `opens_app` was sent: as before, every action opens.
                NotificationAction(id: $0.action, title: $0.title, opensApp: $0.opens_app ?? true)
            },
            badge: message.badge, data: message.data, batch: message.batch)
    }

    /// What the router is asked when the user opens it or chooses one of its actions
    /// (`actionIdentifier`, as the system reports it): the notification; an action that opens
    /// the app, with the notification's target; an action that runs in the background
    /// (`opens_app` false among ``actions``), nothing to open.
    public func routeRequest(actionIdentifier: String? = nil) -> RouteRequest {
        guard let actionIdentifier, !Self.systemActions.contains(actionIdentifier) else {
            return .notificationTapped(notificationID: id)
        }
        if let action = actions.first(where: { $0.id == actionIdentifier }), !action.opensApp {
            return .actionAnswered(actionID: actionIdentifier)
        }
        return .actionTapped(actionID: actionIdentifier, target: url)
    }

    /// What the system reports for a plain tap (Apple's default action) or a dismissal.
    static let systemActions: Set<String> = [
        "com.apple.UNNotificationDefaultActionIdentifier", "com.apple.UNNotificationDismissActionIdentifier",
    ]
}

extension NotificationBatch {
    /// A batch as `userInfo` holds it; `nil` if it is not one.
    init?(foundation value: Any) {
        guard JSONSerialization.isValidJSONObject(value), let data = try? JSONSerialization.data(withJSONObject: value),
            let batch = try? BelfryAPI.decoder.decode(NotificationBatch.self, from: data)
        else { return nil }
        self = batch
    }
}

extension JSONValue {
    /// A value `JSONSerialization` made (as `userInfo` holds), written out and read back, so
    /// that booleans and numbers keep their JSON types on every platform; `nil` if it is not JSON.
    init?(foundation value: Any) {
        guard JSONSerialization.isValidJSONObject([value]),
            let data = try? JSONSerialization.data(withJSONObject: [value]),
            let decoded = try? JSONDecoder().decode([JSONValue].self, from: data), let first = decoded.first
        else { return nil }
        self = first
    }
}
