import BelfryCore

/// Whether one channel would deliver a category's notification, and if not, why.
public struct ChannelPreview: Sendable, Hashable {
    public var channel: String
    public var decision: ChannelDecision

    public init(channel: String, decision: ChannelDecision) {
        self.channel = channel
        self.decision = decision
    }

    public var delivers: Bool { decision == .deliver }
}

extension Preferences {
    /// "Why won't I get this?": for each channel of `category`, whether a notification would be
    /// delivered on it for the current tenant, with the reason when not. It runs the same
    /// `PreferenceRule` the server runs, on the preferences as shown (unsent changes included).
    ///
    /// What only the server knows at send time is not part of it: whether the user has an email
    /// address, and the category's throttle.
    /// - Parameters:
    ///   - category: a category id.
    ///   - workspace: the workspace configuration (`BelfryClient.preview` reads it for you).
    ///   - authorizedPushChannels: the push channels with a device the OS lets notify.
    /// - Returns: the category's channels in their configured order; `nil` before
    ///   `getPreferences`, or for a category the preferences do not list.
    public func preview(
        category id: String, workspace: WorkspaceConfig, authorizedPushChannels: Set<String> = []
    ) -> [ChannelPreview]? {
        guard let data, let definition = workspace.category(id),
            let shown = (data.sections ?? []).lazy.flatMap({ $0.subcategories ?? [] }).first(where: {
                $0.category == id
            })
        else { return nil }
        return definition.channels.map { channel in
            let row = shown.channels?.first { $0.channel == channel.channel }
            let restricted = data.channelPreferences?.first { $0.channel == channel.channel }?.isRestricted ?? false
            let input = PreferenceRuleInput(
                categoryIsEditable: shown.isEditable, categoryPreference: shown.preference,
                channelIsEditable: row?.isEditable ?? channel.isEditable,
                channelPreference: row?.preference ?? channel.defaultPreference,
                overallPreference: restricted ? .required : .all,
                channelIsMandatory: definition.isMandatory(channel.channel),
                channelIsPush: workspace.channel(channel.channel)?.kind.isPush ?? false,
                hasAuthorizedDevice: authorizedPushChannels.contains(channel.channel))
            return ChannelPreview(channel: channel.channel, decision: PreferenceRule.decide(input))
        }
    }
}

extension BelfryClient {
    /// `preferences.preview(category:workspace:authorizedPushChannels:)` with the workspace read
    /// from the server (or the kept copy; see `notificationCategories()`).
    /// - Throws: when the workspace cannot be read and no copy is kept.
    public func preview(
        category id: String, authorizedPushChannels: Set<String> = []
    ) async throws(BelfryClientError) -> [ChannelPreview]? {
        let workspace = try await workspace()
        return preferences.preview(category: id, workspace: workspace, authorizedPushChannels: authorizedPushChannels)
    }
}
