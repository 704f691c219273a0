import Foundation

extension WorkspaceConfig {
    /// The top-level keys a workspace file may have.
    public static let fileKeys: Set<String> = ["channels", "sections", "categories", "tenants", "default_tenant"]

    /// Reads and validates a workspace file's JSON.
    ///
    /// - Throws: `ConfigError` listing every bad value with its path.
    public static func decodeFile(_ data: Data) throws(ConfigError) -> WorkspaceConfig {
        let issues = ConfigIssueCollector()
        let root = try parseRoot(data)
        let config = read(ConfigNode(root: root, issues: issues), allowing: [])
        guard issues.issues.isEmpty, let config else {
            throw ConfigError(issues: issues.issues)
        }
        return config
    }

    /// Parses a JSON document, turning a syntax error into a `ConfigError`.
    public static func parseRoot(_ data: Data) throws(ConfigError) -> JSONValue {
        do {
            return try JSONDecoder().decode(JSONValue.self, from: data)
        } catch {
            throw ConfigError(issues: [ConfigIssue(path: "", message: "not valid JSON: \(describe(error))")])
        }
    }

    /// Reads a workspace from a document's root, recording every problem in the node's collector.
    /// `extraKeys` are further top-level keys the caller reads itself.
    public static func read(_ root: ConfigNode, allowing extraKeys: Set<String>) -> WorkspaceConfig? {
        guard root.object(keys: fileKeys.union(extraKeys)) else { return nil }
        let channels = Read(root["channels"].list(required: true), readChannel)
        let sections = Read(root["sections"].list(), readSection)
        let categories = Read(root["categories"].list(required: true), readCategory)
        let tenants = Read(root["tenants"].list(required: true), readTenant)
        let defaultTenant = root["default_tenant"].identifier(required: false) ?? tenants.values.first?.id
        let config = WorkspaceConfig(
            channels: channels.values,
            sections: sections.values,
            categories: categories.values,
            tenants: tenants.values,
            defaultTenant: defaultTenant ?? ""
        )
        checkReferences(root, channels, sections, categories, tenants, config)
        return config
    }

    /// The values read from a list, each with the node it came from, so later checks name the right path.
    private struct Read<Value> {
        var pairs: [(node: ConfigNode, value: Value)]
        var values: [Value] { pairs.map(\.value) }

        init(_ nodes: [ConfigNode], _ read: (ConfigNode) -> Value?) {
            pairs = nodes.compactMap { node in read(node).map { (node, $0) } }
        }

        func reportDuplicates(_ noun: String, id: (Value) -> String) {
            var seen = Set<String>()
            for (node, value) in pairs where !seen.insert(id(value)).inserted {
                node.fail("duplicate \(noun) id \"\(id(value))\"")
            }
        }
    }

    private static func readChannel(_ node: ConfigNode) -> ChannelDefinition? {
        guard node.object(keys: ["id", "kind", "name", "default"]) else { return nil }
        let id = node["id"].identifier()
        let kind = node["kind"].choice(ChannelKind.self)
        if !node["kind"].isPresent { node["kind"].fail("is required") }
        let name = node["name"].string() ?? id
        let defaultPreference = node["default"].choice(default: ChannelLevelPreferenceOptions.all)
        guard let id, let kind, let name, let defaultPreference else { return nil }
        return ChannelDefinition(id: id, kind: kind, name: name, defaultPreference: defaultPreference)
    }

    private static func readSection(_ node: ConfigNode) -> SectionDefinition? {
        guard node.object(keys: ["id", "name", "description"]) else { return nil }
        let id = node["id"].identifier()
        let name = node["name"].string()
        let description = node["description"].string()
        guard let id else { return nil }
        return SectionDefinition(id: id, name: name, description: description)
    }

    private static func readCategory(_ node: ConfigNode) -> CategoryDefinition? {
        let keys: Set<String> = [
            "id", "name", "description", "section", "default", "is_editable", "channels",
            "mandatory_channels", "actions", "push",
        ]
        guard node.object(keys: keys) else { return nil }
        let id = node["id"].identifier()
        let name = node["name"].string(required: true, maxLength: 200)
        let description = node["description"].string()
        let section = node["section"].identifier(required: false)
        let defaultPreference = node["default"].choice(default: PreferenceOptions.optIn)
        let isEditable = node["is_editable"].bool(default: true)
        let channels = node["channels"].list(required: true).compactMap(readCategoryChannel)
        let mandatory = node["mandatory_channels"].list().compactMap { $0.identifier() }
        let actions = node["actions"].list().compactMap(readAction)
        let push = readPushHints(node["push"])
        guard let id, let name, let defaultPreference else { return nil }
        return CategoryDefinition(
            id: id, name: name, description: description, section: section,
            defaultPreference: defaultPreference, isEditable: isEditable, channels: channels,
            mandatoryChannels: mandatory, actions: actions, push: push
        )
    }

