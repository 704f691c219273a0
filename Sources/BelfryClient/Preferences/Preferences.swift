import BelfryCore
import Foundation
import Observation

/// The answer of every preference call: the preferences as the user should now see them, or
/// why not.
public struct PreferenceAPIResponse: Sendable, Equatable {
    /// Whether the call succeeded.
    public enum Status: String, Sendable {
        case success
        case error
    }

    /// Whether the call succeeded.
    public var status: Status
    /// The preferences of the tenant, with the change applied (optimistically, for updates).
    public var body: PreferenceData?
    /// Why the call failed, for `.error`.
    public var error: BelfryClientError?

    static func success(_ body: PreferenceData) -> Self { Self(status: .success, body: body, error: nil) }
    static func failure(_ error: BelfryClientError) -> Self { Self(status: .error, body: nil, error: error) }
}

/// The user's preferences, exactly seed 004's surface: read them with `getPreferences`, then
/// change them with the three `update…` methods.
///
/// Updates are optimistic: `data` changes at once and the method returns it. The write goes
/// out in the background once the user has stopped changing things for `debounce` (1 s; each
/// change starts the wait again), or at the latest `maxWait` (5 s) after the first change of a
/// burst: the changes are coalesced (the last value of each switch wins) into one
/// `POST /v1/me/preferences/changes` per tenant.
/// When the server confirms, `preferencesUpdated` fires; when a write fails, the change is
/// rolled back to the server's state and `preferencesError` fires. A write the server refuses
/// as stale (someone else changed the preferences first, HTTP 412) is re-read and re-applied.
/// Writes not yet confirmed are kept in the `KeyValueStore`, so a change made just before the
/// app is killed is sent on the next launch.
@MainActor
@Observable
public final class Preferences {
    /// Which preferences to read.
    public struct Args: Sendable {
        /// The tenant (site); `nil` or empty for the workspace's default tenant.
        public var tenantId: String?

        /// - Parameter tenantId: the tenant; `nil` for the default.
        public init(tenantId: String? = nil) {
            self.tenantId = tenantId
        }
    }

    /// The preferences of the tenant last read with `getPreferences`, as the user should see them.
    public private(set) var data: PreferenceData?
    /// The tenant `data` belongs to, and that updates change (`nil`: the default tenant).
    public private(set) var tenantId: String?
    /// Whether writes are waiting for the debounce window or the server.
    public private(set) var hasPendingWrites = false

    /// What the server last confirmed for a tenant, and what is shown.
    struct TenantState {
        var confirmed: PreferenceData
        var etag: String?
        var shown: PreferenceData
    }

    @ObservationIgnored private var tenants: [String: TenantState] = [:]
    /// Changes waiting for the window, by tenant key ("" for the default tenant), one per target.
    @ObservationIgnored private var pending: [String: [PreferenceChange]] = [:]
    /// Changes sent and not yet answered.
    @ObservationIgnored private var inFlight: [String: [PreferenceChange]] = [:]
    @ObservationIgnored private var window: (task: Task<Void, Never>, deadline: Date)?
    /// When the first change still waiting was made: the write goes out by `maxWait` after it.
    @ObservationIgnored private var burstStarted: Date?
    /// The writes being sent; changes made meanwhile go out right after them.
    @ObservationIgnored private var sending: Task<Void, Never>?

    @ObservationIgnored private let api: BelfryAPI
    @ObservationIgnored private let store: any KeyValueStore
    @ObservationIgnored private let emitter: BelfryEmitter
    @ObservationIgnored let debounce: TimeInterval
    @ObservationIgnored let maxWait: TimeInterval
    static let storeKey = "belfry.preferences.pending.v2"
    /// Tries of a write the server keeps refusing as stale.
    static let maxStaleRetries = 3

