import BelfryCore
import Foundation
import Observation

/// The words of the push settings screen; English unless the app gives its own.
public struct PushSettingsText: Sendable {
    public var primaryTitle = "Push notifications"
    public var education =
        "Get notified on this device when someone writes to you, mentions you or thanks you, even when the app is closed. Choose which kinds below."
    public var on = "On"
    public var off = "Off"
    public var turningOn = "Turning on"
    public var deliveredQuietly = "Delivered quietly"
    public var deliveredQuietlyDetail = "Notifications go to Notification Center without sound or banners."
    public var prominentTitle = "Get banners and sounds"
    public var prominentDetail = "Notifications now arrive quietly. Allow banners, sounds and badges for them?"
    public var prominentAction = "Allow"
    public var prominentHint = "Asks for permission to show banners, play sounds and badge the app icon."
    public var primaryHintOff = "Asks for permission and turns on push notifications on this device."
    public var primaryHintOn = "Turns off push notifications on this device."
    public var typeHint = "Turns this kind of push notification on or off on all your sites."
    public var notEditable = "Your site requires this notification; it cannot be turned off."
    public var deniedTitle = "Notifications are turned off in Settings"
    public var deniedDetail = "To get push notifications, allow notifications for this app in the system's Settings."
    public var openSettings = "Open Settings"
    public var openSettingsHint = "Opens this app's page in the system's Settings."
    public var subscriptionFailedTitle = "Couldn't turn on push notifications"
    public var typesFailedTitle = "Couldn't load your notification types"
    public var writeFailedTitle = "Couldn't save your change"
    public var retry = "Try again"
    public var retryHint = "Tries again."

    public init() {}
}

/// The whole Settings > Push Notifications screen of seed 000, as rows a SwiftUI `List` or a
/// UIKit table shows as they are: the primary toggle, the educational cell, a toggle per
/// notification type (only while push is on), and the cells of every error state, each with
/// its accessibility label, value and hint.
///
/// Type toggles are the user's preferences for the push channel, read through the SDK and
/// written to every site of the user in one request; the toggle moves at once and flips back
/// with an alert if the write fails. Nothing is shown while nobody is signed in.
@MainActor
@Observable
public final class PushSettingsModel {
    public struct Accessibility: Sendable, Equatable {
        public var label: String
        public var value: String?
        public var hint: String?
    }

    public struct Row: Identifiable, Sendable, Equatable {
        public enum Kind: Sendable, Equatable {
            case primaryToggle
            case education
            case type(category: String)
            /// The types could not be read; tapping retries.
            case typesUnavailable
            /// Subscribing failed; tapping retries.
            case subscriptionFailed
            /// The OS permission is denied; tapping opens the system's Settings.
            case permissionDenied
            /// Delivered quietly (provisional); tapping asks for banners, sounds and badges.
            case prominentDelivery
        }

        /// What tapping the row (or its button) does.
        public enum Action: Sendable, Equatable {
            case toggle
            case openSettings
            case retrySubscription
            case retryTypes
            case requestProminentDelivery
        }

        public var kind: Kind
        public var title: String
        public var detail: String?
        /// For toggles: whether it shows on.
        public var isOn: Bool?
        public var isEnabled: Bool
        public var action: Action?
        /// The button's title, for rows with an action other than a toggle.
        public var actionTitle: String?
        public var accessibility: Accessibility

        public var id: String {
            switch kind {
            case .primaryToggle: "primary"
            case .education: "education"
            case .type(let category): "type.\(category)"
            case .typesUnavailable: "types-unavailable"
            case .subscriptionFailed: "subscription-failed"
            case .permissionDenied: "permission-denied"
            case .prominentDelivery: "prominent-delivery"
            }
        }
    }

    /// An error to show as a popup (seed 000's error states).
    public struct Alert: Sendable, Equatable {
        public enum Kind: Sendable, Equatable {
            case permissionDenied
            case subscriptionFailed
            case typesReadFailed
            case writeFailed
        }

        public var kind: Kind
        public var title: String
        public var message: String
        /// Whether the alert offers "Try again".
        public var canRetry: Bool
    }

    /// One notification type as the screen shows it.
    struct PushType: Equatable {
        var category: String
        var name: String
        var description: String?
        var isOn: Bool
        var isEditable: Bool
        /// The category itself is off: turning push on turns it on too.
        var categoryOff: Bool
    }

    enum TypesState: Equatable {
        case hidden
        case loading
        case loaded
        case failed(BelfryClientError)
    }

    /// The popup to show, if any.
    public var alert: Alert?

    /// The subscription this screen drives.
    public let registration: PushRegistration
    private(set) var types: [PushType] = []
    private(set) var typesState: TypesState = .hidden
    private var writing: Set<String> = []

