import BelfryCore
import BelfryWebPush
import Crypto
import Fluent
import Foundation
import Vapor

/// The server's configuration and the few things its parts share (the database, the clock,
/// the streams' hub, the wake signals), built once by `configure` and kept on the application.
/// Stores and services do not hold it: each takes what it uses in its `init`, and
/// ``BelfryServices``, the composition root, builds each of them once from it.
struct BelfryContext: Sendable {
    let settings: ServerConfiguration
    let database: BelfryDatabase
    /// The keys of the configuration: the bootstrap admin keys.
    let apiKeys: APIKeys
    /// The keys created at run time, with scopes.
    let keyStore: KeyStore
    /// The request limits' token buckets, in this instance's memory.
    let rateLimiter: RateLimiter
    let tokens: UserTokens
    /// Signs the web pages' session cookies, CSRF tokens and one-click links.
    let webSigner: WebSigner
    /// The server's clock; tests replace it.
    let now: @Sendable () -> Date
    /// A short digest of the workspace, part of every preference ETag so a config change shows as a new version.
    let workspaceFingerprint: String
    /// A random number in 0..<1 for backoff jitter; tests replace it.
    let jitter: @Sendable () -> Double
    /// Wakes fan-out after an event is stored.
    let fanoutSignal: WorkSignal
    /// Wakes the delivery queue after deliveries are queued.
    let deliverySignal: WorkSignal
    /// Wakes the status event sender after status events are queued.
    let statusSignal = WorkSignal()
    /// Live inbox events for the streams open on this process.
    let inboxHub: InboxHub
    /// What `/metrics` reports.
    let metrics: BelfryMetrics
    /// The VAPID key that signs Web Push requests; browsers subscribe with its public half.
    let vapidKey: VAPIDKey
    /// Set when the application starts shutting down, for the console's live feed.
    let shutdown = ShutdownFlag()
    /// This process, among the instances sharing a database.
    let instance = UUID()
    /// A short name for this process in stream event ids.
    var instanceTag: String { String(instance.uuidString.prefix(8).lowercased()) }
    let logger: Logger

    func fanoutWake() {
        fanoutSignal.wake()
    }

    func deliveryWake() {
        deliverySignal.wake()
    }

    var workspace: WorkspaceConfig { settings.workspace }

    /// What the routes check credentials against.
    var auth: Authenticator { Authenticator(apiKeys: apiKeys, keyStore: keyStore, tokens: tokens, now: now) }

    static func fingerprint(of workspace: WorkspaceConfig) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let data = try encoder.encode(workspace)
        return SHA256.hash(data: data).prefix(6).hexEncoded
    }
}

extension Application {
    private struct ContextKey: StorageKey {
        typealias Value = BelfryContext
    }

    var belfry: BelfryContext {
        get {
            guard let context = storage[ContextKey.self] else {
                preconditionFailure("configure(_:settings:) must run before Belfry's routes are used")
            }
            return context
        }
        set { storage[ContextKey.self] = newValue }
    }
}