    init(
        api: BelfryAPI, store: any KeyValueStore, emitter: BelfryEmitter, debounce: TimeInterval,
        maxWait: TimeInterval
    ) {
        self.api = api
        self.store = store
        self.emitter = emitter
        self.debounce = debounce
        self.maxWait = max(maxWait, debounce)
        if let saved = store.data(forKey: Self.storeKey), case let changes = PendingWrites.decode(saved),
            !changes.isEmpty
        {
            // Written before the app was last killed: send them as soon as the window allows.
            pending = changes
            hasPendingWrites = true
            openWindow()
        }
    }

    isolated deinit {
        window?.task.cancel()
    }

    // MARK: Seed 004's surface

    /// Reads the preferences of a tenant and makes it the one updates change. Call it first.
    public func getPreferences(args: Args = Args()) async -> PreferenceAPIResponse {
        let key = Self.key(args.tenantId)
        tenantId = key.isEmpty ? nil : key
        do throws(BelfryClientError) {
            let state = try await read(key)
            data = state.shown
            return .success(state.shown)
        } catch {
            emitter.emit(.preferencesError(error))
            return .failure(error)
        }
    }

    /// Turns a category on (`optIn`) or off (`optOut`) for the current tenant.
    public func updateCategoryPreference(
        category: String, preference: PreferenceOptions
    ) async
        -> PreferenceAPIResponse
    {
        change(.category(category, preference))
    }

    /// Turns one channel of a category on or off for the current tenant.
    public func updateChannelPreferenceInCategory(
        channel: String, preference: PreferenceOptions, category: String
    ) async -> PreferenceAPIResponse {
        change(.channelInCategory(channel: channel, category: category, preference))
    }

    /// Sets a channel to every category (`all`) or only the categories that require it (`required`).
    public func updateOverallChannelPreference(
        channel: String, preference: ChannelLevelPreferenceOptions
    ) async
        -> PreferenceAPIResponse
    {
        change(.overallChannel(channel, preference))
    }

    /// Sends waiting writes now instead of at the end of the debounce window (for example when
    /// the app goes to the background), and returns when the server has answered.
    public func flush() async {
        window?.task.cancel()
        window = nil
        burstStarted = nil
        if let sending { await sending.value }
        await startSending()
    }

    // MARK: Applying changes

    private func change(_ change: PreferenceChange) -> PreferenceAPIResponse {
        let key = Self.key(tenantId)
        guard var state = tenants[key] else {
            let error = BelfryClientError(
                code: .invalidRequest, message: "read the preferences with getPreferences before changing them")
            emitter.emit(.preferencesError(error))
            return .failure(error)
        }
        do {
            try state.shown.apply(change)
        } catch {
            // Refused here, as the server would: no request is made.
            let refused = BelfryClientError(code: .init(error.code), message: error.message)
            emitter.emit(.preferencesError(refused))
            return .failure(refused)
        }
        tenants[key] = state
        data = state.shown
        pending[key] = Self.coalesce(pending[key] ?? [], with: [change])
        persist()
        openWindow()
        return .success(state.shown)
    }

    /// `changes` added to `existing`: a later change to the same switch replaces the earlier one.
    static func coalesce(_ existing: [PreferenceChange], with changes: [PreferenceChange]) -> [PreferenceChange] {
        var result = existing
        for change in changes {
            result.removeAll { $0.target == change.target }
            result.append(change)
        }
        return result
    }

    /// (Re)starts the wait: `debounce` from now, but no later than `maxWait` after the first
    /// change of the burst, so that endless toggling still writes.
    private func openWindow() {
        hasPendingWrites = true
        let now = api.clock.now()
        let started = burstStarted ?? now
        burstStarted = started
        let deadline = min(now.addingTimeInterval(debounce), started.addingTimeInterval(maxWait))
        if let window {
            guard window.deadline != deadline else { return }
            window.task.cancel()
        }
        let task = Task { [weak self, clock = api.clock] in
            do {
                try await clock.sleep(until: deadline)
            } catch {
                return
            }
            await self?.windowEnded()
        }
        window = (task, deadline)
    }

