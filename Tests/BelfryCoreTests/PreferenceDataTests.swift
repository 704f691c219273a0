import BelfryCore
import Foundation
import Testing

@Suite("PreferenceData wire format (seed 004)")
struct PreferenceDataTests {
    @Test("decodes the seed's JSON and encodes it back with the same keys and values")
    func roundTrip() throws {
        let original = try Fixtures.data("preferences-get-seed")
        let decoded = try JSONDecoder().decode(PreferenceData.self, from: original)
        #expect(decoded.sections?.count == 2)
        #expect(decoded.sections?[1].name == nil)
        #expect(decoded.sections?[0].subcategories?[0].channels?[1].isEditable == false)
        #expect(decoded.channelPreferences?[1] == ChannelPreference(channel: "email", isRestricted: true))

        let reencoded = try JSONEncoder().encode(decoded)
        let expected = try JSONSerialization.jsonObject(with: original) as? NSDictionary
        let actual = try JSONSerialization.jsonObject(with: reencoded) as? NSDictionary
        #expect(actual == expected)
    }

    @Test("uses the seed's snake_case keys and omits absent optional fields")
    func keys() throws {
        let data = PreferenceData(
            sections: [
                Section(subcategories: [
                    Category(
                        name: "Thanks", category: "edit-thank", preference: .optOut, isEditable: false,
                        channels: [CategoryChannel(channel: "inbox", preference: .optIn, isEditable: true)])
                ])
            ],
            channelPreferences: [ChannelPreference(channel: "email", isRestricted: false)])
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let text = String(decoding: try encoder.encode(data), as: UTF8.self)
        #expect(
            text
                == #"{"channel_preferences":[{"channel":"email","is_restricted":false}],"sections":[{"subcategories":[{"category":"edit-thank","channels":[{"channel":"inbox","is_editable":true,"preference":"opt_in"}],"is_editable":false,"name":"Thanks","preference":"opt_out"}]}]}"#
        )
    }

    @Test("refuses an unknown preference value, naming what is allowed")
    func badValue() throws {
        let json = Data(#"{"channel": "inbox", "preference": "maybe", "is_editable": true}"#.utf8)
        #expect {
            try JSONDecoder().decode(CategoryChannel.self, from: json)
        } throws: { error in
            "\(error)".contains(#"expected "opt_in" or "opt_out", got "maybe""#)
        }
    }

    @Test("builds the page from resolved preferences: sections in order, unsectioned last, empty sections left out")
    func fromResolved() throws {
        let config = try Fixtures.workspace()
        var tenant = PreferenceSelections()
        tenant.categories["mention"] = .optOut
        tenant.categoryChannels["mention"] = ["email": .optIn]
        tenant.channels["inbox"] = .required
        let page = PreferenceData(ResolvedPreferences(config: config, tenant: tenant))

        let sections = try #require(page.sections)
        #expect(sections.map(\.name) == ["Talk", nil, nil])
        #expect(sections.map { $0.subcategories?.map(\.category) ?? [] } == [["mention"], ["login-fail"], ["digest"]])
        let mention = try #require(sections[0].subcategories?.first)
        #expect(mention.preference == .optOut)
        #expect(mention.description == "Someone mentioned you.")
        #expect(mention.channels?.map(\.preference) == [.optIn, .optIn, .optIn])
        let loginFail = try #require(sections[1].subcategories?.first)
        #expect(loginFail.isEditable == false)
        #expect(loginFail.channels?.map(\.isEditable) == [false, true])
        #expect(
            page.channelPreferences == [
                ChannelPreference(channel: "inbox", isRestricted: true),
                ChannelPreference(channel: "ios_push", isRestricted: false),
                ChannelPreference(channel: "email", isRestricted: true),
            ])
    }
}
