#if canImport(UserNotifications)
    import UserNotifications

    /// ``NotificationCategoryRegistering`` over the system's `UNUserNotificationCenter`: each
    /// category becomes a `UNNotificationCategory` with its actions (foreground ones open the
    /// app, destructive ones show as such).
    public struct SystemNotificationCategories: NotificationCategoryRegistering {
        public init() {}

        public func setNotificationCategories(_ categories: [NotificationCategoryRegistration]) async {
            let system = categories.map { category in
                UNNotificationCategory(
                    identifier: category.identifier,
                    actions: category.actions.map { action in
                        var options: UNNotificationActionOptions = []
                        if action.foreground { options.insert(.foreground) }
                        if action.destructive { options.insert(.destructive) }
                        return UNNotificationAction(
                            identifier: action.identifier, title: action.title, options: options)
                    },
                    intentIdentifiers: [], options: [])
            }
            UNUserNotificationCenter.current().setNotificationCategories(Set(system))
        }
    }
#endif
