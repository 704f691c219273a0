import BelfryCore
import Foundation
import Testing

@testable import BelfryClient

/// Seed 001's QA cases for tapping a notification, and what a notification arriving in the
/// foreground shows.
@Suite("BelfryClient notification routing")
struct NotificationRouterTests {
    let id = UUID()

    @Test(
        "QA: foreground or background, no modals: the notification center is pushed from the right",
        arguments: [AppActivity.foreground, .background])
    func noModals(activity: AppActivity) {
        let plan = NotificationRouter.plan(
            for: .notificationTapped(notificationID: id), activity: activity, navigation: NavigationState())
        #expect(plan == RoutePlan(steps: [.pushNotificationCenter(highlighting: id)], waitsUntilReady: false))
    }

    @Test(
        "QA: modals presented (such as Settings): they are dismissed first, then the notification center is pushed",
        arguments: [AppActivity.foreground, .background])
    func modals(activity: AppActivity) {
        let plan = NotificationRouter.plan(
            for: .notificationTapped(notificationID: id), activity: activity,
            navigation: NavigationState(presentedModals: 2))
        #expect(plan.steps == [.dismissModals(count: 2), .pushNotificationCenter(highlighting: id)])
    }

    @Test("QA: an editor with unsaved changes asks first; Discard Edits dismisses and pushes, Cancel stays")
    func unsavedEditor() {
        let plan = NotificationRouter.plan(
            for: .notificationTapped(notificationID: id), activity: .foreground,
            navigation: NavigationState(presentedModals: 1, editorHasUnsavedChanges: true))
        #expect(
            plan.steps == [.confirmDiscardEdits, .dismissModals(count: 1), .pushNotificationCenter(highlighting: id)])
        #expect(
            plan.afterDiscardPrompt(discard: true) == [
                .dismissModals(count: 1), .pushNotificationCenter(highlighting: id),
            ])
        #expect(plan.afterDiscardPrompt(discard: false) == [], "Cancel: the user is not taken out of the editor")
    }

    @Test("QA: a tap that launches the app goes straight to the notification center once the app is ready")
    func coldLaunch() {
        let early = NotificationRouter.plan(
            for: .notificationTapped(notificationID: id), activity: .coldLaunch,
            navigation: NavigationState(isReady: false))
        #expect(early == RoutePlan(steps: [.pushNotificationCenter(highlighting: id)], waitsUntilReady: true))
        let ready = NotificationRouter.plan(
            for: .notificationTapped(notificationID: id), activity: .coldLaunch, navigation: NavigationState())
        #expect(!ready.waitsUntilReady)
        #expect(
            NotificationRouter.launchRoute(tapped: early, otherwise: "restore last article") == .notification(early))
        #expect(
            NotificationRouter.launchRoute(tapped: nil, otherwise: "restore last article")
                == .other("restore last article"))
    }

    @Test("already on the notification center: it reloads and shows the notification instead of pushing another")
    func alreadyThere() {
        let plan = NotificationRouter.plan(
            for: .toastTapped(notificationID: id), activity: .foreground,
            navigation: NavigationState(isOnNotificationCenter: true))
        #expect(plan.steps == [.refreshNotificationCenter(highlighting: id)])
        let bell = NotificationRouter.plan(for: .bellTapped, activity: .foreground, navigation: NavigationState())
        #expect(bell.steps == [.pushNotificationCenter(highlighting: nil)])
    }

    @Test("a custom action that opens the app goes to the notification's target, after the same modal handling")
    func actionTarget() throws {
        let url = try #require(URL(string: "https://en.example.org/wiki/Bell?diff=1"))
        let plan = NotificationRouter.plan(
            for: .actionTapped(actionID: "view-diff", target: url), activity: .background,
            navigation: NavigationState(presentedModals: 1))
        #expect(plan.steps == [.dismissModals(count: 1), .openTarget(url)])
    }

    @Test(
        "foreground: the system banner when push is on (options follow the settings), a toast otherwise, nothing on the notification center"
    )
    func foreground() {
        let everything = PushSettings()
        #expect(
            ForegroundPresentation.decide(
                settings: everything, authorization: .authorized, navigation: NavigationState())
                == .systemBanner([.banner, .list, .sound, .badge]))
        #expect(
            ForegroundPresentation.decide(
                settings: PushSettings(sound: .disabled, badge: .notSupported), authorization: .authorized,
                navigation: NavigationState()) == .systemBanner([.banner, .list]))
        for authorization in [PushAuthorization.denied, .notDetermined, .provisional] {
            #expect(
                ForegroundPresentation.decide(
                    settings: everything, authorization: authorization, navigation: NavigationState())
                    == .inAppToast, "\(authorization)")
        }
        #expect(
            ForegroundPresentation.decide(
                settings: PushSettings(alert: .disabled), authorization: .authorized, navigation: NavigationState())
                == .inAppToast)
        #expect(
            ForegroundPresentation.decide(
                settings: everything, authorization: .authorized,
                navigation: NavigationState(isOnNotificationCenter: true))
                == .none)
    }

    @Test("seed 001: in an article a toast, with the bell in view its badge, elsewhere the system decides")
    func seed001ToastRule() {
        let everything = PushSettings()
        for authorization in [PushAuthorization.authorized, .denied, .provisional] {
            #expect(
                ForegroundPresentation.decide(
                    settings: everything, authorization: authorization,
                    navigation: NavigationState(isReadingArticle: true)) == .inAppToast,
                "reading an article, push \(authorization)")
            #expect(
                ForegroundPresentation.decide(
                    settings: everything, authorization: authorization,
                    navigation: NavigationState(isBellVisible: true)) == .bellBadge,
                "the bell in view, push \(authorization)")
        }
        // A modal over the article or the feed hides the bell and the article: the system decides.
        #expect(
            ForegroundPresentation.decide(
                settings: everything, authorization: .authorized,
                navigation: NavigationState(presentedModals: 1, isBellVisible: true))
                == .systemBanner([.banner, .list, .sound, .badge]))
        #expect(
            ForegroundPresentation.decide(
                settings: everything, authorization: .denied,
                navigation: NavigationState(presentedModals: 1, isReadingArticle: true)) == .inAppToast)
    }
}
