import BelfryCore
import BelfryServer
import BelfryTestSupport
import Foundation
import Testing
import Vapor
import VaporTesting

@Suite("Preferences API")
struct PreferencesAPITests {
    static func body(_ preference: String) -> [String: String] { ["preference": preference] }

    static func category(_ data: PreferenceData, _ id: String) -> BelfryCore.Category? {
        data.sections?.lazy.compactMap { $0.subcategories?.first { $0.category == id } }.first
    }

    @Test(
        "GET answers the seed's PreferenceData for the default tenant, with an ETag", arguments: TestDatabase.allCases)
    func read(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let token = try await app.userToken("ada")
            let response = try await app.send(.GET, "/v1/me/preferences", bearer: token)
            #expect(response.status == .ok)
            let data = try response.decode(PreferenceData.self)
            #expect(data.sections?.map(\.name) == ["Talk and mentions", "Your edits", "Account", nil])
            #expect(
                data.channelPreferences?.map(\.channel) == [
                    "inbox", "ios_push", "android_push", "web_push", "webhook", "email",
                ])
            #expect(Self.category(data, "article-linked")?.preference == .optOut)
            #expect(Self.category(data, "login-fail")?.isEditable == false)
            let json = try #require(
                try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [String: Any])
            #expect(Set(json.keys) == ["sections", "channel_preferences"])
            let etag = try #require(response.etag)

            let again = try await app.send(.GET, "/v1/me/preferences", bearer: token, headers: ["If-None-Match": etag])
            #expect(again.status == .notModified)
        }
    }

    @Test(
        "the three PATCH calls change one tenant; other tenants and the server view agree",
        arguments: TestDatabase.allCases)
    func patches(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let token = try await app.userToken("ada", tenants: ["enwiki", "dewiki"])
            let category = try await app.send(
                .PATCH, "/v1/me/preferences/categories/mention?tenant=dewiki", bearer: token, json: Self.body("opt_out")
            )
            #expect(category.status == .ok)
            #expect(Self.category(try category.decode(PreferenceData.self), "mention")?.preference == .optOut)
            let channel = try await app.send(
                .PATCH, "/v1/me/preferences/categories/reverted/channels/email?tenant=dewiki", bearer: token,
                json: Self.body("opt_in"))
            #expect(channel.status == .ok)
            let overall = try await app.send(
                .PATCH, "/v1/me/preferences/channels/email?tenant=dewiki", bearer: token, json: Self.body("required"))
            #expect(overall.status == .ok)
            #expect(overall.etag != channel.etag)

            let dewiki = try await app.send(.GET, "/v1/users/ada/preferences?tenant=dewiki", bearer: testAPIKey)
                .decode(PreferenceData.self)
            #expect(Self.category(dewiki, "mention")?.preference == .optOut)
            #expect(Self.category(dewiki, "reverted")?.channels?.first { $0.channel == "email" }?.preference == .optIn)
            #expect(dewiki.channelPreferences?.first { $0.channel == "email" }?.isRestricted == true)

            let enwiki = try await app.send(.GET, "/v1/me/preferences?tenant=enwiki", bearer: token)
                .decode(PreferenceData.self)
            #expect(Self.category(enwiki, "mention")?.preference == .optIn)
            #expect(enwiki.channelPreferences?.first { $0.channel == "email" }?.isRestricted == false)
        }
    }

    @Test("the user's defaults apply to tenants without a value of their own", arguments: TestDatabase.allCases)
    func defaults(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let token = try await app.userToken("ada")
            let tenantValue = try await app.send(
                .PATCH, "/v1/me/preferences/categories/edit-thank?tenant=commons", bearer: token,
                json: Self.body("opt_in"))
            #expect(tenantValue.status == .ok)
            let before = try #require(
                try await app.send(.GET, "/v1/me/preferences?tenant=wikidata", bearer: token).etag)
            let defaults = try await app.send(
                .PATCH, "/v1/me/preferences/categories/edit-thank?scope=defaults", bearer: token,
                json: Self.body("opt_out"))
            #expect(defaults.status == .ok)

            for (tenant, expected) in [
                ("wikidata", PreferenceOptions.optOut), ("enwiki", .optOut), ("commons", .optIn),
            ] {
                let response = try await app.send(.GET, "/v1/me/preferences?tenant=\(tenant)", bearer: token)
                #expect(
                    Self.category(try response.decode(PreferenceData.self), "edit-thank")?.preference == expected,
                    "\(tenant)")
                if tenant == "wikidata" { #expect(response.etag != before, "a change of defaults is a new version") }
            }
        }
    }

    @Test("bad requests get clear errors and change nothing", arguments: TestDatabase.allCases)
    func errors(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let token = try await app.userToken("ada")
            let etag = try await app.send(.GET, "/v1/me/preferences", bearer: token).etag
            let cases: [(HTTPMethod, String, String?, HTTPStatus, String)] = [
                (
                    .PATCH, "/v1/me/preferences/categories/login-fail", #"{"preference":"opt_out"}"#, .conflict,
                    "not_editable"
                ),
                (
                    .PATCH, "/v1/me/preferences/categories/login-fail/channels/email", #"{"preference":"opt_out"}"#,
                    .conflict, "not_editable"
                ),
                (
                    .PATCH, "/v1/me/preferences/categories/nope", #"{"preference":"opt_out"}"#, .notFound,
                    "category_not_found"
                ),
                (
                    .PATCH, "/v1/me/preferences/categories/mention/channels/pigeon", #"{"preference":"opt_out"}"#,
                    .notFound, "channel_not_found"
                ),
                (
                    .PATCH, "/v1/me/preferences/categories/emailuser/channels/ios_push", #"{"preference":"opt_out"}"#,
                    .notFound, "channel_not_in_category"
                ),
                (
                    .PATCH, "/v1/me/preferences/channels/pigeon", #"{"preference":"all"}"#, .notFound,
                    "channel_not_found"
                ),
                (
                    .PATCH, "/v1/me/preferences/categories/mention?tenant=frwiki", #"{"preference":"opt_out"}"#,
                    .notFound, "tenant_not_found"
                ),
                (.GET, "/v1/me/preferences?tenant=frwiki", nil, .notFound, "tenant_not_found"),
                (.GET, "/v1/me/preferences?tenant=enwiki&scope=defaults", nil, .unprocessableEntity, "invalid_request"),
                (.GET, "/v1/me/preferences?scope=everything", nil, .unprocessableEntity, "invalid_request"),
                (
                    .PATCH, "/v1/me/preferences/categories/mention", #"{"preference":"maybe"}"#, .unprocessableEntity,
                    "invalid_request"
                ),
                (
                    .PATCH, "/v1/me/preferences/channels/email", #"{"preference":"opt_in"}"#, .unprocessableEntity,
                    "invalid_request"
                ),
                (
                    .PATCH, "/v1/me/preferences/categories/mention", #"{"preferense":"opt_in"}"#, .unprocessableEntity,
                    "invalid_request"
                ),
                (.PATCH, "/v1/me/preferences/categories/mention", #"{"preference": "#, .badRequest, "bad_request"),
                (.PATCH, "/v1/me/preferences/categories/mention", nil, .badRequest, "bad_request"),
                (.POST, "/v1/me/preferences/changes", #"{"changes":[]}"#, .unprocessableEntity, "invalid_request"),
                (
                    .POST, "/v1/me/preferences/changes",
                    #"{"tenants":["enwiki","enwiki"],"changes":[{"channel":"email","preference":"all"}]}"#,
                    .unprocessableEntity, "invalid_request"
                ),
                (
                    .POST, "/v1/me/preferences/changes",
                    #"{"tenants":["enwiki"],"changes":[{"channel":"email","preference":"all"}],"if_match":{"dewiki":"x"}}"#,
                    .unprocessableEntity, "invalid_request"
                ),
                (
                    .POST, "/v1/me/preferences/changes", #"{"changes":[{"preference":"all"}]}"#, .unprocessableEntity,
                    "invalid_request"
                ),
            ]
            for (method, path, body, status, code) in cases {
                let response = try await app.send(method, path, bearer: token, rawBody: body)
                #expect(response.status == status, "\(method) \(path) \(body ?? "")")
                #expect(response.errorCode == code, "\(method) \(path): \(response.body.string)")
                #expect((response.errorMessage ?? "").count > 10, "\(path) needs a message")
            }
            let message = try await app.send(
                .PATCH, "/v1/me/preferences/categories/mention", bearer: token, rawBody: #"{"preference":"maybe"}"#
            ).errorMessage
            #expect(message == #"field "preference": expected "opt_in" or "opt_out", got "maybe""#)
            #expect(try await app.send(.GET, "/v1/me/preferences", bearer: token).etag == etag, "nothing changed")
        }
    }

    @Test("two writers holding the same ETag cannot overwrite each other", arguments: TestDatabase.allCases)
    func staleETag(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let token = try await app.userToken("ada")
            let etag = try #require(try await app.send(.GET, "/v1/me/preferences", bearer: token).etag)

            let first = try await app.send(
                .PATCH, "/v1/me/preferences/categories/mention", bearer: token, json: Self.body("opt_out"),
                headers: ["If-Match": etag])
            #expect(first.status == .ok)
            let second = try await app.send(
                .PATCH, "/v1/me/preferences/categories/reverted", bearer: token, json: Self.body("opt_out"),
                headers: ["If-Match": etag])
            #expect(second.status == .preconditionFailed)
            #expect(second.errorCode == "precondition_failed")
            #expect(second.etag == first.etag, "the 412 names the current version")

            let now = try await app.send(.GET, "/v1/me/preferences", bearer: token).decode(PreferenceData.self)
            #expect(Self.category(now, "mention")?.preference == .optOut)
            #expect(Self.category(now, "reverted")?.preference == .optIn, "the stale write was not applied")

            let retried = try await app.send(
                .PATCH, "/v1/me/preferences/categories/reverted", bearer: token, json: Self.body("opt_out"),
                headers: ["If-Match": try #require(first.etag)])
            #expect(retried.status == .ok)
        }
    }

    @Test("concurrent writers without ETags lose no update", arguments: TestDatabase.allCases)
    func concurrentWriters(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let token = try await app.userToken("ada")
            let categories = ["edit-user-talk", "mention", "reverted", "edit-thank", "thank-you-edit", "user-rights"]
            let channels = ["inbox", "ios_push", "web_push"]
            let statuses = try await withThrowingTaskGroup(of: HTTPStatus.self) { group in
                for category in categories {
                    for channel in channels where category != "user-rights" || channel != "web_push" {
                        group.addTask {
                            try await app.send(
                                .PATCH, "/v1/me/preferences/categories/\(category)/channels/\(channel)?tenant=dewiki",
                                bearer: token, json: Self.body("opt_out")
                            ).status
                        }
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(statuses.count == 17)
            // On PostgreSQL these run in parallel transactions (eight pooled connections) on one locked row.
            #expect(statuses.allSatisfy { $0 == .ok }, "\(statuses)")
            let response = try await app.send(.GET, "/v1/me/preferences?tenant=dewiki", bearer: token)
            let data = try response.decode(PreferenceData.self)
            for category in categories {
                let states = Self.category(data, category)?.channels?.filter { channels.contains($0.channel) }
                #expect(states?.allSatisfy { $0.preference == .optOut } == true, "\(category): \(states ?? [])")
            }
            #expect(response.etag?.hasSuffix("-t17\"") == true, "one version per write: \(response.etag ?? "")")
        }
    }

    @Test("concurrent multi-tenant changes in opposite orders all land", arguments: TestDatabase.allCases)
    func concurrentMultiTenant(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let token = try await app.userToken("ada")
            let orders = [["enwiki", "dewiki", "wikidata", "commons"], ["commons", "wikidata", "dewiki", "enwiki"]]
            let categories = ["edit-user-talk", "mention", "reverted", "edit-thank", "thank-you-edit", "user-rights"]
            let statuses = try await withThrowingTaskGroup(of: HTTPStatus.self) { group in
                for (index, category) in categories.enumerated() {
                    group.addTask {
                        try await app.send(
                            .POST, "/v1/me/preferences/changes", bearer: token,
                            json: PreferenceChangesRequest(
                                tenants: orders[index % 2], defaults: index == 0,
                                changes: [.category(category, .optOut)])
                        ).status
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(statuses.allSatisfy { $0 == .ok }, "\(statuses)")
            for tenant in orders[0] {
                let response = try await app.send(.GET, "/v1/me/preferences?tenant=\(tenant)", bearer: token)
                let data = try response.decode(PreferenceData.self)
                #expect(categories.allSatisfy { Self.category(data, $0)?.preference == .optOut }, "\(tenant)")
                #expect(response.etag?.hasSuffix("-d1-t6\"") == true, "\(tenant): \(response.etag ?? "")")
            }
        }
    }

    @Test(
        "the server-side changes route writes the user's defaults and honours their ETag",
        arguments: TestDatabase.allCases)
    func serverSideDefaults(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            _ = try await app.userToken("ada")
            let etag = try #require(
                try await app.send(.GET, "/v1/users/ada/preferences?scope=defaults", bearer: testAPIKey).etag)
            let change = PreferenceChangesRequest(
                defaults: true, changes: [.overallChannel("email", .required)], ifMatch: ["defaults": etag])
            let first = try await app.send(.POST, "/v1/users/ada/preferences/changes", bearer: testAPIKey, json: change)
            #expect(first.status == .ok)
            let results = try first.decode(PreferenceChangesResponse.self).results
            #expect(results.map(\.tenant) == [nil])
            #expect(results[0].preferences.channelPreferences?.first { $0.channel == "email" }?.isRestricted == true)
            let again = try await app.send(.POST, "/v1/users/ada/preferences/changes", bearer: testAPIKey, json: change)
            #expect(again.status == .preconditionFailed)
            #expect(again.etag == results[0].etag)
            let commons = try await app.send(.GET, "/v1/users/ada/preferences?tenant=commons", bearer: testAPIKey)
                .decode(PreferenceData.self)
            #expect(commons.channelPreferences?.first { $0.channel == "email" }?.isRestricted == true)

            let typo = try await app.send(
                .POST, "/v1/users/ada/preferences/changes", bearer: testAPIKey,
                rawBody:
                    #"{"tenant": ["dewiki"], "changes": [{"category": "mention", "preference": "opt_out", "chanel": "email"}]}"#
            )
            #expect(typo.status == .unprocessableEntity)
            #expect(
                typo.errorMessage?.hasPrefix(#"unknown fields "changes[0].chanel", "tenant""#) == true,
                "\(typo.body.string)")
        }
    }

    @Test("a change to four tenants at once is all or nothing", arguments: TestDatabase.allCases)
    func atomicFourTenants(database: TestDatabase) async throws {
        try await withBelfry(database) { app in
            let token = try await app.userToken("ada", tenants: ["enwiki", "dewiki", "wikidata", "commons"])
            let tenants = ["enwiki", "dewiki", "wikidata", "commons"]
            var etags: [String: String] = [:]
            for tenant in tenants {
                etags[tenant] = try await app.send(.GET, "/v1/me/preferences?tenant=\(tenant)", bearer: token).etag
            }
            // Move one tenant on, so its ETag in `etags` is stale.
            let moved = try await app.send(
                .PATCH, "/v1/me/preferences/channels/web_push?tenant=wikidata", bearer: token,
                json: Self.body("required"))
            #expect(moved.status == .ok)
            let good = [PreferenceChange.category("mention", .optOut), .overallChannel("email", .required)]

            let refusedEdit = try await app.send(
                .POST, "/v1/me/preferences/changes", bearer: token,
                json: PreferenceChangesRequest(tenants: tenants, changes: good + [.category("login-fail", .optOut)]))
            #expect(refusedEdit.status == .conflict)
            #expect(refusedEdit.errorCode == "not_editable")

            let refusedVersion = try await app.send(
                .POST, "/v1/me/preferences/changes", bearer: token,
                json: PreferenceChangesRequest(tenants: tenants, changes: good, ifMatch: etags))
            #expect(refusedVersion.status == .preconditionFailed)

            for tenant in tenants {
                let data = try await app.send(.GET, "/v1/me/preferences?tenant=\(tenant)", bearer: token)
                    .decode(PreferenceData.self)
                #expect(Self.category(data, "mention")?.preference == .optIn, "\(tenant) unchanged")
                #expect(data.channelPreferences?.first { $0.channel == "email" }?.isRestricted == false, "\(tenant)")
            }

            var fresh = etags
            fresh["wikidata"] = moved.etag
            let accepted = try await app.send(
                .POST, "/v1/me/preferences/changes", bearer: token,
                json: PreferenceChangesRequest(tenants: tenants, changes: good, ifMatch: fresh))
            #expect(accepted.status == .ok)
            let results = try accepted.decode(PreferenceChangesResponse.self).results
            #expect(results.map(\.tenant) == tenants)
            for result in results {
                #expect(Self.category(result.preferences, "mention")?.preference == .optOut)
                let read = try await app.send(.GET, "/v1/me/preferences?tenant=\(result.tenant ?? "")", bearer: token)
                #expect(read.etag == result.etag)
                #expect(try read.decode(PreferenceData.self) == result.preferences)
            }
        }
    }

    @Test("preferences survive a restart", arguments: TestDatabase.allCases)
    func survivesRestart(database: TestDatabase) async throws {
        try await withTestStorage(database) { location in
            let (token, etag) = try await withBelfryApp(location: location) { app, _ in
                let token = try await app.userToken("ada")
                let response = try await app.send(
                    .PATCH, "/v1/me/preferences/categories/mention?tenant=dewiki", bearer: token,
                    json: Self.body("opt_out"))
                #expect(response.status == .ok)
                return (token, try #require(response.etag))
            }
            try await withBelfryApp(location: location) { app, _ in
                let response = try await app.send(.GET, "/v1/me/preferences?tenant=dewiki", bearer: token)
                #expect(response.status == .ok, "the token secret is kept too: \(response.body.string)")
                #expect(response.etag == etag)
                #expect(Self.category(try response.decode(PreferenceData.self), "mention")?.preference == .optOut)
            }
        }
    }
}
