#if canImport(UserNotifications)
    import Foundation
    import UserNotifications

    /// ``NotificationScheduling`` over the system's `UNUserNotificationCenter`: each method is
    /// one call into the system. ``LocalNotifications`` decides what to schedule and how it
    /// shows; a request added under a pending identifier replaces it, as the protocol says.
    public struct SystemNotificationScheduler: NotificationScheduling {
        public init() {}

        public func add(_ notification: ScheduledNotification) async throws {
            let content = UNMutableNotificationContent()
            if notification.showing.contains(.alert) {
                content.title = notification.title
                content.body = notification.body
            }
            content.sound = notification.showing.contains(.sound) ? .default : nil
            content.badge = notification.badge.map { NSNumber(value: $0) }
            content.categoryIdentifier = notification.categoryIdentifier ?? ""
            content.threadIdentifier = notification.threadIdentifier ?? ""
            content.userInfo = notification.systemUserInfo
            let trigger: UNNotificationTrigger =
                if let interval = notification.systemRepeatingInterval {
                    UNTimeIntervalNotificationTrigger(timeInterval: interval, repeats: true)
                } else {
                    UNCalendarNotificationTrigger(
                        dateMatching: notification.systemTriggerComponents(in: .current),
                        repeats: notification.repeating != nil)
                }
            try await UNUserNotificationCenter.current().add(
                UNNotificationRequest(identifier: notification.identifier, content: content, trigger: trigger))
        }

        public func pending() async -> [ScheduledNotification] {
            await UNUserNotificationCenter.current().pendingNotificationRequests().compactMap { request in
                // Requests the app added itself may use an interval instead of a date.
                guard
                    let fireDate = (request.trigger as? UNCalendarNotificationTrigger)?.nextTriggerDate()
                        ?? (request.trigger as? UNTimeIntervalNotificationTrigger)?.nextTriggerDate()
                else { return nil }
                return ScheduledNotification(request, fireDate: fireDate)
            }
        }

        public func removePending(identifiers: [String]) async {
            UNUserNotificationCenter.current().removePendingNotificationRequests(withIdentifiers: identifiers)
        }

        public func delivered() async -> [ScheduledNotification] {
            await UNUserNotificationCenter.current().deliveredNotifications().map {
                ScheduledNotification($0.request, fireDate: $0.date)
            }
        }

        public func removeDelivered(identifiers: [String]) async {
            UNUserNotificationCenter.current().removeDeliveredNotifications(withIdentifiers: identifiers)
        }

        public func setBadge(_ count: Int) async {
            try? await UNUserNotificationCenter.current().setBadgeCount(count)
        }
    }

    extension ScheduledNotification {
        fileprivate init(_ request: UNNotificationRequest, fireDate: Date) {
            self.init(
                systemIdentifier: request.identifier, title: request.content.title, body: request.content.body,
                fireDate: fireDate, hasSound: request.content.sound != nil, badge: request.content.badge?.intValue,
                categoryIdentifier: request.content.categoryIdentifier,
                threadIdentifier: request.content.threadIdentifier, userInfo: request.content.userInfo)
        }
    }
#endif
