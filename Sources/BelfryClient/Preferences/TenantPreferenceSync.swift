import BelfryCore
import Foundation
import Observation

/// Keeps a notification type set the same on every site (tenant) of the user, as seed 000
/// steps 7 and 8 ask: the user's app languages plus shared sites such as wikidata and commons.
///
/// A type toggle goes to every tenant in one atomic request. A tenant added to the list gets
/// the user's current choices copied to it; a copy that fails is retried with exponential
/// backoff and jitter, from a queue kept in the `KeyValueStore`, so it survives restarts.
/// Call `start(tenants:)` after login and `setTenants(_:)` whenever the list changes.
@MainActor
@Observable
public final class TenantPreferenceSync {
    /// Where a tenant stands.
    public enum State: Sendable, Equatable {
        /// Has the user's choices.
        case synced
        /// Waiting for its copy; `attempt` copies failed so far.
        case pending(attempt: Int, nextAttempt: Date)
        /// The last copy failed; it is tried again at `nextAttempt`.
        case failed(BelfryClientError, attempt: Int, nextAttempt: Date)
    }

    /// The user's tenants, the first being where choices are copied from.
    public private(set) var tenants: [String] = []
    /// Where each tenant stands.
    public private(set) var states: [String: State] = [:]

    struct Job: Codable, Equatable {
        var tenant: String
        var attempt: Int
        var nextAttempt: Date
    }

    @ObservationIgnored private let api: BelfryAPI
    @ObservationIgnored private let store: any KeyValueStore
    @ObservationIgnored private let jitter: @Sendable () -> Double
    @ObservationIgnored private var timer: (task: Task<Void, Never>, deadline: Date)?
    @ObservationIgnored private var running: Task<Void, Never>?
    static let storeKey = "belfry.tenant-sync.queue.v1"
    static let baseDelay: TimeInterval = 2
    static let maxDelay: TimeInterval = 3600