    /// A category channel is an object, or just the channel id for the defaults.
    private static func readCategoryChannel(_ node: ConfigNode) -> CategoryChannelDefinition? {
        if case .some(.string) = node.value {
            return node.identifier().map { CategoryChannelDefinition(channel: $0) }
        }
        guard node.object(keys: ["channel", "default", "is_editable"]) else { return nil }
        let channel = node["channel"].identifier()
        let defaultPreference = node["default"].choice(default: PreferenceOptions.optIn)
        let isEditable = node["is_editable"].bool(default: true)
        guard let channel, let defaultPreference else { return nil }
        return CategoryChannelDefinition(channel: channel, defaultPreference: defaultPreference, isEditable: isEditable)
    }

    private static func readAction(_ node: ConfigNode) -> NotificationAction? {
        guard node.object(keys: ["id", "title", "destructive", "opens_app"]) else { return nil }
        let id = node["id"].identifier()
        let title = node["title"].string(required: true, maxLength: 100)
        let destructive = node["destructive"].bool(default: false)
        let opensApp = node["opens_app"].bool(default: false)
        guard let id, let title else { return nil }
        return NotificationAction(id: id, title: title, destructive: destructive, opensApp: opensApp)
    }

    private static func readPushHints(_ node: ConfigNode) -> PushHints {
        guard node.isPresent else { return PushHints() }
        guard node.object(keys: ["thread_id", "collapse_key", "interruption_level", "priority", "ttl_seconds"]) else {
            return PushHints()
        }
        let collapseKey = node["collapse_key"].string(maxLength: 64)
        return PushHints(
            threadID: node["thread_id"].string(maxLength: 200),
            collapseKey: collapseKey,
            interruptionLevel: node["interruption_level"].choice(PushHints.InterruptionLevel.self),
            priority: node["priority"].choice(default: PushHints.Priority.high) ?? .high,
            // Apple and Web Push services keep messages for at most about four weeks.
            ttlSeconds: node["ttl_seconds"].int(in: 0...2_419_200)
        )
    }

    private static func readTenant(_ node: ConfigNode) -> TenantDefinition? {
        guard node.object(keys: ["id", "name"]) else { return nil }
        let id = node["id"].identifier()
        let name = node["name"].string() ?? id
        guard let id, let name else { return nil }
        return TenantDefinition(id: id, name: name)
    }

    /// Checks what single values cannot: unique ids, references, and rules between fields.
    private static func checkReferences(
        _ root: ConfigNode,
        _ channels: Read<ChannelDefinition>,
        _ sections: Read<SectionDefinition>,
        _ categories: Read<CategoryDefinition>,
        _ tenants: Read<TenantDefinition>,
        _ config: WorkspaceConfig
    ) {
        channels.reportDuplicates("channel", id: \.id)
        sections.reportDuplicates("section", id: \.id)
        categories.reportDuplicates("category", id: \.id)
        tenants.reportDuplicates("tenant", id: \.id)
        if root["channels"].isPresent && root["channels"].list().isEmpty {
            root["channels"].fail("must list at least one channel")
        }
        if root["tenants"].isPresent && root["tenants"].list().isEmpty {
            root["tenants"].fail("must list at least one tenant")
        }
        if !config.defaultTenant.isEmpty && config.tenant(config.defaultTenant) == nil {
            root["default_tenant"].fail("\"\(config.defaultTenant)\" is not one of the tenants")
        }
        let channelIDs = Set(config.channels.map(\.id))
        let sectionIDs = Set(config.sections.map(\.id))
        for (node, category) in categories.pairs {
            if let section = category.section, !sectionIDs.contains(section) {
                node["section"].fail("\"\(section)\" is not one of the sections")
            }
            if !category.isEditable && category.defaultPreference != .optIn {
                node["default"].fail("a category users cannot edit is always sent, so its default must be \"opt_in\"")
            }
            let categoryChannels = Read(node["channels"].list(), readCategoryChannel)
            if node["channels"].isPresent && node["channels"].list().isEmpty {
                node["channels"].fail("must list at least one channel")
            }
            categoryChannels.reportDuplicates("channel", id: \.channel)
            for (channelNode, channel) in categoryChannels.pairs {
                if !channelIDs.contains(channel.channel) {
                    channelNode.fail("\"\(channel.channel)\" is not one of the workspace channels")
                }
                if !channel.isEditable && channel.defaultPreference != .optIn {
                    channelNode["default"].fail(
                        "a channel users cannot edit is always used, so its default must be \"opt_in\"")
                }
            }
            for mandatoryNode in node["mandatory_channels"].list() {
                if case .some(.string(let channel)) = mandatoryNode.value, category.channel(channel) == nil {
                    mandatoryNode.fail("\"\(channel)\" is not one of this category's channels")
                }
            }
            Read(node["actions"].list(), readAction).reportDuplicates("action", id: \.id)
        }
    }
}

/// A short description of a decoding error, without Swift type names.
func describe(_ error: any Error) -> String {
    if case DecodingError.dataCorrupted(let context) = error {
        let underlying = (context.underlyingError as? NSError)?.userInfo[NSDebugDescriptionErrorKey] as? String
        return underlying ?? context.debugDescription
    }
    return "\(error)"
}
