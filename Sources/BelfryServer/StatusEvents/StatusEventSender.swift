import BelfryHTTP1
import BelfryJSON
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
    /// Each endpoint, its parsed URL and its Standard Webhooks key, by id.
    let endpoints: [String: (endpoint: StatusEndpoint, target: HTTP1Client.Target?, key: HMAC<SHA256>)]
    let client: HTTP1Client
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
        client: HTTP1Client, now: @escaping @Sendable () -> Date, jitter: @escaping @Sendable () -> Double,
        backoff: Backoff, lease: TimeInterval = 60, logger: Logger,
        deliveriesBusy: @escaping @Sendable () -> Bool = { false }
    ) {
        self.database = database
        self.storage = storage
        self.endpoints = Dictionary(
            endpoints.map { ($0.id, ($0, try? HTTP1Client.Target($0.url), WebhookChannel.standardKey($0.secret))) },
            uniquingKeysWith: { first, _ in first })
        self.client = client
        self.now = now
        self.jitter = jitter
        self.backoff = backoff
        self.lease = lease
        self.logger = logger
        self.deliveriesBusy = deliveriesBusy
    }

    /// A claimed row: its reports, and what a split of it needs to write the rest elsewhere.
    private struct Claimed {
        var id: UUID
        var endpoint: String
        var type: String
        var reports: [StatusEventReports.Report]
        var attempt: Int
    }

    private struct Outcome {
        var status: Status
        var next: Date
        var error: String?
        var providerStatus: Int?
    }

    /// How a claimed row ends: the outcome of all its reports, or, when they ended differently,
    /// the row keeps the first group and each other group becomes a row of its own.
    private struct Ending {
        var row: Claimed
        var groups: [(outcome: Outcome, reports: [StatusEventReports.Report])]
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
        let outcomes = await withTaskGroup(of: (Int, Int, Outcome).self) { group in
            for (row, event) in claimed.enumerated() {
                for (index, report) in event.reports.enumerated() {
                    group.addTask { (row, index, await self.send(report, of: event)) }
                }
            }
            var outcomes = claimed.map { [Outcome?](repeating: nil, count: $0.reports.count) }
            for await (row, index, outcome) in group { outcomes[row][index] = outcome }
            return outcomes
        }
        let endings = zip(claimed, outcomes).map { row, outcomes in
            Self.ending(of: row, outcomes: outcomes.compactMap { $0 }, now: now())
        }
        try await record(endings)
        return true
    }

    /// Groups a row's reports by how they ended: sent first, then failed, dead and queued again
    /// (each group's retry at the latest of its reports' times, so none comes back early).
    private static func ending(of row: Claimed, outcomes: [Outcome], now: Date) -> Ending {
        var groups: [(outcome: Outcome, reports: [StatusEventReports.Report])] = []
        for status in [Status.sent, .failed, .dead, .queued] {
            let members = zip(row.reports, outcomes).filter { $0.1.status == status }
            guard var outcome = members.first?.1 else { continue }
            outcome.next = members.map(\.1.next).max() ?? outcome.next
            groups.append((outcome, members.map(\.0)))
        }
        if groups.isEmpty {
            // A body with no report to read (damaged by hand): failed, kept for the console.
            let unreadable = Outcome(status: .failed, next: now, error: "the row holds no report that can be read")
            groups.append((unreadable, []))
        }
        return Ending(row: row, groups: groups)
    }

    /// Records how the claimed rows ended, in one transaction: rows whose reports were all sent
    /// in one statement for each provider status, the others one each, and the reports split
    /// from a row in new rows (bundles, so each keeps its webhook-id).
    private func record(_ endings: [Ending]) async throws {
        let now = self.now()
        let whole = endings.filter { $0.groups.count == 1 }
        let sent = Dictionary(grouping: whole.filter { $0.groups[0].outcome.status == .sent }) {
            $0.groups[0].outcome.providerStatus
        }
        try await storage.write(database()) { db in
            var randomness = IDRandomness()
            for (providerStatus, group) in sent {
                for chunk in group.map(\.row.id).chunked(500) {
                    try await db.sql.update(Tables.statusEvents)
                        .set("status", to: Status.sent.rawValue)
                        .set("next_attempt_at", to: now)
                        .set("lease_expires_at", to: Date?.none)
                        .set("last_error", to: String?.none)
                        .set("last_status", to: providerStatus)
                        .set("updated_at", to: now)
                        .where("id", .in, Array(chunk))
                        .where("worker", .equal, self.name)
                        .whereStatus(is: Status.running.rawValue)
                        .run()
                }
            }
            for ending in endings where ending.groups.count > 1 || ending.groups[0].outcome.status != .sent {
                let (outcome, reports) = ending.groups[0]
                let update = db.sql.update(Tables.statusEvents)
                    .set("status", to: outcome.status.rawValue)
                    .set("next_attempt_at", to: outcome.next)
                    .set("lease_expires_at", to: Date?.none)
                    .set("last_error", to: outcome.error)
                    .set("last_status", to: outcome.providerStatus)
                    .set("updated_at", to: now)
                if ending.groups.count > 1 {
                    update.set("body", to: StatusEventReports.bundle(reports)).set("reports", to: reports.count)
                }
                let updated = try await update.where("id", .equal, ending.row.id)
                    .where("worker", .equal, self.name)
                    .whereStatus(is: Status.running.rawValue)
                    .returning("id").all()
                // A row another worker took over (its lease ran out) is theirs to split.
                guard !updated.isEmpty, ending.groups.count > 1 else { continue }
                let split: [[BulkValue]] = ending.groups.dropFirst().map { outcome, reports in
                    [
                        .id(UUID.timeOrdered(at: now, using: &randomness)), .text(ending.row.endpoint),
                        .text(ending.row.type), .text(StatusEventReports.bundle(reports)), .text(String?.none),
                        .text(outcome.status.rawValue), .integer(ending.row.attempt), .date(outcome.next),
                        .text(outcome.error), .integer(outcome.providerStatus), .date(now), .date(now),
                        .integer(reports.count),
                    ]
                }
                try await self.storage.insert(
                    into: Tables.statusEvents,
                    columns: [
                        "id", "endpoint", "type", "body", "user_external_id", "status", "attempts", "next_attempt_at",
                        "last_error", "last_status", "created_at", "updated_at", "reports",
                    ],
                    rows: split, rowsPerStatement: 100, on: db)
            }
        }
    }

    /// Marks due events (queued and due, or running with an expired lease) as this worker's and
    /// returns them: of the queued ones, only those queued by `queuedBefore` (while deliveries are
    /// under way, `deferral` ago); rows in the order found until they hold ``claimBatch`` reports
    /// (a bundle holds up to ``StatusEventReports/bundleLimit``). The statuses are written out,
    /// not bound: a bound value would not match the partial indexes' `WHERE`.
    private func claim(queuedBefore: Date) async throws -> [Claimed] {
        let now = self.now()
        let locking = storage.kind == .postgres ? " FOR UPDATE SKIP LOCKED" : ""
        let limit = String(Self.claimBatch)
        let due: SQLQueryString = """
            SELECT id, reports FROM (SELECT id, reports FROM status_events
              WHERE status = 'queued' AND next_attempt_at <= \(bind: now) AND created_at <= \(bind: queuedBefore)
              ORDER BY next_attempt_at LIMIT \(unsafeRaw: limit)\(unsafeRaw: locking)) AS queued
            UNION ALL
            SELECT id, reports FROM (SELECT id, reports FROM status_events
              WHERE status = 'running' AND lease_expires_at < \(bind: now)
              LIMIT \(unsafeRaw: limit)\(unsafeRaw: locking)) AS expired
            """
        return try await storage.write(database()) { db in
            var ids: [UUID] = []
            var reports = 0
            for row in try await db.sql.raw(due).all() where reports < Self.claimBatch {
                ids.append(try row.decode(column: "id", as: UUID.self))
                reports += try row.decode(column: "reports", as: Int.self)
            }
            guard !ids.isEmpty else { return [] }
            return try await db.sql.update(Tables.statusEvents)
                .set("status", to: Status.running.rawValue)
                .set("attempts", to: SQLRaw("attempts + 1"))
                .set("lease_expires_at", to: now.addingTimeInterval(self.lease))
                .set("worker", to: self.name)
                .set("updated_at", to: now)
                .where("id", .in, ids)
                .returning("id", "endpoint", "type", "body", "attempts").all().map { row in
                    let id = try row.decode(column: "id", as: UUID.self)
                    return Claimed(
                        id: id, endpoint: try row.decode(column: "endpoint", as: String.self),
                        type: try row.decode(column: "type", as: String.self),
                        reports: StatusEventReports.decode(
                            rowID: id, body: try row.decode(column: "body", as: String.self)),
                        attempt: try row.decode(column: "attempts", as: Int.self))
                }
        }
    }

    private func send(_ report: StatusEventReports.Report, of event: Claimed) async -> Outcome {
        let now = self.now()
        guard let (_, target, key) = endpoints[event.endpoint] else {
            return Outcome(status: .failed, next: now, error: "the endpoint is no longer in the workspace config")
        }
        guard let target else {
            return Outcome(status: .failed, next: now, error: "the endpoint's URL is not an http or https URL")
        }
        let messageID = report.id.lowerCaseText
        let result = await WebhookChannel.post(
            Data(report.body.utf8), to: target, id: messageID, key: key,
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
