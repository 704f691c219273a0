import AsyncHTTPClient
import BelfryCore
import BelfryTestSupport
import Fluent
import Foundation
import SQLKit
import Testing
import Vapor

@testable import BelfryServer

/// `/metrics`: the counts moving after real deliveries, in process and in a `belfry serve`.
@Suite("metrics", .serialized)
struct MetricsTests {
    /// One sample of an exposition, by its series (name and labels as printed); `nil` when absent.
    static func sample(_ exposition: String, _ series: String) -> Double? {
        exposition.split(separator: "\n").first { $0.hasPrefix(series + " ") }
            .flatMap { Double($0.dropFirst(series.count + 1)) }
    }

    @Test(
        "a retried webhook, a failed email and the inbox are counted by channel and outcome",
        arguments: TestDatabase.allCases)
    func deliveriesInProcess(database: TestDatabase) async throws {
        let receiver = try await WebhookReceiver(answers: "500,200")
        defer { receiver.stop() }
        let clock = TestClock()
        try await withBelfry(database, clock: clock, jitter: 0.5, webhook: receiver.webhook) { app in
            let worker = try #require(app.deliveryQueue)
            _ = try await DeliveryQueueTests.trigger(app, to: ["ada", "bob"])
            let queued = try await app.send(.GET, "/metrics").body.string
            #expect(Self.sample(queued, #"belfry_outbox_pending{channel="webhook"}"#) == 2)
            #expect(Self.sample(queued, #"belfry_outbox_pending{channel="email"}"#) == 2)
            #expect(Self.sample(queued, #"belfry_outbox_pending{channel="ios_push"}"#) == 0, "every channel is listed")
            #expect(Self.sample(queued, #"belfry_deliveries_total{channel="inbox",outcome="sent"}"#) == 2)
            #expect(Self.sample(queued, "belfry_fanout_recipients_total") == 2)
            #expect(Self.sample(queued, #"belfry_events_total{state="accepted"}"#) == 1)
            #expect(Self.sample(queued, #"belfry_events_total{state="done"}"#) == 1)
            #expect(Self.sample(queued, #"belfry_delivery_latency_seconds_count{channel="inbox"}"#) == 2)
            clock.advance(by: 7)
            let waiting = try await app.send(.GET, "/metrics").body.string
            #expect(Self.sample(waiting, #"belfry_outbox_oldest_seconds{channel="webhook"}"#) == 7)
            #expect(Self.sample(waiting, #"belfry_outbox_oldest_seconds{channel="ios_push"}"#) == 0)

            // The first webhook attempt gets a 500, the second a 200; email has no relay configured.
            while try await worker.runOnce() > 0 {}
            clock.advance(by: 3600)
            while try await worker.runOnce() > 0 {}
            let sent = try await app.send(.GET, "/metrics").body.string
            #expect(Self.sample(sent, #"belfry_deliveries_total{channel="webhook",outcome="retry"}"#) == 1)
            #expect(Self.sample(sent, #"belfry_deliveries_total{channel="webhook",outcome="sent"}"#) == 2)
            #expect(Self.sample(sent, #"belfry_deliveries_total{channel="email",outcome="failed"}"#) == 2)
            #expect(Self.sample(sent, #"belfry_outbox_pending{channel="webhook"}"#) == 0)
            #expect(Self.sample(sent, #"belfry_outbox_pending{channel="email"}"#) == 0)
            #expect(Self.sample(sent, #"belfry_outbox_oldest_seconds{channel="webhook"}"#) == 0)
            // One webhook delivery sent 7 s after the 202, the other an hour later, after its retry.
            #expect(Self.sample(sent, #"belfry_delivery_latency_seconds_count{channel="webhook"}"#) == 2)
            let latency = try #require(Self.sample(sent, #"belfry_delivery_latency_seconds_sum{channel="webhook"}"#))
            #expect(abs(latency - (7 + 3607)) < 1, "\(latency)")
            #expect(Self.sample(sent, #"belfry_delivery_latency_seconds_count{channel="email"}"#) == 0, "none sent")
            #expect(sent.contains("# TYPE belfry_deliveries_total counter"))
            #expect(sent.contains("# HELP belfry_deliveries_total Finished delivery attempts"))
            // The outbox's reads go by index, never through every delivery.
            try await Self.expectOutboxIndexReads(on: app.db)

            // Requests are timed by route pattern, never by the ids in their path.
            let route = #"route="/v1/users/:user_id",method="PUT",status="201""#
            #expect(Self.sample(sent, "belfry_http_request_duration_seconds_count{\(route)}") == 2, "\(sent)")
            #expect(sent.contains(#"route="/v1/events",method="POST",status="202""#))
            #expect(!sent.contains("ada"), "no user id in any label")
            _ = try await app.send(.GET, "/no/such/page")
            let unmatched = try await app.send(.GET, "/metrics").body.string
            #expect(unmatched.contains(#"route="unmatched",method="GET",status="404""#))
            #expect(unmatched.contains("# TYPE belfry_http_request_duration_seconds histogram"))
        }
    }

