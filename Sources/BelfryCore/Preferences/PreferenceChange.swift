/// One edit to a user's preferences, as sent in `POST /v1/me/preferences/changes`.
///
/// On the wire: `{"category", "preference"}`, `{"category", "channel", "preference"}`
/// (a channel within a category) or `{"channel", "preference"}` (the overall channel setting).
public enum PreferenceChange: Hashable, Sendable {
    case category(String, PreferenceOptions)
    case channelInCategory(channel: String, category: String, PreferenceOptions)
    case overallChannel(String, ChannelLevelPreferenceOptions)
}

extension PreferenceChange: Codable {
    enum CodingKeys: String, CodingKey, CaseIterable {
        case category, channel, preference
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let category = try container.decodeIfPresent(String.self, forKey: .category)
        let channel = try container.decodeIfPresent(String.self, forKey: .channel)
        switch (category, channel) {
        case (let category?, nil):
            self = .category(category, try container.decode(PreferenceOptions.self, forKey: .preference))
        case (let category?, let channel?):
            self = .channelInCategory(
                channel: channel, category: category,
                try container.decode(PreferenceOptions.self, forKey: .preference))
        case (nil, let channel?):
            self = .overallChannel(
                channel, try container.decode(ChannelLevelPreferenceOptions.self, forKey: .preference))
        case (nil, nil):
            throw DecodingError.dataCorrupted(
                .init(
                    codingPath: decoder.codingPath, debugDescription: "a change needs \"category\", \"channel\" or both"
                ))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .category(let category, let preference):
            try container.encode(category, forKey: .category)
            try container.encode(preference, forKey: .preference)
        case .channelInCategory(let channel, let category, let preference):
            try container.encode(category, forKey: .category)
            try container.encode(channel, forKey: .channel)
            try container.encode(preference, forKey: .preference)
        case .overallChannel(let channel, let preference):
            try container.encode(channel, forKey: .channel)
            try container.encode(preference, forKey: .preference)
        }
    }
}

/// Why a preference change was refused.
public struct PreferenceChangeError: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Kind: Hashable, Sendable {
        case unknownCategory
        case unknownChannel
        case channelNotInCategory
        case notEditable
    }

    public var kind: Kind
    public var message: String

    /// The code the server answers this with, and the SDK reports.
    public var code: ErrorCode {
        switch kind {
        case .unknownCategory: .categoryNotFound
        case .unknownChannel: .channelNotFound
        case .channelNotInCategory: .channelNotInCategory
        case .notEditable: .notEditable
        }
    }
    public var description: String { message }
}

extension PreferenceSelections {
    /// Applies one change, checked against the workspace.
    ///
    /// - Throws: `PreferenceChangeError` for an unknown category or channel, a channel the
    ///   category does not use, or an item users cannot edit. Nothing changes then.
    public mutating func apply(_ change: PreferenceChange, in config: WorkspaceConfig) throws(PreferenceChangeError) {
        switch change {
        case .category(let id, let preference):
            let category = try Self.category(id, in: config)
            guard category.isEditable else {
                throw PreferenceChangeError(
                    kind: .notEditable, message: "category \"\(id)\" cannot be changed: it is always sent")
            }
            categories[id] = preference
        case .channelInCategory(let channelID, let categoryID, let preference):
            let category = try Self.category(categoryID, in: config)
            guard config.channel(channelID) != nil else { throw Self.unknownChannel(channelID) }
            guard let channel = category.channel(channelID) else {
                throw PreferenceChangeError(
                    kind: .channelNotInCategory,
                    message: "category \"\(categoryID)\" does not use channel \"\(channelID)\"; it uses "
                        + category.channels.map { "\"\($0.channel)\"" }.joined(separator: ", "))
            }
            guard channel.isEditable else {
                throw PreferenceChangeError(
                    kind: .notEditable,
                    message:
                        "channel \"\(channelID)\" of category \"\(categoryID)\" cannot be changed: it is always used")
            }
            categoryChannels[categoryID, default: [:]][channelID] = preference
        case .overallChannel(let channelID, let preference):
            guard config.channel(channelID) != nil else { throw Self.unknownChannel(channelID) }
            channels[channelID] = preference
        }
    }

    private static func category(
        _ id: String, in config: WorkspaceConfig
    ) throws(PreferenceChangeError)
        -> CategoryDefinition
    {
        guard let category = config.category(id) else {
            throw PreferenceChangeError(kind: .unknownCategory, message: "no category \"\(id)\" in this workspace")
        }
        return category
    }

    private static func unknownChannel(_ id: String) -> PreferenceChangeError {
        PreferenceChangeError(kind: .unknownChannel, message: "no channel \"\(id)\" in this workspace")
    }
}

extension PreferenceChange: RequestFields {
    public static var fields: Set<String> { CodingKeys.names }
}
