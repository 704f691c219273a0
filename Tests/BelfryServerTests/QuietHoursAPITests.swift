import BelfryCore
import BelfryTestSupport
import Foundation
import Testing
import Vapor
import VaporTesting

@testable import BelfryServer

@Suite("Quiet hours API")
struct QuietHoursAPITests {
    @Test("a user sets, reads and clears their quiet hours; the server sees the same", arguments: TestDatabase.allCases)
    func roundTrip(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let ada = try await app.userToken("ada")
            let unset = try await app.send(.GET, "/v1/me/quiet-hours", bearer: ada)
            #expect(unset.status == .notFound)
            #expect(unset.errorCode == "quiet_hours_not_set")

            let hours = QuietHours(start: "22:00", end: "07:00", timeZone: "Europe/Berlin")
            let put = try await app.send(.PUT, "/v1/me/quiet-hours", bearer: ada, json: hours)
            #expect(put.status == .ok)
            #expect(try put.decode(QuietHours.self) == hours)
            #expect(
                try await app.send(.GET, "/v1/users/ada/quiet-hours", bearer: testAPIKey).decode(QuietHours.self)
                    == hours)

            let serverSide = QuietHours(start: "23:30", end: "06:00")
            #expect(
                try await app.send(.PUT, "/v1/users/ada/quiet-hours", bearer: testAPIKey, json: serverSide).status
                    == .ok)
            #expect(try await app.send(.GET, "/v1/me/quiet-hours", bearer: ada).decode(QuietHours.self) == serverSide)

            #expect(try await app.send(.DELETE, "/v1/me/quiet-hours", bearer: ada).status == .noContent)
            #expect(try await app.send(.GET, "/v1/me/quiet-hours", bearer: ada).status == .notFound)
        }
    }

    @Test("bad hours and other users are refused")
    func refusals() async throws {
        try await withBelfry(.sqlite) { app in
            let ada = try await app.userToken("ada")
            _ = try await app.userToken("bob")
            let bad = try await app.send(
                .PUT, "/v1/me/quiet-hours", bearer: ada,
                rawBody: #"{"start": "25:00", "end": "07:00", "time_zone": "Mars/Base"}"#)
            #expect(bad.status == .unprocessableEntity)
            #expect(bad.errorMessage?.contains(#"field "start" must be a local time HH:mm"#) == true)
            #expect(bad.errorMessage?.contains(#"field "time_zone""#) == true)
            let typo = try await app.send(
                .PUT, "/v1/me/quiet-hours", bearer: ada, rawBody: #"{"start": "22:00", "end": "07:00", "zone": "UTC"}"#)
            #expect(typo.status == .unprocessableEntity)
            let other = try await app.send(
                .PUT, "/v1/users/bob/quiet-hours", bearer: ada, json: QuietHours(start: "22:00", end: "07:00"))
            #expect(other.status == .forbidden)
            #expect(try await app.send(.GET, "/v1/me/quiet-hours", bearer: testAPIKey).status == .forbidden)
        }
    }

    @Test("quiet hours do not hold the inbox")
    func inboxNotHeld() async throws {
        // 2027-01-15 08:00 UTC is 09:00 in Berlin: inside a 08:00-10:00 window.
        let clock = TestClock(Date(timeIntervalSince1970: 1_800_000_000))
        try await withBelfry(.sqlite, clock: clock) { app in
            let ada = try await app.userToken("ada")
            let hours = QuietHours(start: "08:00", end: "10:00", timeZone: "Europe/Berlin")
            #expect(try await app.send(.PUT, "/v1/me/quiet-hours", bearer: ada, json: hours).status == .ok)
            let event = EventRequest(category: "mention", recipients: ["ada"], content: .init(title: "t", body: "b"))
            let id = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: event).decode(EventAccepted.self)
                .eventID
            while try await Fanout(context: app.belfry).processBatch(on: app.db) {}
            let status = try await app.send(.GET, "/v1/events/\(id)", bearer: testAPIKey).decode(EventStatus.self)
            #expect(status.deliveries == ["inbox": ["sent": 1]])
        }
    }
}
