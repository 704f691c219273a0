import BelfryCore
import Foundation
import Testing

@testable import BelfryClient

/// Issue 17 item 7, "Why won't I get this?": the rule the server runs, on what the user sees.
@MainActor
@Suite("BelfryClient preference preview")
struct PreferencePreviewTests {
    static let workspace = WorkspaceConfig(
        channels: [
            ChannelDefinition(id: "inbox", kind: .inbox, name: "Inbox"),
            ChannelDefinition(id: "ios_push", kind: .apns, name: "iOS"),
            ChannelDefinition(id: "email", kind: .email, name: "Email"),
        ],
        sections: [],
        categories: [
            CategoryDefinition(
                id: "mention", name: "Mention",
                channels: [.init(channel: "inbox"), .init(channel: "ios_push"), .init(channel: "email")]),
            CategoryDefinition(
                id: "login", name: "Login", channels: [.init(channel: "inbox"), .init(channel: "email")],
                mandatoryChannels: ["email"]),
        ],
        tenants: [TenantDefinition(id: "enwiki", name: "English Wikipedia")], defaultTenant: "enwiki")

    /// Mention is on with email unchecked; login is on; email is set to "required" overall.
    static let preferences = PreferenceData(
        sections: [
            Section(
                name: nil,
                subcategories: [
                    Category(
                        name: "Mention", category: "mention", preference: .optIn, isEditable: true,
                        channels: [
                            CategoryChannel(channel: "inbox", preference: .optIn, isEditable: true),
                            CategoryChannel(channel: "ios_push", preference: .optIn, isEditable: true),
                            CategoryChannel(channel: "email", preference: .optOut, isEditable: true),
                        ]),
                    Category(
                        name: "Login", category: "login", preference: .optIn, isEditable: true,
                        channels: [
                            CategoryChannel(channel: "inbox", preference: .optIn, isEditable: true),
                            CategoryChannel(channel: "email", preference: .optIn, isEditable: true),
                        ]),
                ])
        ],
        channelPreferences: [
            ChannelPreference(channel: "inbox", isRestricted: false),
            ChannelPreference(channel: "ios_push", isRestricted: false),
            ChannelPreference(channel: "email", isRestricted: true),
        ])

    @Test("each channel says whether it would deliver, and why not")
    func preview() async throws {
        let workspace = try JSONEncoder().encode(Self.workspace)
        let preferences = try JSONEncoder().encode(Self.preferences)
        let transport = FakeTransport { request in
            request.path == "/v1/config"
                ? (200, ["Content-Type": "application/json"], workspace)
                : (200, ["Content-Type": "application/json", "ETag": "\"p1\""], preferences)
        }
        let belfry = BelfryClient(
            baseURL: URL(string: "https://belfry.test")!, tokenProvider: CountingTokens(), transport: transport,
            clock: ManualClock(), store: InMemoryKeyValueStore())
        #expect(try await belfry.preview(category: "mention") == nil, "nothing before getPreferences")
        _ = await belfry.preferences.getPreferences(args: .init(tenantId: "enwiki"))

        let mention = try #require(try await belfry.preview(category: "mention"))
        #expect(
            mention == [
                ChannelPreview(channel: "inbox", decision: .deliver),
                ChannelPreview(channel: "ios_push", decision: .skip(.noAuthorizedDevice)),
                ChannelPreview(channel: "email", decision: .skip(.channelOptedOut)),
            ])
        let withDevice = try #require(
            try await belfry.preview(category: "mention", authorizedPushChannels: ["ios_push"]))
        #expect(withDevice[1].delivers)
        // Email is "required" overall: only a category that requires it still sends it.
        let login = try #require(try await belfry.preview(category: "login"))
        #expect(login.map(\.decision) == [.deliver, .deliver])
        #expect(try await belfry.preview(category: "unknown") == nil)

        // The preview follows a change at once, before it is written.
        _ = await belfry.preferences.updateCategoryPreference(category: "mention", preference: .optOut)
        let off = try #require(try await belfry.preview(category: "mention"))
        #expect(off.allSatisfy { $0.decision == .skip(.categoryOptedOut) })
    }
}
