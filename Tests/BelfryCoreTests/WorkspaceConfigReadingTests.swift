import BelfryCore
import Foundation
import Testing

@Suite("Workspace config files")
struct WorkspaceConfigReadingTests {
    @Test("reads a valid file with shorthand channels, defaults and push hints")
    func valid() throws {
        let config = try Fixtures.workspace()
        #expect(config.channels.map(\.id) == ["inbox", "ios_push", "email"])
        #expect(config.channel("ios_push")?.kind == .apns)
        #expect(config.channel("ios_push")?.name == "ios_push")
        #expect(config.channel("email")?.defaultPreference == .required)
        #expect(config.defaultTenant == "dewiki")
        let mention = try #require(config.category("mention"))
        #expect(mention.channels.map(\.channel) == ["inbox", "ios_push", "email"])
        #expect(mention.channel("email")?.defaultPreference == .optOut)
        #expect(mention.channel("inbox") == CategoryChannelDefinition(channel: "inbox"))
        #expect(mention.actions == [NotificationAction(id: "view", title: "View", opensApp: true)])
        #expect(mention.push == PushHints(threadID: "talk", interruptionLevel: .timeSensitive, ttlSeconds: 60))
        let loginFail = try #require(config.category("login-fail"))
        #expect(loginFail.isEditable == false)
        #expect(loginFail.mandatoryChannels == ["email"])
        #expect(config.category("digest")?.section == nil)
        #expect(config.category("digest")?.defaultPreference == .optOut)
    }

    @Test("reports every bad value at once, each with its path")
    func everyProblem() throws {
        let error = try #require(throws: ConfigError.self) {
            try WorkspaceConfig.decodeFile(Fixtures.data("workspace-read-invalid"))
        }
        let expected: [(path: String, fragment: String)] = [
            ("channels[1].kind", #"got "pigeon""#),
            ("channels[2].kind", "is required"),
            ("sections[0].name", "expected a string, got a number"),
            ("categories[0].is_editabel", "unknown key"),
            ("categories[0].section", #""nowhere" is not one of the sections"#),
            ("categories[0].default", #"expected "opt_in" or "opt_out", got "maybe""#),
            ("categories[0].channels[1]", #""fax" is not one of the workspace channels"#),
            ("categories[0].mandatory_channels[0]", #""email" is not one of this category's channels"#),
            ("categories[1].id", #""login fail" is not a valid id"#),
            ("categories[1].name", "must not be empty"),
            ("categories[1].default", "users cannot edit is always sent"),
            ("categories[1].channels[0].default", "users cannot edit is always used"),
            ("categories[1].push.interruption_level", #"got "loud""#),
            ("categories[1].push.ttl_seconds", "from 0 to 2419200, got -1"),
            ("tenants", "must list at least one tenant"),
            ("channels[1].id", #"duplicate channel id "inbox""#),
            ("default_tenant", #""frwiki" is not one of the tenants"#),
        ]
        for (path, fragment) in expected {
            #expect(
                error.issues.contains { $0.path == path && $0.message.contains(fragment) },
                "missing \(path): …\(fragment)… in\n\(error)")
        }
        #expect(error.issues.count == expected.count, "\(error)")
        #expect(error.description.hasPrefix("configuration has \(expected.count) problems:"))
    }

    @Test("one inbox per user: a second inbox channel is refused")
    func oneInbox() throws {
        let json = """
            {"channels": [{"id": "inbox", "kind": "inbox"}, {"id": "bell", "kind": "inbox"}],
             "categories": [{"id": "a", "name": "A", "channels": ["inbox"]}], "tenants": [{"id": "t"}]}
            """
        let error = try #require(throws: ConfigError.self) { try WorkspaceConfig.decodeFile(Data(json.utf8)) }
        #expect(error.issues.map(\.path) == ["channels[1].kind"])
        #expect(error.issues.first?.message.contains("only one channel may be the inbox") == true)
    }

    @Test("reports broken JSON as one clear problem")
    func brokenJSON() throws {
        let error = try #require(throws: ConfigError.self) {
            try WorkspaceConfig.decodeFile(Data(#"{"channels": [}"#.utf8))
        }
        #expect(error.issues.count == 1)
        #expect(error.issues[0].message.hasPrefix("not valid JSON"))
    }

    @Test("requires the top-level lists and reports wrong types")
    func missingLists() throws {
        let error = try #require(throws: ConfigError.self) {
            try WorkspaceConfig.decodeFile(Data(#"{"channels": {}, "sections": "none"}"#.utf8))
        }
        #expect(error.issues.map(\.path) == ["channels", "sections", "categories", "tenants"])
        #expect(error.issues[0].message == "expected a list, got an object")
        #expect(error.issues[2].message == "is required")
    }

    @Test("encodes to JSON that decodes back to the same workspace")
    func codableRoundTrip() throws {
        let config = try Fixtures.workspace()
        let decoded = try JSONDecoder().decode(WorkspaceConfig.self, from: try JSONEncoder().encode(config))
        #expect(decoded == config)
    }

    @Test(
        "accepts ids of letters, digits, - _ . and refuses others",
        arguments: [
            ("edit-user-talk", true), ("ios_push", true), ("v1.2", true), ("A", true),
            ("", false), ("-lead", false), ("has space", false), ("ünïcode", false),
            (String(repeating: "x", count: 64), true), (String(repeating: "x", count: 65), false),
        ])
    func identifiers(id: String, valid: Bool) {
        #expect(Identifier.isValid(id) == valid)
    }
}
