extension PreferenceData {
    /// The preference page for resolved preferences: sections in workspace order, then
    /// categories that have no section under a section without a name.
    public init(_ resolved: ResolvedPreferences) {
        let config = resolved.config
        func category(_ definition: CategoryDefinition) -> Category {
            Category(
                name: definition.name,
                category: definition.id,
                description: definition.description,
                preference: resolved.preference(for: definition),
                isEditable: definition.isEditable,
                channels: definition.channels.map { channel in
                    CategoryChannel(
                        channel: channel.channel,
                        preference: resolved.preference(for: channel, in: definition),
                        isEditable: channel.isEditable)
                }
            )
        }
        var sections = config.sections.compactMap { section -> Section? in
            let members = config.categories.filter { $0.section == section.id }
            guard !members.isEmpty else { return nil }
            return Section(name: section.name, description: section.description, subcategories: members.map(category))
        }
        let unsectioned = config.categories.filter { $0.section == nil }
        if !unsectioned.isEmpty {
            sections.append(Section(subcategories: unsectioned.map(category)))
        }
        self.init(
            sections: sections,
            channelPreferences: config.channels.map { channel in
                ChannelPreference(channel: channel.id, isRestricted: resolved.preference(for: channel) == .required)
            }
        )
    }
}