    private func windowEnded() async {
        window = nil
        burstStarted = nil
        await startSending()
    }

    private func startSending() async {
        // One batch at a time: what was added while one is under way waits for it.
        while let current = sending { await current.value }
        // The task clears `sending` itself, so whoever awaits it sees it gone once it is done.
        let task = Task {
            await self.send()
            self.sending = nil
            self.hasPendingWrites = !self.pending.isEmpty || self.window != nil
        }
        sending = task
        await task.value
    }

    /// Waits until the window whose deadline has passed (tests advance their clock first) and
    /// the writes under way are answered.
    func settled() async {
        while true {
            if let window, window.deadline <= api.clock.now() {
                await window.task.value
            } else if let sending {
                await sending.value
            } else {
                return
            }
        }
    }

    // MARK: Talking to the server

    /// Sends what is pending now, one request per tenant; changes made meanwhile wait for
    /// their own window.
    private func send() async {
        let batches = pending.filter { !$0.value.isEmpty }
        pending = [:]
        for (key, batch) in batches { inFlight[key] = batch }
        for (key, batch) in batches.sorted(by: { $0.key < $1.key }) {
            await write(batch, key: key)
            inFlight[key] = nil
            persist()
        }
    }

    private func write(_ batch: [PreferenceChange], key: String) async {
        var attempt = 1
        while true {
            let state = tenants[key]
            // A switch toggled back to what the server has needs no request.
            let changes = state.map { state in batch.filter { !state.confirmed.alreadyHas($0) } } ?? batch
            if changes.isEmpty {
                if let state { show(state.confirmed, key: key, confirmedEtag: state.etag) }
                return
            }
            let body = PreferenceChangesRequest(
                tenants: key.isEmpty ? nil : [key], changes: changes,
                ifMatch: key.isEmpty ? nil : state?.etag.map { [key: $0] })
            do throws(BelfryClientError) {
                let answer = try await api.send(
                    "POST", "v1/me/preferences/changes", body: body, idempotent: true)
                let result = try answer.decode(PreferenceChangesResponse.self).results.first
                guard let result else {
                    throw BelfryClientError(code: .invalidResponse, message: "the answer has no result")
                }
                show(result.preferences, key: key, confirmedEtag: result.etag)
                emitter.emit(.preferencesUpdated(tenants[key]?.shown ?? result.preferences, tenant: Self.tenant(key)))
                return
            } catch  where error.status == 412 && attempt < Self.maxStaleRetries {
                // Someone else wrote first: read what they wrote, and apply the user's changes to it.
                attempt += 1
                do throws(BelfryClientError) {
                    try await read(key)
                } catch {
                    rollBack(key: key, error: error)
                    return
                }
            } catch {
                rollBack(key: key, error: error)
                return
            }
        }
    }

    /// Reads a tenant's preferences; what is still pending is shown on top of them.
    @discardableResult
    private func read(_ key: String) async throws(BelfryClientError) -> TenantState {
        let answer = try await api.send(
            "GET", "v1/me/preferences", query: ["tenant": key.isEmpty ? nil : key], idempotent: true)
        let confirmed = try answer.decode(PreferenceData.self)
        show(confirmed, key: key, confirmedEtag: answer.header("ETag"))
        return tenants[key] ?? TenantState(confirmed: confirmed, etag: nil, shown: confirmed)
    }

    /// Records what the server confirmed, and shows it with the writes still to come on top.
    private func show(_ confirmed: PreferenceData, key: String, confirmedEtag: String?) {
        var shown = confirmed
        for change in unconfirmed(key) {
            try? shown.apply(change)
        }
        tenants[key] = TenantState(confirmed: confirmed, etag: confirmedEtag, shown: shown)
        if Self.key(tenantId) == key { data = shown }
    }

    private func rollBack(key: String, error: BelfryClientError) {
        inFlight[key] = nil
        if let state = tenants[key] { show(state.confirmed, key: key, confirmedEtag: state.etag) }
        emitter.emit(.preferencesError(error))
    }

