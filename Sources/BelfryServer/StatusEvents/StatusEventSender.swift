import AsyncHTTPClient
import Crypto
import Fluent
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import SQLKit

/// Sends the queued status events to their endpoints: claims due ones with a lease, posts each
/// signed per Standard Webhooks (`webhook-id` is the event's id, the same on every attempt), and
/// records the answer: 2xx sent; 408, 425, 429 and 5xx (and no answer) retried with backoff,
/// after `Retry-After` when longer; anything else failed; dead after the last attempt. At least
/// once, like every delivery: a receiver recognises a repeat by its `webhook-id`. Several
/// instances share the table (`FOR UPDATE SKIP LOCKED` on PostgreSQL).
final class StatusEventSender: Sendable {
    enum Status: String, Sendable, CaseIterable {
        case queued, running, sent, failed, dead
    }

    let database: @Sendable () -> any Database
    let storage: BelfryDatabase
    /// Each endpoint and its Standard Webhooks key, by id.
    let endpoints: [String: (endpoint: StatusEndpoint, key: SymmetricKey)]
    let client: HTTPClient
    let now: @Sendable () -> Date
    let jitter: @Sendable () -> Double
    let backoff: Backoff
    let lease: TimeInterval
    let logger: Logger
    /// Whether this instance's delivery queue is at work: then the sender takes only events
    /// older than `deferral`, so that reports wait for the deliveries, not the other way round.
    let deliveriesBusy: @Sendable () -> Bool
    /// How long a status event waits at most for a busy delivery queue.
    static let deferral: TimeInterval = 30
    /// While deliveries run, how often the sender looks for reports that waited `deferral`:
    /// each look is a write (the claim), and the reports queued meanwhile wake it constantly.
    static let busyLookInterval: TimeInterval = 5
    private let lastBusyLook = NIOLockedValueBox<Date>(.distantPast)
    /// This process, as recorded on the events it claims.
    let name = "\(ProcessInfo.processInfo.processIdentifier)-\(UUID().uuidString.prefix(8))"
    static let maxAttempts = 8
    static let claimBatch = 256
    static let timeout: TimeAmount = .seconds(10)

    init(
        database: @escaping @Sendable () -> any Database, storage: BelfryDatabase, endpoints: [StatusEndpoint],
        client: HTTPClient, now: @escaping @Sendable () -> Date, jitter: @escaping @Sendable () -> Double,
        backoff: Backoff, lease: TimeInterval = 60, logger: Logger,
        deliveriesBusy: @escaping @Sendable () -> Bool = { false }
    ) {
        self.database = database
        self.storage = storage
        self.endpoints = Dictionary(
            endpoints.map { ($0.id, ($0, WebhookChannel.standardKey($0.secret))) },
            uniquingKeysWith: { first, _ in first })
        self.client = client
        self.now = now
        self.jitter = jitter
        self.backoff = backoff
        self.lease = lease
        self.logger = logger
        self.deliveriesBusy = deliveriesBusy
    }

    private struct Claimed {
        var id: UUID
        var endpoint: String
        var body: String
        var attempt: Int
    }

    private struct Outcome {
        var status: Status
        var next: Date
        var error: String?
        var providerStatus: Int?
    }

    /// Claims the events due now, sends them at once, and records every answer in one transaction.
    /// - Returns: whether there were any, so that the loop looks again at once.
    @discardableResult
    func runOnce() async throws -> Bool {
        var queuedBefore = now()
        if deliveriesBusy() {
            let now = queuedBefore
            let look = lastBusyLook.withLockedValue { last in
                guard now.timeIntervalSince(last) >= Self.busyLookInterval else { return false }
                last = now
                return true
            }
            guard look else { return false }
            queuedBefore = now.addingTimeInterval(-Self.deferral)
        }
        let claimed = try await claim(queuedBefore: queuedBefore)
        guard !claimed.isEmpty else { return false }
        let outcomes = await withTaskGroup(of: (UUID, Outcome).self) { group in
            for event in claimed {
                group.addTask { (event.id, await self.send(event)) }
            }
            var outcomes: [(UUID, Outcome)] = []
            for await outcome in group { outcomes.append(outcome) }
            return outcomes
        }
        let now = self.now()
        // Sent ones end alike: one statement for all of them; the others one each.
        let sent = Dictionary(grouping: outcomes.filter { $0.1.status == .sent }) { $0.1.providerStatus }
        let others = outcomes.filter { $0.1.status != .sent }
        try await storage.write(database()) { db in
            for (providerStatus, group) in sent {
                for chunk in group.map(\.0).chunked(500) {
                    try await db.sql.update("status_events")
                        .set("status", to: Status.sent.rawValue)
                        .set("next_attempt_at", to: now)
                        .set("lease_expires_at", to: Date?.none)
                        .set("last_error", to: String?.none)
                        .set("last_status", to: providerStatus)
                        .set("updated_at", to: now)
                        .where("id", .in, Array(chunk))
                        .where("worker", .equal, self.name)
                        .where("status", .equal, Status.running.rawValue)
                        .run()
                }
            }
            for (id, outcome) in others {
                try await db.sql.update("status_events")
                    .set("status", to: outcome.status.rawValue)
                    .set("next_attempt_at", to: outcome.next)
                    .set("lease_expires_at", to: Date?.none)
                    .set("last_error", to: outcome.error)
                    .set("last_status", to: outcome.providerStatus)
                    .set("updated_at", to: now)
                    .where("id", .equal, id)
                    .where("worker", .equal, self.name)
                    .where("status", .equal, Status.running.rawValue)
                    .run()
            }
        }
        return true
    }

