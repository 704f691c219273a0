import BelfryCore
import Foundation
import PropertyBased
import Testing

@Suite("Preference properties")
struct PreferencePropertyTests {
    static let categoryIDs = ["mention", "login-fail", "digest", "security"]
    static let channelIDs = ["inbox", "ios_push", "email"]
    static let anyCategory = Gen.int(in: 0...3).map { categoryIDs[$0] }
    static let anyChannel = Gen.int(in: 0...2).map { channelIDs[$0] }
    static let editableCategory = Gen.bool.map { $0 ? "mention" : "digest" }

    /// Arbitrary stored selections, including values for items users cannot edit (as an old
    /// config or a direct database edit could leave behind).
    static let selections = zip(
        zip(anyCategory, Gen<PreferenceOptions>.case).dictionary(ofAtMost: 0...4),
        zip(
            anyCategory,
            zip(anyChannel, Gen<PreferenceOptions>.case).dictionary(ofAtMost: 0...3)
        ).dictionary(ofAtMost: 0...4),
        zip(anyChannel, Gen<ChannelLevelPreferenceOptions>.case).dictionary(ofAtMost: 0...3)
    ).map { categories, categoryChannels, channels in
        PreferenceSelections(categories: categories, categoryChannels: categoryChannels, channels: channels)
    }

    /// The fixture workspace plus a "security" category where nothing can be turned off.
    static func workspace() throws -> WorkspaceConfig {
        var config = try Fixtures.workspace()
        config.categories.append(
            CategoryDefinition(
                id: "security", name: "Security", isEditable: false,
                channels: [CategoryChannelDefinition(channel: "inbox", isEditable: false)], mandatoryChannels: ["inbox"]
            ))
        return config
    }

    @Test("whatever is stored, a non-editable mandatory non-push channel of a non-editable category is used")
    func securityAlwaysDelivered() async throws {
        let config = try Self.workspace()
        let security = try #require(config.category("security"))
        await propertyCheck(input: Self.selections, Self.selections) { user, tenant in
            let decisions = PreferenceRule.decisions(
                for: security, preferences: ResolvedPreferences(config: config, userDefaults: user, tenant: tenant),
                authorizedPushChannels: [])
            #expect(decisions.map(\.decision) == [.deliver])
        }
    }

    @Test("whatever the user's defaults, a tenant opt-out of an editable category skips every channel")
    func tenantOptOutWins() async throws {
        let config = try Self.workspace()
        await propertyCheck(input: Self.selections, Self.selections, Self.editableCategory) {
            user, tenant, id in
            var tenant = tenant
            tenant.categories[id] = .optOut
            let category = config.category(id)!
            let decisions = PreferenceRule.decisions(
                for: category, preferences: ResolvedPreferences(config: config, userDefaults: user, tenant: tenant),
                authorizedPushChannels: Set(Self.channelIDs))
            #expect(decisions.allSatisfy { $0.decision == .skip(.categoryOptedOut) })
        }
    }

    static let change = zip(
        Gen.int(in: 0...2), Self.editableCategory, anyChannel, Gen.bool
    ).map { kind, category, channel, on -> PreferenceChange in
        switch kind {
        case 0: .category(category, on ? .optIn : .optOut)
        case 1: .channelInCategory(channel: channel, category: category, on ? .optIn : .optOut)
        default: .overallChannel(channel, on ? .all : .required)
        }
    }

    @Test("after a sequence of accepted changes, each item reads as the last change made to it")
    func lastChangeWins() async throws {
        let config = try Self.workspace()
        await propertyCheck(input: Self.change.array(of: 1...12), Self.selections) { changes, user in
            var tenant = PreferenceSelections()
            // The model: the last accepted value of each item, keyed by a description of the item.
            var last: [String: String] = [:]
            for change in changes {
                do throws(PreferenceChangeError) {
                    try tenant.apply(change, in: config)
                } catch {
                    // Only a channel the category does not use may be refused here.
                    #expect(error.kind == .channelNotInCategory)
                    continue
                }
                switch change {
                case .category(let id, let value): last["category \(id)"] = value.rawValue
                case .channelInCategory(let channel, let id, let value): last["\(id)/\(channel)"] = value.rawValue
                case .overallChannel(let channel, let value): last["overall \(channel)"] = value.rawValue
                }
            }
            let resolved = ResolvedPreferences(config: config, userDefaults: user, tenant: tenant)
            var read: [String: String] = [:]
            for key in last.keys {
                let parts = key.split(whereSeparator: { $0 == " " || $0 == "/" }).map(String.init)
                if parts[0] == "category" {
                    read[key] = resolved.preference(for: config.category(parts[1])!).rawValue
                } else if parts[0] == "overall" {
                    read[key] = resolved.preference(for: config.channel(parts[1])!).rawValue
                } else {
                    let category = config.category(parts[0])!
                    read[key] = resolved.preference(for: category.channel(parts[1])!, in: category).rawValue
                }
            }
            #expect(read == last)
        }
    }

    @Test("changes to items users cannot edit are refused and change nothing")
    func nonEditableRefused() async throws {
        let config = try Self.workspace()
        await propertyCheck(input: Self.selections, Gen<PreferenceOptions>.case) { start, value in
            for change in [
                PreferenceChange.category("security", value), .category("login-fail", value),
                .channelInCategory(channel: "inbox", category: "security", value),
                .channelInCategory(channel: "inbox", category: "login-fail", value),
            ] {
                var selections = start
                #expect(throws: PreferenceChangeError.self) { try selections.apply(change, in: config) }
                #expect(selections == start)
            }
        }
    }

    @Test("the preference page survives a JSON round trip for any stored selections")
    func pageRoundTrip() async throws {
        let config = try Self.workspace()
        await propertyCheck(input: Self.selections, Self.selections) { user, tenant in
            let page = PreferenceData(ResolvedPreferences(config: config, userDefaults: user, tenant: tenant))
            let decoded = try? JSONDecoder().decode(PreferenceData.self, from: JSONEncoder().encode(page))
            #expect(decoded == page)
        }
    }
}