    @ObservationIgnored private let client: BelfryClient
    @ObservationIgnored private let sync: TenantPreferenceSync
    @ObservationIgnored private let pushChannel: String
    @ObservationIgnored private let text: PushSettingsText
    @ObservationIgnored private let openSystemSettings: @MainActor () -> Void

    /// - Parameters:
    ///   - pushChannel: the workspace's channel id for this app's pushes (e.g. `ios_push`).
    ///   - openSystemSettings: opens the app's page in the system's Settings
    ///     (`UIApplication.openNotificationSettingsURLString` on iOS).
    public init(
        client: BelfryClient, registration: PushRegistration, sync: TenantPreferenceSync, pushChannel: String,
        text: PushSettingsText = PushSettingsText(), openSystemSettings: @escaping @MainActor () -> Void
    ) {
        self.client = client
        self.registration = registration
        self.sync = sync
        self.pushChannel = pushChannel
        self.text = text
        self.openSystemSettings = openSystemSettings
    }

    // MARK: The rows

    /// The screen, top to bottom.
    public var rows: [Row] {
        guard registration.phase != .loggedOut else { return [] }
        var rows = [primaryRow, educationRow]
        if registration.phase == .on, isQuiet { rows.append(prominentRow) }
        if registration.phase == .on {
            switch typesState {
            case .loaded: rows += types.map(typeRow)
            case .failed: rows.append(typesUnavailableRow)
            case .hidden, .loading: break
            }
        }
        if case .failed = registration.phase { rows.append(subscriptionFailedRow) }
        if registration.phase == .denied { rows.append(deniedRow) }
        return rows
    }

    private var isQuiet: Bool { registration.systemSettings?.authorizationStatus == .provisional }

    private var primaryRow: Row {
        let busy = registration.isBusy
        let value =
            busy && registration.phase != .on
            ? text.turningOn
            : registration.isOn ? (isQuiet ? "\(text.on), \(text.deliveredQuietly)" : text.on) : text.off
        return Row(
            kind: .primaryToggle, title: text.primaryTitle,
            detail: registration.phase == .on && isQuiet
                ? "\(text.deliveredQuietly). \(text.deliveredQuietlyDetail)" : nil,
            isOn: registration.isOn, isEnabled: !busy, action: .toggle, actionTitle: nil,
            accessibility: Accessibility(
                label: text.primaryTitle, value: value,
                hint: registration.isOn ? text.primaryHintOn : text.primaryHintOff))
    }

    private var educationRow: Row {
        Row(
            kind: .education, title: text.education, detail: nil, isOn: nil, isEnabled: true, action: nil,
            actionTitle: nil, accessibility: Accessibility(label: text.education, value: nil, hint: nil))
    }

    private func typeRow(_ type: PushType) -> Row {
        let enabled = type.isEditable && !writing.contains(type.category)
        let detail =
            type.isEditable
            ? type.description
            : [type.description, text.notEditable].compactMap(\.self)
                .joined(separator: " ")
        return Row(
            kind: .type(category: type.category), title: type.name, detail: detail, isOn: type.isOn,
            isEnabled: enabled, action: type.isEditable ? .toggle : nil, actionTitle: nil,
            accessibility: Accessibility(
                label: type.name, value: type.isOn ? text.on : text.off,
                hint: type.isEditable ? text.typeHint : text.notEditable))
    }

    private var typesUnavailableRow: Row {
        var detail: String?
        if case .failed(let error) = typesState { detail = error.message }
        return actionRow(.typesUnavailable, title: text.typesFailedTitle, detail: detail, action: .retryTypes)
    }

    private var subscriptionFailedRow: Row {
        var detail: String?
        if case .failed(let error) = registration.phase { detail = error.message }
        return actionRow(
            .subscriptionFailed, title: text.subscriptionFailedTitle, detail: detail, action: .retrySubscription)
    }

    private var deniedRow: Row {
        Row(
            kind: .permissionDenied, title: text.deniedTitle, detail: text.deniedDetail, isOn: nil, isEnabled: true,
            action: .openSettings, actionTitle: text.openSettings,
            accessibility: Accessibility(
                label: "\(text.deniedTitle). \(text.deniedDetail)", value: nil, hint: text.openSettingsHint))
    }

    private var prominentRow: Row {
        Row(
            kind: .prominentDelivery, title: text.prominentTitle, detail: text.prominentDetail, isOn: nil,
            isEnabled: !registration.isBusy, action: .requestProminentDelivery, actionTitle: text.prominentAction,
            accessibility: Accessibility(
                label: "\(text.prominentTitle). \(text.prominentDetail)", value: nil, hint: text.prominentHint))
    }

