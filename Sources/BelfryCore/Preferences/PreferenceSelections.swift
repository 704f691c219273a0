/// The choices a user made at one level (their defaults, or one tenant); what they did not choose is absent.
public struct PreferenceSelections: Codable, Hashable, Sendable {
    /// Category switches, by category id.
    public var categories: [String: PreferenceOptions]
    /// Channel checkboxes within a category: category id, then channel id.
    public var categoryChannels: [String: [String: PreferenceOptions]]
    /// Overall channel settings, by channel id.
    public var channels: [String: ChannelLevelPreferenceOptions]

    public init(
        categories: [String: PreferenceOptions] = [:],
        categoryChannels: [String: [String: PreferenceOptions]] = [:],
        channels: [String: ChannelLevelPreferenceOptions] = [:]
    ) {
        self.categories = categories
        self.categoryChannels = categoryChannels
        self.channels = channels
    }

    enum CodingKeys: String, CodingKey {
        case categories, channels
        case categoryChannels = "category_channels"
    }

    public var isEmpty: Bool {
        categories.isEmpty && categoryChannels.values.allSatisfy(\.isEmpty) && channels.isEmpty
    }
}

/// Where a set of selections applies.
public enum PreferenceScope: Hashable, Sendable, CustomStringConvertible {
    /// The user's own defaults, used for every tenant that has no value of its own.
    case userDefaults
    case tenant(String)

    /// A stable text form, used as a storage key.
    public var key: String {
        switch self {
        case .userDefaults: "defaults"
        case .tenant(let id): "tenant:\(id)"
        }
    }

    public var description: String {
        switch self {
        case .userDefaults: "your defaults"
        case .tenant(let id): "tenant \"\(id)\""
        }
    }
}

/// A user's effective preferences for one tenant: tenant values override the user's
/// defaults, which override the category defaults of the workspace.
public struct ResolvedPreferences: Hashable, Sendable {
    public var config: WorkspaceConfig
    public var userDefaults: PreferenceSelections
    public var tenant: PreferenceSelections

    public init(
        config: WorkspaceConfig,
        userDefaults: PreferenceSelections = PreferenceSelections(),
        tenant: PreferenceSelections = PreferenceSelections()
    ) {
        self.config = config
        self.userDefaults = userDefaults
        self.tenant = tenant
    }

    /// The category switch. A category users cannot edit shows its workspace default.
    public func preference(for category: CategoryDefinition) -> PreferenceOptions {
        guard category.isEditable else { return category.defaultPreference }
        return tenant.categories[category.id] ?? userDefaults.categories[category.id] ?? category.defaultPreference
    }

    /// The checkbox of a channel within a category. A channel users cannot edit shows its default.
    public func preference(for channel: CategoryChannelDefinition, in category: CategoryDefinition) -> PreferenceOptions
    {
        guard channel.isEditable else { return channel.defaultPreference }
        return tenant.categoryChannels[category.id]?[channel.channel]
            ?? userDefaults.categoryChannels[category.id]?[channel.channel]
            ?? channel.defaultPreference
    }

    /// The overall setting of a channel.
    public func preference(for channel: ChannelDefinition) -> ChannelLevelPreferenceOptions {
        tenant.channels[channel.id] ?? userDefaults.channels[channel.id] ?? channel.defaultPreference
    }
}
