import BelfryCore
import Foundation

/// The Belfry SDK an app embeds: the user's notification preferences (optimistic, debounced,
/// synced to every site), their inbox and bell badge, and the live stream that keeps them
/// current across devices.
///
/// ```swift
/// let belfry = BelfryClient(
///     baseURL: URL(string: "https://notify.example.org")!,
///     tokenProvider: ClosureTokenProvider { refresh in try await myBackend.belfryToken(refresh: refresh) })
/// let response = await belfry.preferences.getPreferences(args: .init(tenantId: "enwiki"))
/// belfry.emitter.on(.preferencesError) { error in showToast(error.message) }
/// ```
@MainActor
public final class BelfryClient {
    let api: BelfryAPI
    let store: any KeyValueStore

    /// Events of the preferences: `preferencesUpdated` and `preferencesError`.
    public let emitter: BelfryEmitter
    /// The user's preferences (seed 004's surface): optimistic, with writes debounced and coalesced.
    public let preferences: Preferences
    /// The user's inbox and its live updates.
    public let inbox: Inbox
    /// Notifications opened from the system, marked read once (queued while offline).
    public let opened: OpenedNotifications
    /// The refresh a background push started, which pushes arriving meanwhile share.
    var backgroundRefresh: Task<BackgroundFetchResult, Never>?
    /// The counts the last background refresh read, to tell new data from none.
    var refreshedCounts: InboxCounts?

    /// - Parameters:
    ///   - baseURL: where Belfry serves its API.
    ///   - tokenProvider: gives the signed-in user's token; asked again with `refresh` after a 401.
    ///   - transport: sends requests; `URLSessionTransport` unless testing.
    ///   - clock: time for debounce, backoff and reconnects.
    ///   - store: keeps pending writes across launches; `UserDefaults` on Apple platforms, files elsewhere.
    ///   - debounce: how long preference writes wait after the last change, to be coalesced.
    ///   - maxWait: the longest a change waits while changes keep coming.
    public init(
        baseURL: URL, tokenProvider: any TokenProvider, transport: any HTTPTransport = URLSessionTransport(),
        clock: any ClientClock = SystemClock(), store: (any KeyValueStore)? = nil, debounce: TimeInterval = 1,
        maxWait: TimeInterval = 5
    ) {
        api = BelfryAPI(
            baseURL: baseURL, tokenProvider: tokenProvider, transport: transport, clock: clock,
            retryDelays: [0.5, 1, 2])
        let store = store ?? Self.defaultStore()
        self.store = store
        emitter = BelfryEmitter()
        preferences = Preferences(api: api, store: store, emitter: emitter, debounce: debounce, maxWait: maxWait)
        inbox = Inbox(api: api)
        opened = OpenedNotifications(
            api: api, store: store, clock: clock, categories: { Self.keptWorkspace(in: store)?.categories ?? [] })
    }

    /// Keeps `preferences` current with changes made on the user's other devices (the live
    /// stream's `preferences.updated`), and, given the system's notification center, removes
    /// notifications read or archived elsewhere from it and keeps the badge (see
    /// ``DeliveredReconciler``). One stream does both. Runs until the task is cancelled.
    public func followPreferenceChanges(reconciling scheduler: (any NotificationScheduling)? = nil) async {
        let reconciler = scheduler.map(DeliveredReconciler.init)
        for await event in inbox.updates() {
            if case .preferencesUpdated(let tenant, let etag) = event {
                await preferences.serverChanged(tenant: tenant, etag: etag)
            }
            await reconciler?.apply(event)
        }
    }

    private static func defaultStore() -> any KeyValueStore {
        #if canImport(Darwin)
            return UserDefaultsStore()
        #else
            let base =
                FileManager.default.urls(for: .applicationSupportDirectory, in: .userDomainMask).first
                ?? FileManager.default.temporaryDirectory
            return FileKeyValueStore(directory: base.appendingPathComponent("belfry"))
        #endif
    }
}