    private func actionRow(_ kind: Row.Kind, title: String, detail: String?, action: Row.Action) -> Row {
        Row(
            kind: kind, title: title, detail: detail, isOn: nil, isEnabled: true, action: action,
            actionTitle: text.retry,
            accessibility: Accessibility(
                label: [title, detail].compactMap(\.self).joined(separator: ". "), value: nil, hint: text.retryHint))
    }

    // MARK: What the screen calls

    /// After sign-in: the user and their sites.
    public func signIn(user: String, tenants: [String]) async {
        await registration.login(user: user, tenants: tenants)
        await sync.start(tenants: tenants)
        if registration.phase == .on { await loadTypes() }
    }

    /// On sign-out: the screen empties at once; the device is removed behind the scenes.
    public func signOut() async {
        await registration.logout()
        types = []
        typesState = .hidden
        alert = nil
    }

    /// Seed 000 step 5: the screen appeared; check permission, subscription and types.
    public func appear() async {
        await registration.recheck()
        await refreshTypes()
    }

    /// Seed 000 step 6: the app came to the foreground; permission may have changed in Settings.
    public func foregrounded() async {
        await appear()
    }

    /// The primary toggle (seed 000 steps 2 to 4).
    public func setPushEnabled(_ on: Bool) async {
        alert = nil
        if on {
            await registration.enable()
            switch registration.phase {
            case .on:
                await loadTypes()
            case .denied:
                alert = Alert(
                    kind: .permissionDenied, title: text.deniedTitle, message: text.deniedDetail, canRetry: false)
            case .failed(let error):
                alert = Alert(
                    kind: .subscriptionFailed, title: text.subscriptionFailedTitle, message: error.message,
                    canRetry: true)
            default:
                break
            }
        } else {
            do throws(BelfryClientError) {
                try await registration.disable()
                types = []
                typesState = .hidden
            } catch {
                alert = Alert(kind: .writeFailed, title: text.writeFailedTitle, message: error.message, canRetry: false)
            }
        }
    }

    /// A type toggle (seed 000 step 7): moves at once, is written to every site, and flips back
    /// with an alert if the write fails.
    public func setType(_ category: String, isOn: Bool) async {
        guard let index = types.firstIndex(where: { $0.category == category }), types[index].isEditable,
            types[index].isOn != isOn, !writing.contains(category)
        else { return }
        let before = types[index]
        var changes: [PreferenceChange] = []
        if isOn, before.categoryOff { changes.append(.category(category, .optIn)) }
        changes.append(.channelInCategory(channel: pushChannel, category: category, isOn ? .optIn : .optOut))
        types[index].isOn = isOn
        writing.insert(category)
        defer { writing.remove(category) }
        do throws(BelfryClientError) {
            try await sync.apply(changes)
            if isOn { types[index].categoryOff = false }
        } catch {
            if let current = types.firstIndex(where: { $0.category == category }) { types[current] = before }
            alert = Alert(kind: .writeFailed, title: text.writeFailedTitle, message: error.message, canRetry: false)
        }
    }

    /// What a row's button does: open Settings, try again, or ask for prominent delivery.
    public func perform(_ action: Row.Action) async {
        switch action {
        case .openSettings: openSystemSettings()
        case .retrySubscription: await setPushEnabled(true)
        case .retryTypes: await loadTypes()
        case .requestProminentDelivery: await registration.requestProminentDelivery()
        case .toggle: break
        }
    }

    /// "Try again" on the alert.
    public func retryAlert() async {
        guard let alert else { return }
        self.alert = nil
        switch alert.kind {
        case .subscriptionFailed: await setPushEnabled(true)
        case .typesReadFailed: await loadTypes()
        case .permissionDenied, .writeFailed: break
        }
    }

    public func dismissAlert() {
        alert = nil
    }

    // MARK: Reading the types

    private func refreshTypes() async {
        if registration.phase == .on {
            await loadTypes()
        } else {
            typesState = .hidden
        }
    }

    /// Seed 000 step 3: the types' on/off states from the server, for the user's first site.
    private func loadTypes() async {
        typesState = .loading
        let response = await client.preferences.getPreferences(args: .init(tenantId: registration.tenants.first))
        guard let data = response.body else {
            let error = response.error ?? BelfryClientError(code: .invalidResponse, message: "no preferences")
            typesState = .failed(error)
            alert = Alert(kind: .typesReadFailed, title: text.typesFailedTitle, message: error.message, canRetry: true)
            return
        }
        types = (data.sections ?? []).flatMap { $0.subcategories ?? [] }.compactMap { category in
            guard let channel = category.channels?.first(where: { $0.channel == pushChannel }) else { return nil }
            return PushType(
                category: category.category, name: category.name, description: category.description,
                isOn: category.preference == .optIn && channel.preference == .optIn,
                isEditable: channel.isEditable && (category.preference == .optIn || category.isEditable),
                categoryOff: category.preference == .optOut)
        }
        typesState = .loaded
    }
}
