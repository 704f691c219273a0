import BelfryCore
import BelfryTestSupport
import Foundation
import Testing
import Vapor

@testable import BelfryServer

/// `belfry events` against the SQLite file a server used: list, show, and retry dead deliveries.
@Suite("belfry events", .serialized)
struct EventsCommandTests {
    @Test("list and show read the server's events; retry queues dead deliveries again, and they are sent")
    func listShowRetry() async throws {
        let directory = try CommandLineTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("belfry.sqlite").path
        let database = ["--database", path]
        let clock = TestClock()

        // A webhook that fails every time: the event's webhook delivery ends dead.
        let failing = try await WebhookReceiver(answers: "500")
        let (dead, fine) = try await withBelfryApp(
            location: .sqlite(path: path), clock: clock, jitter: 1, webhook: failing.webhook
        ) { app, _ in
            let worker = try #require(app.deliveryQueue)
            let dead = try await DeliveryQueueTests.trigger(app)
            while try await app.belfryServices.fanout.processBatch(on: app.db) {}
            for _ in 0..<12 {
                try await worker.runOnce()
                clock.advance(by: 3600)
            }
            let status = try await app.send(.GET, "/v1/events/\(dead)", bearer: testAPIKey).decode(EventStatus.self)
            #expect(status.deliveries["webhook"] == ["dead": 1])
            let fine = try await app.send(
                .POST, "/v1/events", bearer: testAPIKey,
                json: EventRequest(category: "mention", recipients: ["bob"], content: .init(title: "M", body: "b"))
            ).decode(EventAccepted.self).eventID
            while try await app.belfryServices.fanout.processBatch(on: app.db) {}
            return (dead, fine)
        }
        failing.stop()

        let listed = try TestProcess.run(CommandLineTests.executable, ["events"] + database)
        let lines = CommandLineTests.table(listed)
        #expect(lines.count == 2, "\(listed)")
        #expect(lines.first?.first == fine.uuidString, "newest first: \(listed)")
        #expect(lines.last?.dropFirst(2).prefix(4) == ["done", "login-fail", "enwiki", "1/1"], "\(listed)")
        let failedOnes = try TestProcess.run(
            CommandLineTests.executable, ["events", "list", "--state", "failed"] + database)
        #expect(failedOnes == "no events\n")

        let shown = try TestProcess.run(CommandLineTests.executable, ["events", "show", dead.uuidString] + database)
        let before = try JSONDecoder.iso8601.decode(EventStatus.self, from: Data(shown.utf8))
        #expect(before.deliveries["webhook"] == ["dead": 1])
        #expect(before.lastErrors["webhook"] == "the webhook answered 500")

        let retried = try TestProcess.run(CommandLineTests.executable, ["events", "retry", dead.uuidString] + database)
        // The dead webhook delivery, and the email one that failed for want of a relay.
        #expect(retried == "2 deliveries queued again\n")
        let again = try TestProcess.run(CommandLineTests.executable, ["events", "retry", dead.uuidString] + database)
        #expect(again == "0 deliveries queued again\n")
        let after = try JSONDecoder.iso8601.decode(
            EventStatus.self,
            from: Data(try TestProcess.run(CommandLineTests.executable, ["events", "show", "\(dead)"] + database).utf8))
        #expect(after.deliveries["webhook"] == ["queued": 1])
        #expect(before.deliveries["email"] == ["failed": 1])
        #expect(after.deliveries["email"] == ["queued": 1], "failed deliveries come back too")

        for bad in [UUID().uuidString, "not-an-id"] {
            let failure = try #require(throws: TestProcess.Failure.self) {
                try TestProcess.run(CommandLineTests.executable, ["events", "retry", bad] + database)
            }
            #expect(failure.output.contains(bad == "not-an-id" ? "is not an event id" : "no event \(bad)"))
        }

        // The receiver is back: a server's queue sends the retried delivery, with a fresh set of attempts.
        let working = try await WebhookReceiver(answers: "200")
        defer { working.stop() }
        try await withBelfryApp(location: .sqlite(path: path), clock: clock, webhook: working.webhook) { app, _ in
            let worker = try #require(app.deliveryQueue)
            while try await worker.runOnce() > 0 {}
            let status = try await app.send(.GET, "/v1/events/\(dead)", bearer: testAPIKey).decode(EventStatus.self)
            #expect(status.deliveries["webhook"] == ["sent": 1])
        }
        #expect(try working.entries().count == 1)
    }
}

@Suite("belfry send: progress")
struct SendProgressTests {
    @Test("the progress line shows the bar, the rate and the time left, then the time in all")
    func progressLine() {
        #expect(
            SendCommand.Progress.line(done: 5_000, total: 20_000, events: 1, seconds: 2)
                == "[#######.......................] 5000/20000 recipients, 1 event, 2500/s, 0:06 left")
        #expect(
            SendCommand.Progress.line(done: 20_000, total: 20_000, events: 2, seconds: 75.2)
                == "[##############################] 20000/20000 recipients, 2 events, 266/s, 1:15 in all")
        #expect(
            SendCommand.Progress.line(done: 0, total: 10, events: 0, seconds: 0)
                == "[..............................] 0/10 recipients, 0 events")
    }
}
