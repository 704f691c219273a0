#if canImport(UserNotifications)
    import UserNotifications

    /// ``NotificationAuthorizing`` over the system's `UNUserNotificationCenter`: each method is
    /// one call into the system; the decisions stay in ``PushRegistration`` and ``LocalNotifications``.
    public struct SystemNotificationAuthorizer: NotificationAuthorizing {
        public init() {}

        public func requestAuthorization(options: AuthorizationOptions) async throws -> Bool {
            try await UNUserNotificationCenter.current().requestAuthorization(
                options: UNAuthorizationOptions(rawValue: options.systemRawValue))
        }

        public func notificationSettings() async -> NotificationSettings {
            let settings = await UNUserNotificationCenter.current().notificationSettings()
            return NotificationSettings(
                systemStatus: settings.authorizationStatus.rawValue, alert: settings.alertSetting.rawValue,
                sound: settings.soundSetting.rawValue, badge: settings.badgeSetting.rawValue,
                notificationCenter: settings.notificationCenterSetting.rawValue)
        }
    }
#endif
