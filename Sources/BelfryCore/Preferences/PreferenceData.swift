// The preference wire format, exactly as seed 004 defines it: the JSON a client
// gets from `GET /v1/me/preferences` and renders as a preference page.

/// A user's preferences for one tenant, as a preference page shows them:
/// category switches grouped in sections, and the overall channel list.
public struct PreferenceData: Codable, Hashable, Sendable {
    /// Category-level settings, grouped by section.
    public var sections: [Section]?
    /// Overall channel-level settings.
    public var channelPreferences: [ChannelPreference]?

    public init(sections: [Section]? = nil, channelPreferences: [ChannelPreference]? = nil) {
        self.sections = sections
        self.channelPreferences = channelPreferences
    }

    enum CodingKeys: String, CodingKey {
        case sections
        case channelPreferences = "channel_preferences"
    }
}

/// A group of categories. A section without a name shows its categories without a heading.
public struct Section: Codable, Hashable, Sendable {
    public var name: String?
    public var description: String?
    public var subcategories: [Category]?

    public init(name: String? = nil, description: String? = nil, subcategories: [Category]? = nil) {
        self.name = name
        self.description = description
        self.subcategories = subcategories
    }
}

/// One notification type and the user's switch for it.
public struct Category: Codable, Hashable, Sendable {
    /// Display name.
    public var name: String
    /// The category id, used when updating the preference.
    public var category: String
    public var description: String?
    /// `opt_in` when the switch is on.
    public var preference: PreferenceOptions
    /// `false` when the user cannot change this category.
    public var isEditable: Bool
    /// The channels this category may use, each with its own checkbox.
    public var channels: [CategoryChannel]?

    public init(
        name: String,
        category: String,
        description: String? = nil,
        preference: PreferenceOptions,
        isEditable: Bool,
        channels: [CategoryChannel]? = nil
    ) {
        self.name = name
        self.category = category
        self.description = description
        self.preference = preference
        self.isEditable = isEditable
        self.channels = channels
    }

    enum CodingKeys: String, CodingKey {
        case name
        case category
        case description
        case preference
        case isEditable = "is_editable"
        case channels
    }
}

/// A channel checkbox under a category.
public struct CategoryChannel: Codable, Hashable, Sendable {
    /// The channel id, used when updating the preference.
    public var channel: String
    public var preference: PreferenceOptions
    public var isEditable: Bool

    public init(channel: String, preference: PreferenceOptions, isEditable: Bool) {
        self.channel = channel
        self.preference = preference
        self.isEditable = isEditable
    }

    enum CodingKeys: String, CodingKey {
        case channel
        case preference
        case isEditable = "is_editable"
    }
}

/// The user's overall setting for one channel.
public struct ChannelPreference: Codable, Hashable, Sendable {
    public var channel: String
    /// `true` when the user chose "Required": the channel is then used only by
    /// categories that list it as mandatory.
    public var isRestricted: Bool

    public init(channel: String, isRestricted: Bool) {
        self.channel = channel
        self.isRestricted = isRestricted
    }

    enum CodingKeys: String, CodingKey {
        case channel
        case isRestricted = "is_restricted"
    }
}

/// A category or category-channel switch.
public enum PreferenceOptions: String, Codable, Hashable, Sendable, CaseIterable {
    case optIn = "opt_in"
    case optOut = "opt_out"
}

/// An overall channel setting: every category, or only those that require the channel.
public enum ChannelLevelPreferenceOptions: String, Codable, Hashable, Sendable, CaseIterable {
    case all = "all"
    case required = "required"
}

/// Decodes a closed set of strings with an error that lists what is allowed.
func decodeChoice<Choice: RawRepresentable & CaseIterable>(_ decoder: any Decoder) throws -> Choice
where Choice.RawValue == String {
    let container = try decoder.singleValueContainer()
    let raw = try container.decode(String.self)
    guard let choice = Choice(rawValue: raw) else {
        let allowed = Choice.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: " or ")
        throw DecodingError.dataCorruptedError(in: container, debugDescription: "expected \(allowed), got \"\(raw)\"")
    }
    return choice
}

extension PreferenceOptions {
    public init(from decoder: any Decoder) throws {
        self = try decodeChoice(decoder)
    }
}

extension ChannelLevelPreferenceOptions {
    public init(from decoder: any Decoder) throws {
        self = try decodeChoice(decoder)
    }
}
