extension PreferenceData {
    /// Applies one change to this view, as the server will: what a client shows at once,
    /// before the server confirms.
    ///
    /// - Throws: `PreferenceChangeError` for a category or channel the view does not have, or
    ///   an item users cannot edit. Nothing changes then.
    public mutating func apply(_ change: PreferenceChange) throws(PreferenceChangeError) {
        switch change {
        case .category(let id, let preference):
            let (section, index) = try locate(id)
            guard sections?[section].subcategories?[index].isEditable == true else {
                throw PreferenceChangeError(
                    kind: .notEditable, message: "category \"\(id)\" cannot be changed: it is always sent")
            }
            sections?[section].subcategories?[index].preference = preference
        case .channelInCategory(let channelID, let categoryID, let preference):
            let (section, index) = try locate(categoryID)
            guard
                let channel = sections?[section].subcategories?[index].channels?.firstIndex(where: {
                    $0.channel == channelID
                })
            else {
                throw PreferenceChangeError(
                    kind: .channelNotInCategory,
                    message: "category \"\(categoryID)\" does not use channel \"\(channelID)\"")
            }
            guard sections?[section].subcategories?[index].channels?[channel].isEditable == true else {
                throw PreferenceChangeError(
                    kind: .notEditable,
                    message:
                        "channel \"\(channelID)\" of category \"\(categoryID)\" cannot be changed: it is always used")
            }
            sections?[section].subcategories?[index].channels?[channel].preference = preference
        case .overallChannel(let channelID, let preference):
            guard let index = channelPreferences?.firstIndex(where: { $0.channel == channelID }) else {
                throw PreferenceChangeError(kind: .unknownChannel, message: "no channel \"\(channelID)\" here")
            }
            channelPreferences?[index].isRestricted = preference == .required
        }
    }

    /// The category with `id`, as a section index and an index in its subcategories.
    private func locate(_ id: String) throws(PreferenceChangeError) -> (Int, Int) {
        for (section, value) in (sections ?? []).enumerated() {
            if let index = value.subcategories?.firstIndex(where: { $0.category == id }) { return (section, index) }
        }
        throw PreferenceChangeError(kind: .unknownCategory, message: "no category \"\(id)\" here")
    }

    /// The value `change` would set is already the one shown.
    public func alreadyHas(_ change: PreferenceChange) -> Bool {
        var copy = self
        guard (try? copy.apply(change)) != nil else { return false }
        return copy == self
    }
}

extension PreferenceChange {
    /// What the change sets: two changes with the same target replace each other.
    public var target: String {
        switch self {
        case .category(let category, _): "category:\(category)"
        case .channelInCategory(let channel, let category, _): "category:\(category)/channel:\(channel)"
        case .overallChannel(let channel, _): "channel:\(channel)"
        }
    }
}