    /// - Parameter jitter: a number in 0..<1 spreading retries; tests fix it.
    public init(client: BelfryClient, jitter: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }) {
        api = client.api
        store = client.store
        self.jitter = jitter
    }

    isolated deinit {
        timer?.task.cancel()
    }

    /// After login: takes the user's tenants and resumes copies left from an earlier run.
    public func start(tenants: [String]) async {
        self.tenants = tenants
        for job in loadQueue() where tenants.contains(job.tenant) {
            states[job.tenant] = .pending(attempt: job.attempt, nextAttempt: job.nextAttempt)
        }
        for tenant in tenants where states[tenant] == nil { states[tenant] = .synced }
        saveQueue()
        await runDue()
    }

    /// The tenant list changed: new tenants get the user's current choices.
    public func setTenants(_ newTenants: [String]) async {
        let added = newTenants.filter { !tenants.contains($0) }
        tenants = newTenants
        for removed in states.keys where !newTenants.contains(removed) { states[removed] = nil }
        let now = api.clock.now()
        // The first tenant is the source; without another tenant there is nothing to copy.
        for tenant in added { states[tenant] = tenants.count > 1 ? .pending(attempt: 0, nextAttempt: now) : .synced }
        saveQueue()
        await runDue()
    }

    /// Turns a notification type on or off on every tenant at once (one atomic request).
    /// - Throws: when the server refuses or cannot be reached: nothing changed; show the error
    ///   and flip the toggle back.
    public func setCategory(_ category: String, _ preference: PreferenceOptions) async throws(BelfryClientError) {
        try await write([.category(category, preference)], to: tenants)
    }

    /// Turns one channel of a type on or off on every tenant at once.
    public func setChannel(
        _ channel: String, in category: String, _ preference: PreferenceOptions
    ) async throws(BelfryClientError) {
        try await write([.channelInCategory(channel: channel, category: category, preference)], to: tenants)
    }

    /// Makes several changes on every tenant at once (one atomic request).
    public func apply(_ changes: [PreferenceChange]) async throws(BelfryClientError) {
        try await write(changes, to: tenants)
    }

    /// Waits for copies under way, and for those whose time has come (tests advance their clock first).
    public func settled() async {
        while true {
            if let running {
                await running.value
            } else if let timer, timer.deadline <= api.clock.now() {
                await timer.task.value
            } else {
                return
            }
        }
    }

    // MARK: Copying to new tenants

    private func write(_ changes: [PreferenceChange], to tenants: [String]) async throws(BelfryClientError) {
        guard !tenants.isEmpty, !changes.isEmpty else { return }
        _ = try await api.send(
            "POST", "v1/me/preferences/changes", body: PreferenceChangesRequest(tenants: tenants, changes: changes),
            idempotent: true)
    }

    private func timerFired() async {
        timer = nil
        await runDue()
    }

    /// Runs every copy that is due, then waits for the next one.
    private func runDue() async {
        if let running {
            await running.value
        }
        let task = Task {
            await self.copyDue()
            self.running = nil
        }
        running = task
        await task.value
        scheduleNext()
    }

    private func copyDue() async {
        let now = api.clock.now()
        for tenant in tenants {
            let attempt: Int
            switch states[tenant] {
            case .pending(let tried, let next) where next <= now: attempt = tried
            case .failed(_, let tried, let next) where next <= now: attempt = tried
            default: continue
            }
            do throws(BelfryClientError) {
                try await copy(to: tenant)
                states[tenant] = .synced
            } catch {
                let tries = attempt + 1
                let ceiling = min(Self.maxDelay, Self.baseDelay * pow(2, Double(tries - 1)))
                // Half the delay fixed, half random: retries of many devices spread out.
                let delay = ceiling / 2 + ceiling / 2 * jitter()
                states[tenant] = .failed(error, attempt: tries, nextAttempt: now.addingTimeInterval(delay))
            }
            saveQueue()
        }
    }

    /// Copies the source tenant's category and category-channel choices to `tenant`.
    private func copy(to tenant: String) async throws(BelfryClientError) {
        guard let source = tenants.first(where: { $0 != tenant && states[$0] == .synced }) else {
            throw BelfryClientError(code: .invalidRequest, message: "no synced tenant to copy the choices from")
        }
        let data = try await api.send("GET", "v1/me/preferences", query: ["tenant": source], idempotent: true)
            .decode(PreferenceData.self)
        var changes: [PreferenceChange] = []
        for category in (data.sections ?? []).flatMap({ $0.subcategories ?? [] }) {
            if category.isEditable { changes.append(.category(category.category, category.preference)) }
            for channel in category.channels ?? [] where channel.isEditable {
                changes.append(
                    .channelInCategory(channel: channel.channel, category: category.category, channel.preference))
            }
        }
        try await write(changes, to: [tenant])
    }

    private func scheduleNext() {
        timer?.task.cancel()
        timer = nil
        let next = states.values.compactMap { state -> Date? in
            switch state {
            case .pending(_, let date), .failed(_, _, let date): date
            case .synced: nil
            }
        }.min()
        guard let next else { return }
        let task = Task { [weak self, clock = api.clock] in
            do {
                try await clock.sleep(until: next)
            } catch {
                return
            }
            await self?.timerFired()
        }
        timer = (task, next)
    }

    // MARK: The persisted queue

    private func loadQueue() -> [Job] {
        store.data(forKey: Self.storeKey).flatMap { try? JSONDecoder().decode([Job].self, from: $0) } ?? []
    }

    private func saveQueue() {
        let jobs = tenants.compactMap { tenant -> Job? in
            switch states[tenant] {
            case .pending(let attempt, let next), .failed(_, let attempt, let next):
                Job(tenant: tenant, attempt: attempt, nextAttempt: next)
            default: nil
            }
        }
        store.set(jobs.isEmpty ? nil : try? JSONEncoder().encode(jobs), forKey: Self.storeKey)
    }
}
