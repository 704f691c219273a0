import BelfryCore
import Foundation

/// What the user tapped that should take them somewhere (seed 001).
public enum RouteRequest: Sendable, Equatable {
    /// A push notification (system banner or notification center).
    case notificationTapped(notificationID: UUID?)
    /// The in-app toast shown for a notification that arrived in the foreground.
    case toastTapped(notificationID: UUID?)
    /// A notification's custom action that opens the app at its target.
    case actionTapped(actionID: String, target: URL?)
    /// A notification's custom action that runs in the background ("Thank", "Mark as read"):
    /// the answer goes to the server, and nothing opens.
    case actionAnswered(actionID: String)
    /// The bell.
    case bellTapped
    /// One of the app's own local notifications (see ``LocalNotifications``): its target, if
    /// it has one.
    case localNotificationTapped(identifier: String, target: URL?)
}

/// Where the app is when the tap arrives.
public enum AppActivity: String, Sendable, Equatable {
    /// On screen.
    case foreground
    /// Running, not on screen.
    case background
    /// Not running: the tap launches it.
    case coldLaunch
}

/// The app's navigation, as far as routing needs it.
public struct NavigationState: Sendable, Equatable {
    /// Screens presented modally (Settings, an editor…), innermost last.
    public var presentedModals: Int
    /// One of the modals is an editor with changes not saved (wikitext, description, talk reply).
    public var editorHasUnsavedChanges: Bool
    /// The notification center is the visible screen.
    public var isOnNotificationCenter: Bool
    /// The app finished launching and can navigate (false early in a cold launch).
    public var isReady: Bool
    /// The bell is on screen (the explore feed's top bar, or the top bar of the screen the app
    /// opens on): its badge shows a new notification without anything covering the screen.
    public var isBellVisible: Bool
    /// The user is reading an article (seed 001): a notification arrives as the app's toast.
    public var isReadingArticle: Bool

    public init(
        presentedModals: Int = 0, editorHasUnsavedChanges: Bool = false, isOnNotificationCenter: Bool = false,
        isReady: Bool = true, isBellVisible: Bool = false, isReadingArticle: Bool = false
    ) {
        self.presentedModals = presentedModals
        self.editorHasUnsavedChanges = editorHasUnsavedChanges
        self.isOnNotificationCenter = isOnNotificationCenter
        self.isReady = isReady
        self.isBellVisible = isBellVisible
        self.isReadingArticle = isReadingArticle
    }
}

/// One thing the app does to route, in order.
public enum RouteStep: Sendable, Equatable {
    /// Ask "Discard edits?"; continue with the rest only if the user discards.
    case confirmDiscardEdits
    /// Dismiss the presented modals (all of them).
    case dismissModals(count: Int)
    /// Push the notification center from the right; Back returns to where the user was.
    case pushNotificationCenter(highlighting: UUID?)
    /// The notification center is already visible: reload it and show this notification.
    case refreshNotificationCenter(highlighting: UUID?)
    /// Open a notification's target (an article, a diff, a talk page).
    case openTarget(URL)
}

/// The plan for one tap: the steps, and whether they wait for the user or the app.
public struct RoutePlan: Sendable, Equatable {
    public var steps: [RouteStep]
    /// A cold-launch tap that must wait until the app is ready (`NavigationState.isReady`).
    public var waitsUntilReady: Bool

    /// The steps left after the discard prompt: all of them when the user discards, none when
    /// they cancel (they stay in the editor).
    public func afterDiscardPrompt(discard: Bool) -> [RouteStep] {
        guard steps.first == .confirmDiscardEdits else { return steps }
        return discard ? Array(steps.dropFirst()) : []
    }
}

