import BelfryCore

extension ServerConfiguration {
    /// Whether this server has what a channel kind needs to deliver: a provider configured.
    func delivers(_ kind: ChannelKind) -> Bool {
        switch kind {
        case .inbox: true
        case .webhook: webhook != nil
        case .email: email != nil
        case .apns: hasImplicitApp(.apns) || apps.contains { $0.platform == .apns }
        case .fcm: hasImplicitApp(.fcm) || apps.contains { $0.platform == .fcm }
        case .webPush: hasImplicitApp(.webPush) || apps.contains { $0.platform == .webPush }
        }
    }

    /// The channels the hosted pages show users: the workspace's own, not internal, that this
    /// server can deliver. A channel it cannot deliver would offer what never comes.
    var channelsShownToUsers: Set<String> {
        Set(workspace.channels.filter { !$0.isInternal && delivers($0.kind) }.map(\.id))
    }
}

extension PreferenceData {
    /// The same preferences with only `channels` in them, for a page that shows only those.
    func showing(_ channels: Set<String>) -> PreferenceData {
        var data = self
        data.sections = sections?.map { section in
            var section = section
            section.subcategories = section.subcategories?.map { category in
                var category = category
                category.channels = category.channels?.filter { channels.contains($0.channel) }
                return category
            }
            return section
        }
        data.channelPreferences = channelPreferences?.filter { channels.contains($0.channel) }
        return data
    }
}