    /// Marks due events (queued and due, or running with an expired lease) as this worker's, in
    /// one statement, and returns them; of the queued ones, only those queued by `queuedBefore`
    /// (while deliveries are under way, `deferral` ago). The statuses are written out, not bound:
    /// a bound value would not match the partial indexes' `WHERE`.
    private func claim(queuedBefore: Date) async throws -> [Claimed] {
        let now = self.now()
        let locking = storage.kind == .postgres ? " FOR UPDATE SKIP LOCKED" : ""
        let limit = String(Self.claimBatch)
        let statement: SQLQueryString = """
            UPDATE status_events SET status = \(bind: Status.running.rawValue), attempts = attempts + 1,
              lease_expires_at = \(bind: now.addingTimeInterval(lease)), worker = \(bind: name), updated_at = \(bind: now)
            WHERE id IN (SELECT id FROM (
              SELECT id FROM (SELECT id FROM status_events
                WHERE status = 'queued' AND next_attempt_at <= \(bind: now)
                  AND created_at <= \(bind: queuedBefore)
                ORDER BY next_attempt_at LIMIT \(unsafeRaw: limit)\(unsafeRaw: locking)) AS queued
              UNION ALL
              SELECT id FROM (SELECT id FROM status_events
                WHERE status = 'running' AND lease_expires_at < \(bind: now)
                LIMIT \(unsafeRaw: limit)\(unsafeRaw: locking)) AS expired
            ) AS due)
            RETURNING id, endpoint, body, attempts
            """
        return try await storage.write(database()) { db in
            try await db.sql.raw(statement).all().map { row in
                Claimed(
                    id: try row.decode(column: "id", as: UUID.self),
                    endpoint: try row.decode(column: "endpoint", as: String.self),
                    body: try row.decode(column: "body", as: String.self),
                    attempt: try row.decode(column: "attempts", as: Int.self))
            }
        }
    }

    private func send(_ event: Claimed) async -> Outcome {
        let now = self.now()
        guard let (endpoint, key) = endpoints[event.endpoint] else {
            return Outcome(status: .failed, next: now, error: "the endpoint is no longer in the workspace config")
        }
        let messageID = event.id.lowerCaseText
        let result = await WebhookChannel.post(
            Data(event.body.utf8), to: endpoint.url, id: messageID, key: key,
            timestamp: Int(now.timeIntervalSince1970), client: client, timeout: Self.timeout,
            failure: "the status webhook request failed", now: self.now)
        switch result {
        case .delivered(let status):
            return Outcome(status: .sent, next: now, providerStatus: status)
        case .retry(let after, let reason, let status):
            guard event.attempt < Self.maxAttempts else {
                logger.warning(
                    "a status event is dead after its last attempt",
                    metadata: ["belfry.status_event": "\(messageID)", "belfry.error": "\(reason)"])
                return Outcome(status: .dead, next: now, error: reason, providerStatus: status)
            }
            let delay = backoff.delay(afterAttempt: event.attempt, retryAfter: after, jitter: jitter())
            return Outcome(status: .queued, next: now.addingTimeInterval(delay), error: reason, providerStatus: status)
        case .failed(let reason, let status), .retire(_, let reason, let status):
            return Outcome(status: .failed, next: now, error: reason, providerStatus: status)
        case .skipped(let reason):
            return Outcome(status: .failed, next: now, error: reason.rawValue)
        }
    }
}
