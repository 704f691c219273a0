// Deliberately no `import BelfryCore`: this file compiles only if BelfryClient re-exports it.
import BelfryClient
import Foundation
import Testing

@Suite("BelfryClient: one import")
struct OneImportTests {
    @Test("the seed's types are reachable through import BelfryClient alone")
    func seedTypes() throws {
        let json = #"""
            {"sections": [{"name": "Talk", "subcategories": [{"name": "Mention", "category": "mention",
              "preference": "opt_in", "is_editable": true,
              "channels": [{"channel": "email", "preference": "opt_out", "is_editable": true}]}]}],
             "channel_preferences": [{"channel": "email", "is_restricted": false}]}
            """#
        let data = try JSONDecoder().decode(PreferenceData.self, from: Data(json.utf8))
        let category: Category? = data.sections?.first?.subcategories?.first
        #expect(category?.preference == PreferenceOptions.optIn)
        #expect(category?.channels?.first?.preference == .optOut)
        #expect(ChannelLevelPreferenceOptions.allCases.contains(.required))
    }
}