    /// Reads every tenant read before again (a background push's refresh), keeping the user's own
    /// changes that are still on their way; a tenant with a write in flight waits for its answer.
    /// - Returns: whether any changed on the server.
    func refreshRead() async throws(BelfryClientError) -> Bool {
        var changed = false
        for key in tenants.keys.sorted() where inFlight[key] == nil {
            let before = tenants[key]?.etag
            let fresh = try await read(key)
            if fresh.etag != before {
                changed = true
                emitter.emit(.preferencesUpdated(fresh.shown, tenant: key.isEmpty ? nil : key))
            }
        }
        return changed
    }

    /// Another device changed a tenant's preferences (the live stream's `preferences.updated`):
    /// read them again, keeping the user's own changes that are still on their way.
    func serverChanged(tenant: String?, etag: String) async {
        let key = Self.key(tenant)
        guard let state = tenants[key], state.etag != etag, inFlight[key] == nil else { return }
        do throws(BelfryClientError) {
            let fresh = try await read(key)
            emitter.emit(.preferencesUpdated(fresh.shown, tenant: tenant))
        } catch {
            emitter.emit(.preferencesError(error))
        }
    }

    /// The changes of a tenant the server has not confirmed: sent and waiting, then pending.
    private func unconfirmed(_ key: String) -> [PreferenceChange] {
        Self.coalesce(inFlight[key] ?? [], with: pending[key] ?? [])
    }

    /// Stores every tenant's unconfirmed changes. It runs on every toggle: no sets, no copies
    /// beyond the result.
    private func persist() {
        var all: [String: [PreferenceChange]] = [:]
        for key in inFlight.keys { all[key] = unconfirmed(key) }
        for key in pending.keys where all[key] == nil { all[key] = unconfirmed(key) }
        all = all.filter { !$0.value.isEmpty }
        store.set(all.isEmpty ? nil : PendingWrites.encode(all), forKey: Self.storeKey)
    }

    private static func key(_ tenant: String?) -> String { tenant ?? "" }
    private static func tenant(_ key: String) -> String? { key.isEmpty ? nil : key }
}

/// The stored form of pending writes: a line per change, fields separated by tabs
/// (`tenant`, a kind, ids, the value). Written on every toggle, so it is kept much cheaper
/// than JSON; ids never contain tabs or line breaks (the workspace's identifier rule).
enum PendingWrites {
    static func encode(_ writes: [String: [PreferenceChange]]) -> Data {
        var text = ""
        for (tenant, changes) in writes {
            for change in changes {
                switch change {
                case .category(let category, let value):
                    text += "\(tenant)\tc\t\(category)\t\(value.rawValue)\n"
                case .channelInCategory(let channel, let category, let value):
                    text += "\(tenant)\tcc\t\(category)\t\(channel)\t\(value.rawValue)\n"
                case .overallChannel(let channel, let value):
                    text += "\(tenant)\tch\t\(channel)\t\(value.rawValue)\n"
                }
            }
        }
        return Data(text.utf8)
    }

    /// The writes in `data`; lines that do not parse are skipped.
    static func decode(_ data: Data) -> [String: [PreferenceChange]] {
        var writes: [String: [PreferenceChange]] = [:]
        for line in String(decoding: data, as: UTF8.self).split(separator: "\n") {
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            let change: PreferenceChange? =
                switch (fields.count, fields.count > 1 ? fields[1] : "") {
                case (4, "c"): PreferenceOptions(rawValue: fields[3]).map { .category(fields[2], $0) }
                case (5, "cc"):
                    PreferenceOptions(rawValue: fields[4]).map {
                        .channelInCategory(channel: fields[3], category: fields[2], $0)
                    }
                case (4, "ch"):
                    ChannelLevelPreferenceOptions(rawValue: fields[3]).map { .overallChannel(fields[2], $0) }
                default: nil
                }
            if let change { writes[fields[0], default: []].append(change) }
        }
        return writes
    }
}