/// Turns a tap and the app's state into the steps to take, as seed 001's QA cases ask:
/// no modals → push the notification center; modals → dismiss them, then push; an editor with
/// unsaved changes → confirm first (cancel leaves the user where they are); a cold launch →
/// the notification center once the app is ready, ahead of any other launch route.
public enum NotificationRouter {
    public static func plan(
        for request: RouteRequest, activity: AppActivity, navigation: NavigationState
    ) -> RoutePlan {
        let destination: RouteStep
        switch request {
        case .actionAnswered:
            // Answered on the notification itself: the app stays where it is, or in the background.
            return RoutePlan(steps: [], waitsUntilReady: false)
        case .notificationTapped(let id), .toastTapped(let id):
            destination =
                navigation.isOnNotificationCenter && navigation.presentedModals == 0
                ? .refreshNotificationCenter(highlighting: id) : .pushNotificationCenter(highlighting: id)
        case .bellTapped:
            destination =
                navigation.isOnNotificationCenter && navigation.presentedModals == 0
                ? .refreshNotificationCenter(highlighting: nil) : .pushNotificationCenter(highlighting: nil)
        case .actionTapped(_, let target?):
            destination = .openTarget(target)
        case .actionTapped(_, nil):
            destination = .pushNotificationCenter(highlighting: nil)
        case .localNotificationTapped(_, let target?):
            destination = .openTarget(target)
        case .localNotificationTapped(_, nil):
            // Nothing to open: the app comes up where the user left it.
            return RoutePlan(steps: [], waitsUntilReady: false)
        }
        if activity == .coldLaunch {
            // Nothing is presented yet on a cold launch: straight to the destination, when ready.
            return RoutePlan(steps: [destination], waitsUntilReady: !navigation.isReady)
        }
        var steps: [RouteStep] = []
        if navigation.presentedModals > 0 {
            if navigation.editorHasUnsavedChanges { steps.append(.confirmDiscardEdits) }
            steps.append(.dismissModals(count: navigation.presentedModals))
        }
        steps.append(destination)
        return RoutePlan(steps: steps, waitsUntilReady: !navigation.isReady)
    }

    /// Which route a cold launch takes: a notification tap wins over the others (state
    /// restoration, a deep link, the default tab).
    public static func launchRoute<Route>(tapped: RoutePlan?, otherwise: Route) -> LaunchRoute<Route> {
        tapped.map(LaunchRoute.notification) ?? .other(otherwise)
    }
}

/// The first route of a cold launch.
public enum LaunchRoute<Route> {
    case notification(RoutePlan)
    case other(Route)
}

extension LaunchRoute: Sendable where Route: Sendable {}
extension LaunchRoute: Equatable where Route: Equatable {}

/// How a notification arriving while the app is in the foreground is shown (the answer to
/// the platform's `willPresent`).
public enum ForegroundPresentation: Sendable, Equatable {
    /// The system banner, with these options (Apple's `UNNotificationPresentationOptions`).
    case systemBanner(Set<PresentationOption>)
    /// The app's own toast; tapping it routes like a notification tap.
    case inAppToast
    /// The bell on screen shows it: its badge counts it, and nothing covers the screen. The
    /// notification is listed in the system's notification center when push allows it.
    case bellBadge
    /// Nothing: the user is already looking at the notification center, which updates live.
    case none

    public enum PresentationOption: String, Sendable, CaseIterable {
        case banner, list, sound, badge
    }

    /// Decides for one notification, by seed 001's rule: where the user is first, the system's
    /// permission second.
    /// - Parameters:
    ///   - settings: the device's notification settings; `nil` when push is not authorized.
    ///   - navigation: where the user is.
    public static func decide(
        settings: PushSettings?, authorization: PushAuthorization, navigation: NavigationState
    )
        -> ForegroundPresentation
    {
        if navigation.presentedModals == 0 {
            if navigation.isOnNotificationCenter { return .none }
            // Reading an article: the app's toast, which the reader can tap or let pass.
            if navigation.isReadingArticle { return .inAppToast }
            // The bell is in view: its badge tells, without covering the screen.
            if navigation.isBellVisible { return .bellBadge }
        }
        // Push turned on in the app's Settings and allowed by the OS: the system style, on top of the app.
        guard authorization == .authorized || authorization == .ephemeral, let settings,
            settings.alert == .enabled
        else { return .inAppToast }
        var options: Set<PresentationOption> = [.banner, .list]
        if settings.sound == .enabled { options.insert(.sound) }
        if settings.badge == .enabled { options.insert(.badge) }
        return .systemBanner(options)
    }
}
