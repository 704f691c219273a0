import BelfryCore
import Testing

@Suite("The preference rule (SPEC §3)")
struct PreferenceRuleTests {
    /// Every combination of the rule's eight inputs: 2^8 rows.
    static let truthTable: [PreferenceRuleInput] = {
        var rows: [PreferenceRuleInput] = []
        for categoryIsEditable in [true, false] {
            for categoryPreference in PreferenceOptions.allCases {
                for channelIsEditable in [true, false] {
                    for channelPreference in PreferenceOptions.allCases {
                        for overallPreference in ChannelLevelPreferenceOptions.allCases {
                            for channelIsMandatory in [true, false] {
                                for channelIsPush in [true, false] {
                                    for hasAuthorizedDevice in [true, false] {
                                        rows.append(
                                            PreferenceRuleInput(
                                                categoryIsEditable: categoryIsEditable,
                                                categoryPreference: categoryPreference,
                                                channelIsEditable: channelIsEditable,
                                                channelPreference: channelPreference,
                                                overallPreference: overallPreference,
                                                channelIsMandatory: channelIsMandatory,
                                                channelIsPush: channelIsPush,
                                                hasAuthorizedDevice: hasAuthorizedDevice))
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        return rows
    }()

    @Test("every row of the truth table follows SPEC §3's four conditions, with the first failing one as reason")
    func everyRow() {
        #expect(Set(Self.truthTable).count == 256)
        for row in Self.truthTable {
            // The four conditions, written as SPEC §3 states them.
            let conditions: [(holds: Bool, reason: SkipReason)] = [
                (!row.categoryIsEditable || row.categoryPreference == .optIn, .categoryOptedOut),
                (!row.channelIsEditable || row.channelPreference == .optIn, .channelOptedOut),
                (row.overallPreference == .all || row.channelIsMandatory, .channelRestricted),
                (!row.channelIsPush || row.hasAuthorizedDevice, .noAuthorizedDevice),
            ]
            let expected: ChannelDecision = conditions.first { !$0.holds }.map { .skip($0.reason) } ?? .deliver
            #expect(PreferenceRule.decide(row) == expected, "\(row)")
        }
    }

    @Test("the truth table splits into the counts the conditions imply")
    func counts() {
        var counts: [ChannelDecision: Int] = [:]
        for row in Self.truthTable { counts[PreferenceRule.decide(row), default: 0] += 1 }
        // Each condition fails in a quarter of the rows; a reason counts only rows where earlier conditions hold.
        #expect(counts[.skip(.categoryOptedOut)] == 64)
        #expect(counts[.skip(.channelOptedOut)] == 48)
        #expect(counts[.skip(.channelRestricted)] == 36)
        #expect(counts[.skip(.noAuthorizedDevice)] == 27)
        #expect(counts[.deliver] == 81)
    }

    static func row(
        _ categoryIsEditable: Bool, _ categoryPreference: PreferenceOptions, _ channelIsEditable: Bool,
        _ channelPreference: PreferenceOptions, _ overall: ChannelLevelPreferenceOptions, mandatory: Bool,
        push: Bool, device: Bool
    ) -> PreferenceRuleInput {
        PreferenceRuleInput(
            categoryIsEditable: categoryIsEditable, categoryPreference: categoryPreference,
            channelIsEditable: channelIsEditable, channelPreference: channelPreference, overallPreference: overall,
            channelIsMandatory: mandatory, channelIsPush: push, hasAuthorizedDevice: device)
    }

    @Test(
        "named cases",
        arguments: [
            (
                "everything on", row(true, .optIn, true, .optIn, .all, mandatory: false, push: false, device: false),
                ChannelDecision.deliver
            ),
            (
                "category off", row(true, .optOut, true, .optIn, .all, mandatory: true, push: false, device: false),
                .skip(.categoryOptedOut)
            ),
            (
                "non-editable category is sent even if stored off",
                row(false, .optOut, true, .optIn, .all, mandatory: false, push: false, device: false), .deliver
            ),
            (
                "channel unchecked",
                row(true, .optIn, true, .optOut, .all, mandatory: true, push: false, device: false),
                .skip(.channelOptedOut)
            ),
            (
                "non-editable channel is used even if stored off",
                row(true, .optIn, false, .optOut, .all, mandatory: false, push: false, device: false), .deliver
            ),
            (
                "required channel, category does not require it",
                row(true, .optIn, true, .optIn, .required, mandatory: false, push: false, device: false),
                .skip(.channelRestricted)
            ),
            (
                "required channel, category requires it",
                row(true, .optIn, true, .optIn, .required, mandatory: true, push: false, device: false), .deliver
            ),
            (
                "push without an authorized device",
                row(true, .optIn, true, .optIn, .all, mandatory: false, push: true, device: false),
                .skip(.noAuthorizedDevice)
            ),
            (
                "push with an authorized device",
                row(true, .optIn, true, .optIn, .all, mandatory: false, push: true, device: true), .deliver
            ),
            (
                "security alert: nothing editable, mandatory, required overall",
                row(false, .optOut, false, .optOut, .required, mandatory: true, push: false, device: false), .deliver
            ),
            (
                "mandatory does not override an unchecked editable channel",
                row(true, .optIn, true, .optOut, .required, mandatory: true, push: false, device: false),
                .skip(.channelOptedOut)
            ),
            (
                "mandatory push still needs a device",
                row(false, .optIn, false, .optIn, .required, mandatory: true, push: true, device: false),
                .skip(.noAuthorizedDevice)
            ),
        ])
    func named(_ name: String, input: PreferenceRuleInput, expected: ChannelDecision) {
        #expect(PreferenceRule.decide(input) == expected, "\(name)")
    }
}

@Suite("Preference layers: tenant over user defaults over category defaults")
struct PreferenceLayerTests {
    /// tenant value, user default, category default → effective value. "-" is no value.
    static let table: [(String, String, String, String)] = [
        ("-", "-", "in", "in"), ("-", "-", "out", "out"),
        ("-", "in", "in", "in"), ("-", "in", "out", "in"),
        ("-", "out", "in", "out"), ("-", "out", "out", "out"),
        ("in", "-", "in", "in"), ("in", "-", "out", "in"),
        ("in", "in", "in", "in"), ("in", "in", "out", "in"),
        ("in", "out", "in", "in"), ("in", "out", "out", "in"),
        ("out", "-", "in", "out"), ("out", "-", "out", "out"),
        ("out", "in", "in", "out"), ("out", "in", "out", "out"),
        ("out", "out", "in", "out"), ("out", "out", "out", "out"),
    ]

    static func option(_ text: String) -> PreferenceOptions? {
        ["in": .optIn, "out": .optOut][text]
    }

    static func overall(_ text: String) -> ChannelLevelPreferenceOptions? {
        ["in": .all, "out": .required][text]
    }

    static func config(
        categoryDefault: PreferenceOptions, channelDefault: ChannelLevelPreferenceOptions, editable: Bool = true
    )
        -> WorkspaceConfig
    {
        WorkspaceConfig(
            channels: [ChannelDefinition(id: "email", kind: .email, name: "Email", defaultPreference: channelDefault)],
            sections: [],
            categories: [
                CategoryDefinition(
                    id: "mention", name: "Mention", defaultPreference: categoryDefault, isEditable: editable,
                    channels: [
                        CategoryChannelDefinition(
                            channel: "email", defaultPreference: categoryDefault, isEditable: editable)
                    ])
            ],
            tenants: [TenantDefinition(id: "enwiki", name: "English")],
            defaultTenant: "enwiki")
    }

    @Test("category, channel-in-category and overall channel values resolve through all 18 rows")
    func layering() throws {
        for (tenantValue, userValue, defaultValue, effective) in Self.table {
            let config = Self.config(
                categoryDefault: try #require(Self.option(defaultValue)),
                channelDefault: try #require(Self.overall(defaultValue)))
            var tenant = PreferenceSelections()
            var user = PreferenceSelections()
            tenant.categories["mention"] = Self.option(tenantValue)
            user.categories["mention"] = Self.option(userValue)
            tenant.categoryChannels["mention"] = Self.option(tenantValue).map { ["email": $0] }
            user.categoryChannels["mention"] = Self.option(userValue).map { ["email": $0] }
            tenant.channels["email"] = Self.overall(tenantValue)
            user.channels["email"] = Self.overall(userValue)
            let resolved = ResolvedPreferences(config: config, userDefaults: user, tenant: tenant)
            let category = config.categories[0]
            let row = "\(tenantValue) \(userValue) \(defaultValue)"
            #expect(resolved.preference(for: category) == Self.option(effective), "category \(row)")
            #expect(
                resolved.preference(for: category.channels[0], in: category) == Self.option(effective), "channel \(row)"
            )
            #expect(resolved.preference(for: config.channels[0]) == Self.overall(effective), "overall \(row)")
        }
    }

    @Test("items users cannot edit ignore stored values at every layer")
    func nonEditable() {
        let config = Self.config(categoryDefault: .optIn, channelDefault: .all, editable: false)
        let stored = PreferenceSelections(
            categories: ["mention": .optOut], categoryChannels: ["mention": ["email": .optOut]])
        let resolved = ResolvedPreferences(config: config, userDefaults: stored, tenant: stored)
        let category = config.categories[0]
        #expect(resolved.preference(for: category) == .optIn)
        #expect(resolved.preference(for: category.channels[0], in: category) == .optIn)
    }
}

@Suite("Decisions for a whole category")
struct PreferenceDecisionTests {
    @Test("a security category reaches mandatory channels even when the user restricted them")
    func securityCategory() throws {
        let config = try Fixtures.workspace()
        let loginFail = try #require(config.category("login-fail"))
        let user = PreferenceSelections(channels: ["email": .required, "inbox": .required])
        let decisions = PreferenceRule.decisions(
            for: loginFail, preferences: ResolvedPreferences(config: config, userDefaults: user),
            authorizedPushChannels: [])
        #expect(decisions.map(\.channel) == ["inbox", "email"])
        #expect(decisions.map(\.decision) == [.skip(.channelRestricted), .deliver])
    }

    @Test("a tenant opt-out silences the category on every channel; other tenants keep the user's defaults")
    func tenantOptOut() throws {
        let config = try Fixtures.workspace()
        let mention = try #require(config.category("mention"))
        let optedOut = ResolvedPreferences(
            config: config, tenant: PreferenceSelections(categories: ["mention": .optOut]))
        #expect(
            PreferenceRule.decisions(for: mention, preferences: optedOut, authorizedPushChannels: ["ios_push"])
                .allSatisfy { $0.decision == .skip(.categoryOptedOut) })
        let other = ResolvedPreferences(config: config)
        #expect(
            PreferenceRule.decisions(for: mention, preferences: other, authorizedPushChannels: ["ios_push"]).map(
                \.decision)
                == [.deliver, .deliver, .skip(.channelOptedOut)])
        #expect(
            PreferenceRule.decisions(for: mention, preferences: other, authorizedPushChannels: []).map(\.decision)
                == [.deliver, .skip(.noAuthorizedDevice), .skip(.channelOptedOut)])
    }
}
