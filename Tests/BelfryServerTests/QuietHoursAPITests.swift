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

    @Test("fan-out holds push channels in quiet hours, but not the inbox nor categories that break through")
    func hold() throws {
        let berlin = TimeZone(identifier: "Europe/Berlin")!
        // 2027-01-15 08:00 UTC is 09:00 in Berlin: inside an 08:00-10:00 window, which ends at 09:00 UTC.
        let due = Date(timeIntervalSince1970: 1_800_000_000)
        let user = Fanout.Recipient(
            id: UUID(), timeZone: berlin, quietHours: QuietHours(start: "08:00", end: "10:00"))
        let workspace = WorkspaceConfig.demo
        let push = try #require(workspace.channel("ios_push"))
        let inbox = try #require(workspace.channel("inbox"))
        let mention = try #require(workspace.category("mention"))
        let loginFail = try #require(workspace.category("login-fail"))
        let loginSuccess = try #require(workspace.category("login-success"))
        #expect(Fanout.firstAttempt(on: push, of: mention, for: user, due: due) == due.addingTimeInterval(3600))
        #expect(Fanout.firstAttempt(on: inbox, of: mention, for: user, due: due) == due)
        #expect(Fanout.firstAttempt(on: push, of: loginFail, for: user, due: due) == due, "users cannot turn it off")
        #expect(Fanout.firstAttempt(on: push, of: loginSuccess, for: user, due: due) == due, "time-sensitive")
        var awake = user
        awake.quietHours = QuietHours(start: "22:00", end: "07:00")
        #expect(Fanout.firstAttempt(on: push, of: mention, for: awake, due: due) == due)
    }
}
