// "Who gets what": whether a notification of a category reaches a user on a channel.
// The server's fan-out and the SDK's preview both call this; nothing else decides it.

/// The facts the rule decides on, for one channel of one category, one user and one tenant.
public struct PreferenceRuleInput: Hashable, Sendable {
    public var categoryIsEditable: Bool
    /// The user's effective category switch for the tenant.
    public var categoryPreference: PreferenceOptions
    public var channelIsEditable: Bool
    /// The user's effective checkbox for the channel within the category.
    public var channelPreference: PreferenceOptions
    /// The user's effective overall setting for the channel.
    public var overallPreference: ChannelLevelPreferenceOptions
    /// Whether the category lists the channel as mandatory.
    public var channelIsMandatory: Bool
    public var channelIsPush: Bool
    /// Whether the user has an active device for this push channel whose OS authorization allows delivery.
    public var hasAuthorizedDevice: Bool

    public init(
        categoryIsEditable: Bool,
        categoryPreference: PreferenceOptions,
        channelIsEditable: Bool,
        channelPreference: PreferenceOptions,
        overallPreference: ChannelLevelPreferenceOptions,
        channelIsMandatory: Bool,
        channelIsPush: Bool,
        hasAuthorizedDevice: Bool
    ) {
        self.categoryIsEditable = categoryIsEditable
        self.categoryPreference = categoryPreference
        self.channelIsEditable = channelIsEditable
        self.channelPreference = channelPreference
        self.overallPreference = overallPreference
        self.channelIsMandatory = channelIsMandatory
        self.channelIsPush = channelIsPush
        self.hasAuthorizedDevice = hasAuthorizedDevice
    }
}

/// The rule's answer for one channel.
public enum ChannelDecision: Hashable, Sendable {
    case deliver
    case skip(SkipReason)
}

/// Why a channel is not used; kept in the delivery log.
public enum SkipReason: String, Codable, Hashable, Sendable, CaseIterable {
    /// The user turned the category off.
    case categoryOptedOut = "category_opted_out"
    /// The user unchecked this channel for the category.
    case channelOptedOut = "channel_opted_out"
    /// The user set the channel to "Required" and the category does not require it.
    case channelRestricted = "channel_restricted"
    /// A push channel with no active device that the OS lets notify.
    case noAuthorizedDevice = "no_authorized_device"
    /// An email channel for a user without an email address (decided by fan-out, after the rule).
    case noAddress = "no_address"
    /// The category's throttle: the user had its limit of notifications in the window.
    case throttled
    /// A delayed channel whose inbox notification the user read before the delay ran out.
    case readBeforeFallback = "read_before_fallback"
    /// A delayed channel whose inbox notification the user saw before the delay ran out.
    case seenBeforeFallback = "seen_before_fallback"
}

public enum PreferenceRule {
    /// A channel is used when all of these hold:
    /// 1. the category is not editable, or the user opted in to it;
    /// 2. the channel is not editable in the category, or the user opted in to it there;
    /// 3. the user's overall setting for the channel is `all`, or the category requires the channel;
    /// 4. for push channels, the user has an active device the OS lets notify.
    public static func decide(_ input: PreferenceRuleInput) -> ChannelDecision {
        if input.categoryIsEditable && input.categoryPreference == .optOut {
            return .skip(.categoryOptedOut)
        }
        if input.channelIsEditable && input.channelPreference == .optOut {
            return .skip(.channelOptedOut)
        }
        if input.overallPreference == .required && !input.channelIsMandatory {
            return .skip(.channelRestricted)
        }
        if input.channelIsPush && !input.hasAuthorizedDevice {
            return .skip(.noAuthorizedDevice)
        }
        return .deliver
    }

    /// The decision for every channel of a category, in the category's order.
    ///
    /// - Parameters:
    ///   - category: the category of the event.
    ///   - preferences: the user's preferences resolved for the event's tenant.
    ///   - authorizedPushChannels: the push channels on which the user has an active device the OS lets notify.
    public static func decisions(
        for category: CategoryDefinition,
        preferences: ResolvedPreferences,
        authorizedPushChannels: Set<String>
    ) -> [(channel: String, decision: ChannelDecision)] {
        category.channels.compactMap { categoryChannel in
            guard let channel = preferences.config.channel(categoryChannel.channel) else { return nil }
            let input = PreferenceRuleInput(
                categoryIsEditable: category.isEditable,
                categoryPreference: preferences.preference(for: category),
                channelIsEditable: categoryChannel.isEditable,
                channelPreference: preferences.preference(for: categoryChannel, in: category),
                overallPreference: preferences.preference(for: channel),
                channelIsMandatory: category.isMandatory(channel.id),
                channelIsPush: channel.kind.isPush,
                hasAuthorizedDevice: authorizedPushChannels.contains(channel.id)
            )
            return (channel.id, decide(input))
        }
    }
}