    /// The outbox's reads, as `/metrics` and the console make them, planned by each database:
    /// queued deliveries counted and their oldest found in the claim index (the oldest one
    /// lookup a channel, no grouping of every row); the other statuses counted in
    /// `deliveries_due`, which on PostgreSQL leaves sent deliveries out
    /// (`PartialDeliveriesDueIndex`).
    static func expectOutboxIndexReads(on db: any Database) async throws {
        let sql = db.sql
        let statuses = Outbox.pendingStatuses + DeadLetters.retryable
        let all = try await plan(Outbox.countsQuery(statuses, on: sql), on: db)
        #expect(all.contains("deliveries_claim") && all.contains("deliveries_due"), "\(all)")
        let queued = try await plan(Outbox.countsQuery([.queued], on: sql), on: db)
        #expect(queued.contains("deliveries_claim"), "\(queued)")
        let first = try await plan(Outbox.firstQueued(["webhook", "email"]), on: db)
        #expect(first.contains("deliveries_claim"), "\(first)")
        if sql.dialect.name == "sqlite" {
            // A search by channel in the index (SQLite's `MIN` reads its first entry), not a scan.
            #expect(first.contains("SEARCH deliveries USING COVERING INDEX deliveries_claim (channel=?)"), "\(first)")
            // Counted in the index alone, in its order: no row read, no sorting.
            #expect(queued.contains("USING COVERING INDEX deliveries_claim"), "\(queued)")
            #expect(!queued.contains("TEMP B-TREE"), "\(queued)")
        }
        let rest = try await plan(Outbox.countsQuery(statuses.filter { $0 != .queued }, on: sql), on: db)
        #expect(rest.contains("deliveries_due"), "\(rest)")
        guard sql.dialect.name == "postgresql" else { return }
        let definition = try await sql.raw(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'deliveries_due'"
        ).first()?.decode(column: "indexdef", as: String.self)
        #expect(definition?.contains("WHERE (status <> 'sent'::text)") == true, "\(definition ?? "none")")
    }

    /// The database's plan for `query`, as text. On PostgreSQL sequential scans are off: the
    /// tables here are small enough to be read whole otherwise, and the question is whether an
    /// index serves.
    static func plan(_ query: SQLQueryString, on db: any Database) async throws -> String {
        guard db.sql.dialect.name == "postgresql" else {
            return try await db.sql.raw("EXPLAIN QUERY PLAN \(query)").all()
                .map { try $0.decode(column: "detail", as: String.self) }.joined(separator: "\n")
        }
        return try await db.transaction { tx in
            try await tx.sql.raw("SET LOCAL enable_seqscan = off").run()
            return try await tx.sql.raw("EXPLAIN \(query)").all()
                .map { try $0.decode(column: "QUERY PLAN", as: String.self) }.joined(separator: "\n")
        }
    }

