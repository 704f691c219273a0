import BelfryCore
import Foundation

/// A notification category as an app registers it with the OS (on Apple platforms, a
/// `UNNotificationCategory` with its `UNNotificationAction`s): plain values, so the SDK stays
/// free of UserNotifications and the mapping is one line per field.
public struct NotificationCategoryRegistration: Sendable, Hashable {
    /// One button of a notification.
    public struct Action: Sendable, Hashable {
        /// The action's id: what a tap reports back (`POST /v1/me/notifications/{id}/actions/{identifier}`).
        public var identifier: String
        public var title: String
        /// Shown as destructive (red on iOS).
        public var destructive: Bool
        /// Choosing it opens the app (`.foreground`); otherwise it runs in the background.
        public var foreground: Bool

        public init(identifier: String, title: String, destructive: Bool = false, foreground: Bool = false) {
            self.identifier = identifier
            self.title = title
            self.destructive = destructive
            self.foreground = foreground
        }
    }

    /// The category id, which APNs sends as `aps.category`.
    public var identifier: String
    /// The category's name, for the app's own settings screens.
    public var name: String
    public var actions: [Action]
    /// Groups the category's notifications on the device, when it asks to.
    public var threadIdentifier: String?
    /// How insistently its notifications arrive (`passive`, `active`, `time-sensitive`, `critical`).
    public var interruptionLevel: String?

    public init(
        identifier: String, name: String, actions: [Action], threadIdentifier: String? = nil,
        interruptionLevel: String? = nil
    ) {
        self.identifier = identifier
        self.name = name
        self.actions = actions
        self.threadIdentifier = threadIdentifier
        self.interruptionLevel = interruptionLevel
    }

    init(_ category: CategoryDefinition) {
        self.init(
            identifier: category.id, name: category.name,
            actions: category.actions.map {
                Action(identifier: $0.id, title: $0.title, destructive: $0.destructive, foreground: $0.opensApp)
            },
            threadIdentifier: category.push.threadID, interruptionLevel: category.push.interruptionLevel?.rawValue)
    }
}

/// Where an app's notification categories are registered with the system: on Apple platforms
/// ``SystemNotificationCategories`` (`UNUserNotificationCenter.setNotificationCategories`); in
/// tests, a fake.
public protocol NotificationCategoryRegistering: Sendable {
    /// Replaces the app's registered categories with `categories`.
    func setNotificationCategories(_ categories: [NotificationCategoryRegistration]) async
}

extension BelfryClient {
    /// Fetches the workspace's categories (see ``notificationCategories()``) and registers them
    /// with the system in one call, so that a push's actions show and its taps come back with
    /// their identifiers. Call it at launch; it is cheap when nothing changed (a 304), and
    /// works offline from the kept copy.
    /// - Returns: what was registered.
    @discardableResult
    public func registerNotificationCategories(
        with registrar: some NotificationCategoryRegistering
    ) async throws(BelfryClientError) -> [NotificationCategoryRegistration] {
        let categories = try await notificationCategories()
        await registrar.setNotificationCategories(categories)
        return categories
    }
}

extension BelfryClient {
    static let workspaceKey = "belfry.workspace.v1"
    static let workspaceETagKey = "belfry.workspace.etag.v1"

    /// The workspace's notification categories, with their actions and push hints, for the app
    /// to register with the OS at launch (seed 003: "define the types… define custom actions").
    ///
    /// Reads `GET /v1/config` with the user's token. The answer is kept in the store with its
    /// ETag: later calls ask with `If-None-Match` and get a 304 while nothing changed, and a
    /// call that cannot reach the server returns the kept copy.
    /// - Throws: when the server cannot be reached or refuses, and no copy is kept.
    public func notificationCategories() async throws(BelfryClientError) -> [NotificationCategoryRegistration] {
        try await workspace().categories.map(NotificationCategoryRegistration.init)
    }

    /// The workspace configuration as last fetched, if it was.
    static func keptWorkspace(in store: any KeyValueStore) -> WorkspaceConfig? {
        store.data(forKey: workspaceKey).flatMap { try? BelfryAPI.decoder.decode(WorkspaceConfig.self, from: $0) }
    }

    /// The workspace configuration in force, from the server or, when it says nothing changed
    /// or cannot be reached, from the kept copy.
    func workspace() async throws(BelfryClientError) -> WorkspaceConfig {
        let kept = Self.keptWorkspace(in: store)
        let etag =
            kept == nil ? nil : store.data(forKey: Self.workspaceETagKey).map { String(decoding: $0, as: UTF8.self) }
        let answer: BelfryAPI.Answer
        do {
            answer = try await api.send(
                "GET", "v1/config", headers: etag.map { ["If-None-Match": $0] } ?? [:], idempotent: true,
                accepting: [304])
        } catch {
            guard let kept, error.code == .network || (error.status ?? 0) >= 500 else { throw error }
            return kept
        }
        if answer.status == 304, let kept { return kept }
        let workspace = try answer.decode(WorkspaceConfig.self)
        store.set(answer.body, forKey: Self.workspaceKey)
        store.set(
            (answer.headers.first { $0.key.lowercased() == "etag" }?.value).map { Data($0.utf8) },
            forKey: Self.workspaceETagKey)
        return workspace
    }
}
