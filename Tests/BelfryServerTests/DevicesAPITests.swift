import BelfryCore
import BelfryTestSupport
import Foundation
import Testing
import Vapor

@testable import BelfryServer

@Suite("Devices API")
struct DevicesAPITests {
    static let token = String(repeating: "ab12", count: 16)

    static func registration(
        _ token: String = token, authorization: PushAuthorization = .authorized,
        settings: PushSettings = PushSettings(), topic: String? = nil
    ) -> DeviceRegistration {
        DeviceRegistration(
            platform: .apns, token: token, environment: .sandbox, topic: topic, authorization: authorization,
            settings: settings, locale: "de-DE", appVersion: "7.4.1")
    }

    @Test(
        "registering is idempotent, a token moves to its new user as a new device, a user sees and removes only their own",
        arguments: TestDatabase.allCases)
    func registerListRemove(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let ada = try await app.userToken("ada")
            let bob = try await app.userToken("bob")
            let first = try await app.send(.POST, "/v1/me/devices", bearer: ada, json: Self.registration())
            #expect(first.status == .created)
            let device = try first.decode(DeviceRecord.self)
            #expect(device.token == Self.token)
            #expect(device.environment == .sandbox)
            #expect(device.settings == PushSettings())
            #expect(device.appVersion == "7.4.1")

            // The same token again, upper case and now provisional: the same device, updated.
            let again = try await app.send(
                .POST, "/v1/me/devices", bearer: ada,
                json: Self.registration(Self.token.uppercased(), authorization: .provisional))
            #expect(again.status == .ok)
            #expect(try again.decode(DeviceRecord.self).id == device.id)
            #expect(try again.decode(DeviceRecord.self).authorization == .provisional)
            #expect(try await app.send(.GET, "/v1/me/devices", bearer: ada).decode(DeviceList.self).devices.count == 1)

            // Bob signs in on the same phone: the token is his now, as a new device, and Ada's is gone.
            let moved = try await app.send(.POST, "/v1/me/devices", bearer: bob, json: Self.registration())
            #expect(moved.status == .created)
            let bobs = try moved.decode(DeviceRecord.self)
            #expect(bobs.id != device.id)
            #expect(try await app.send(.GET, "/v1/me/devices", bearer: ada).decode(DeviceList.self).devices.isEmpty)

            #expect(try await app.send(.DELETE, "/v1/me/devices/\(bobs.id)", bearer: ada).status == .notFound)
            #expect(try await app.send(.DELETE, "/v1/me/devices/\(bobs.id)", bearer: bob).status == .noContent)
            #expect(try await app.send(.GET, "/v1/me/devices", bearer: bob).decode(DeviceList.self).devices.isEmpty)
            #expect(try await app.send(.GET, "/v1/me/devices", bearer: testAPIKey).status == .forbidden)
        }
    }

    @Test("bad registrations get 422 naming the field, and nothing is stored")
    func badRegistrations() async throws {
        try await withBelfry(.sqlite) { app in
            let ada = try await app.userToken("ada")
            let cases: [(String, String)] = [
                (
                    #"{"platform": "apns", "token": "abc", "environment": "sandbox", "authorization": "authorized"}"#,
                    "\"token\""
                ),
                (
                    #"{"platform": "apns", "token": "\#(String(repeating: "zz", count: 32))", "environment": "sandbox", "authorization": "authorized"}"#,
                    "hex"
                ),
                (
                    #"{"platform": "apns", "token": "\#(String(repeating: "a", count: 65))", "environment": "sandbox", "authorization": "authorized"}"#,
                    "even"
                ),
                (
                    #"{"platform": "apns", "token": "\#(String(repeating: "ab", count: 101))", "environment": "sandbox", "authorization": "authorized"}"#,
                    "64 to 200"
                ),
                (#"{"platform": "apns", "token": "\#(Self.token)", "authorization": "authorized"}"#, "\"environment\""),
                (
                    #"{"platform": "apns", "token": "\#(Self.token)", "environment": "staging", "authorization": "authorized"}"#,
                    "\"sandbox\" or \"production\""
                ),
                (
                    #"{"platform": "apns", "token": "\#(Self.token)", "environment": "sandbox", "authorization": "maybe"}"#,
                    "\"authorized\""
                ),
                (#"{"platform": "apns", "token": "\#(Self.token)", "environment": "sandbox"}"#, "\"authorization\""),
                (
                    #"{"platform": "apns", "token": "\#(Self.token)", "environment": "sandbox", "authorization": "authorized", "settings": {"alert": "on", "sound": "enabled", "badge": "enabled"}}"#,
                    "\"enabled\""
                ),
                (
                    #"{"platform": "apns", "token": "\#(Self.token)", "environment": "sandbox", "authorization": "authorized", "colour": "red"}"#,
                    "colour"
                ),
                (#"{"platform": "pager", "token": "\#(Self.token)"}"#, "\"apns\""),
            ]
            for (body, expected) in cases {
                let response = try await app.send(.POST, "/v1/me/devices", bearer: ada, rawBody: body)
                #expect(response.status == .unprocessableEntity, "\(body)")
                #expect(
                    response.errorMessage?.contains(expected) == true,
                    "\(response.errorMessage ?? "") lacks \(expected)")
            }
            #expect(try await app.send(.GET, "/v1/me/devices", bearer: ada).decode(DeviceList.self).devices.isEmpty)
        }
    }
}