    @Test("a served instance counts its deliveries and open streams, behind the metrics token")
    func servedInstance() async throws {
        let directory = try CommandLineTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let receiver = try await WebhookReceiver(answers: "200")
        defer { receiver.stop() }
        let config = directory.appendingPathComponent("workspace.json")
        try Data(BatchProcessTests.config.utf8).write(to: config)
        let metricsToken = "scraper-token-0123456789abcdef"
        let server = try await BelfryServeProcess.start(
            database: directory.appendingPathComponent("belfry.sqlite").path,
            environment: [
                "BELFRY_API_KEY": BatchProcessTests.key, "DATABASE_URL": "", "BELFRY_CONFIG": config.path,
                "BELFRY_WEBHOOK_URL": receiver.webhook.url, "BELFRY_WEBHOOK_SECRET": receiver.webhook.secret,
                "BELFRY_METRICS_TOKEN": metricsToken,
            ])
        defer { server.process.terminate() }
        let base = server.base

        for bearer in [nil, BatchProcessTests.key] {
            let refused = try await CommandLineTests.request("GET", "\(base)/metrics", bearer: bearer)
            #expect(refused.status == 401, "only the metrics token: \(refused.body)")
        }
        func scrape() async throws -> String {
            let answer = try await CommandLineTests.request("GET", "\(base)/metrics", bearer: metricsToken)
            #expect(answer.status == 200)
            return answer.body
        }
        // A fresh process: every documented series is there, at 0, before anything happened.
        let fresh = try await scrape()
        #expect(Self.sample(fresh, "belfry_streams_open") == 0)
        for outcome in ["sent", "retry", "failed", "skipped", "dead"] {
            #expect(
                Self.sample(fresh, #"belfry_deliveries_total{channel="webhook",outcome="\#(outcome)"}"#) == 0,
                "\(outcome)")
        }
        for state in ["accepted", "done", "failed"] {
            #expect(Self.sample(fresh, #"belfry_events_total{state="\#(state)"}"#) == 0)
        }
        #expect(Self.sample(fresh, #"belfry_delivery_latency_seconds_count{channel="webhook"}"#) == 0)
        #expect(Self.sample(fresh, #"belfry_build_info{version="\#(belfryVersion)"}"#) == 1)
        #expect((Self.sample(fresh, "process_cpu_seconds_total") ?? 0) > 0)
        #expect((Self.sample(fresh, "process_resident_memory_bytes") ?? 0) > 1_000_000)
        #expect((Self.sample(fresh, "process_open_fds") ?? 0) > 3)
        #expect((Self.sample(fresh, "process_max_fds") ?? 0) >= 1024)
        let started = Self.sample(fresh, "process_start_time_seconds") ?? 0
        #expect(abs(started - Date().timeIntervalSince1970) < 120)

        let put = try await CommandLineTests.request(
            "PUT", "\(base)/v1/users/ada", bearer: BatchProcessTests.key, json: "{}")
        #expect(put.status == 201, "\(put.body)")
        let minted = try await CommandLineTests.request(
            "POST", "\(base)/v1/users/ada/tokens", bearer: BatchProcessTests.key, json: "{}")
        let token = try JSONDecoder.iso8601.decode(TokenGrant.self, from: Data(minted.body.utf8)).token
        var streamRequest = HTTPClientRequest(url: "\(base)/v1/me/stream")
        streamRequest.headers.add(name: "Authorization", value: "Bearer \(token)")
        let stream = EventStreamReader(try await HTTPClient.shared.execute(streamRequest, timeout: .seconds(60)))
        #expect(try await stream.next()?.name == "counts")
        #expect(Self.sample(try await scrape(), "belfry_streams_open") == 1)

        let accepted = try await CommandLineTests.request(
            "POST", "\(base)/v1/events", bearer: BatchProcessTests.key,
            json:
                #"{"category": "mention", "recipients": ["ada", "bob", "cy"], "content": {"title": "M", "body": "b"}}"#
        )
        #expect(accepted.status == 202, "\(accepted.body)")
        #expect(try await stream.next(within: 30)?.name == "notification.created")
        // The webhook deliveries are counted once recorded, just after the receiver answers. A
        // scrape reads the outbox before it writes the counters out: one that read it just
        // before the results committed shows them sent and still pending.
        let deadline = Date().addingTimeInterval(30)
        var exposition = try await scrape()
        while Self.sample(exposition, #"belfry_deliveries_total{channel="webhook",outcome="sent"}"#) != 3
            || Self.sample(exposition, #"belfry_outbox_pending{channel="webhook"}"#) != 0,
            Date() < deadline
        {
            try await Task.sleep(for: .milliseconds(100))
            exposition = try await scrape()
        }
        #expect(try receiver.entries().count == 3)
        #expect(Self.sample(exposition, #"belfry_deliveries_total{channel="webhook",outcome="sent"}"#) == 3)
        #expect(Self.sample(exposition, #"belfry_deliveries_total{channel="inbox",outcome="sent"}"#) == 3)
        #expect(Self.sample(exposition, "belfry_fanout_recipients_total") == 3)
        #expect(Self.sample(exposition, #"belfry_events_total{state="done"}"#) == 1)
        #expect(Self.sample(exposition, #"belfry_outbox_pending{channel="webhook"}"#) == 0)
        #expect(Self.sample(exposition, "belfry_streams_open") == 1)
        #expect(Self.sample(exposition, #"belfry_events_total{state="accepted"}"#) == 1)

        // `belfry send`, a process of its own, writes an event to the same database: the server
        // that fans it out counts it as accepted.
        _ = try TestProcess.run(
            CommandLineTests.executable,
            [
                "send", "--database", directory.appendingPathComponent("belfry.sqlite").path, "--config", config.path,
                "--category", "mention", "--title", "From the CLI", "--body", "b", "--to", "ada",
            ])
        var counted = 0.0
        for _ in 0..<300 where counted < 2 {
            try await Task.sleep(for: .milliseconds(100))
            counted = Self.sample(try await scrape(), #"belfry_events_total{state="accepted"}"#) ?? 0
        }
        #expect(counted == 2)
    }
}
