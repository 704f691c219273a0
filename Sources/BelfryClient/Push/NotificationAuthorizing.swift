import BelfryCore
import Foundation

/// What an app asks the OS permission for (Apple's `UNAuthorizationOptions`).
public struct AuthorizationOptions: OptionSet, Sendable, Hashable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let alert = AuthorizationOptions(rawValue: 1 << 0)
    public static let sound = AuthorizationOptions(rawValue: 1 << 1)
    public static let badge = AuthorizationOptions(rawValue: 1 << 2)
    /// Deliver quietly without asking first; the user decides from the notification center.
    public static let provisional = AuthorizationOptions(rawValue: 1 << 3)
}

/// The OS's notification settings for the app (Apple's `UNNotificationSettings`).
public struct NotificationSettings: Sendable, Equatable {
    public var authorizationStatus: PushAuthorization
    public var alertSetting: PushSetting
    public var soundSetting: PushSetting
    public var badgeSetting: PushSetting
    public var notificationCenterSetting: PushSetting

    public init(
        authorizationStatus: PushAuthorization, alertSetting: PushSetting = .enabled,
        soundSetting: PushSetting = .enabled, badgeSetting: PushSetting = .enabled,
        notificationCenterSetting: PushSetting = .enabled
    ) {
        self.authorizationStatus = authorizationStatus
        self.alertSetting = alertSetting
        self.soundSetting = soundSetting
        self.badgeSetting = badgeSetting
        self.notificationCenterSetting = notificationCenterSetting
    }

    /// What the server needs to shape pushes for this device.
    public var pushSettings: PushSettings {
        PushSettings(
            alert: alertSetting, sound: soundSetting, badge: badgeSetting, notificationCenter: notificationCenterSetting
        )
    }
}

/// The OS's notification permission, behind a protocol so tests drive it on Linux. On Apple
/// platforms an app wraps `UNUserNotificationCenter.current()` in a few lines.
public protocol NotificationAuthorizing: Sendable {
    /// Asks the user (the first time; later calls answer from what they chose).
    /// - Returns: whether notifications are allowed now.
    func requestAuthorization(options: AuthorizationOptions) async throws -> Bool
    /// The current settings; they change behind the app's back in the OS's Settings.
    func notificationSettings() async -> NotificationSettings
}

/// The device token for remote notifications. It may arrive before permission is asked,
/// long after it is granted, or never (no network, a simulator); it may also change.
public protocol DeviceTokenSource: Sendable {
    /// Asks the OS for a token (`registerForRemoteNotifications`).
    func register() async
    /// Tokens as the OS gives them, newest last.
    func tokens() -> AsyncStream<Data>
}

extension Data {
    /// The token as APNs and Belfry write it: lower-case hex.
    public var hexToken: String { map { String(format: "%02x", $0) }.joined() }
}
