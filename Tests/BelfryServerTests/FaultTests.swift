import BelfryCore
import BelfryTestSupport
import Foundation
import SQLKit
import Testing
import Vapor

@testable import BelfryServer

/// Receivers that fail at random: every delivery still arrives, and none twice.
@Suite("Faults: flaky receivers", .serialized)
struct FaultTests {
    @Test(
        "a webhook failing 30 % of requests (500, or 429 with Retry-After) at random still gets every delivery once",
        arguments: TestDatabase.allCases)
    func flakyWebhook(database: TestDatabase) async throws {
        let receiver = try await WebhookReceiver(answers: "flaky:30:\(Int.random(in: 1...1_000_000))")
        defer { receiver.stop() }
        let clock = TestClock()
        try await withBelfry(database, clock: clock, webhook: receiver.webhook) { app in
            let worker = try #require(app.deliveryQueue)
            let users = (0..<150).map { "reader-\($0)" }
            let id = try await DeliveryQueueTests.trigger(app, to: users)
            var rounds = 0
            while rounds < 60 {
                rounds += 1
                while try await worker.runOnce() > 0 {}
                let status = try await app.send(.GET, "/v1/events/\(id)", bearer: testAPIKey)
                    .decode(EventStatus.self)
                if status.deliveries["webhook"] == ["sent": users.count] { break }
                // Past any backoff (at most 5 s × 2⁴ with jitter) and Retry-After.
                clock.advance(by: 120)
            }
            let status = try await app.send(.GET, "/v1/events/\(id)", bearer: testAPIKey).decode(EventStatus.self)
            #expect(status.deliveries["webhook"] == ["sent": users.count], "\(status.deliveries)")
            #expect(status.notifications == users.count)

            let entries = try receiver.entries()
            #expect(entries.allSatisfy { $0.valid })
            let failed = entries.filter { $0.answered != 200 }
            #expect(
                Double(failed.count) / Double(entries.count) > 0.1,
                "the receiver did fail requests: \(failed.count) of \(entries.count)")
            var delivered: [String: Int] = [:]
            for entry in entries where entry.answered == 200 { delivered[entry.delivery, default: 0] += 1 }
            #expect(delivered.count == users.count, "every delivery arrived")
            #expect(delivered.values.allSatisfy { $0 == 1 }, "none arrived twice")
            let recipients = Set(
                entries.filter { $0.answered == 200 }.compactMap { entry -> String? in
                    guard case .object(let body) = entry.body, case .object(let user)? = body["user"],
                        case .string(let id)? = user["id"]
                    else { return nil }
                    return id
                })
            #expect(recipients == Set(users), "one delivery per recipient")
        }
    }
}
