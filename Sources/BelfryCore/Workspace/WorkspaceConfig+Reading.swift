import Foundation

extension WorkspaceConfig {
    /// The top-level keys a workspace file may have.
    public static let fileKeys: Set<String> = [
        "channels", "sections", "categories", "tenants", "default_tenant", "followable_topics",
    ]

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
        let channels = nonEmptyList(root["channels"], "channel").compactMap(readChannel)
        let sections = root["sections"].list().compactMap(readSection)
        let known = Known(
            channels: Set(channels.map(\.id)), sections: Set(sections.map(\.id)),
            inboxes: Set(channels.filter { $0.kind == .inbox }.map(\.id)))
        let categories = nonEmptyList(root["categories"], "category").compactMap { readCategory($0, known) }
        let tenants = nonEmptyList(root["tenants"], "tenant").compactMap(readTenant)
        for key in ["channels", "sections", "categories", "tenants"] {
            reportDuplicates(root[key].elements, key: "id", noun: String(key.dropLast()))
        }
        // A user has one inbox: its notifications are the inbox channel's deliveries.
        let inboxes = root["channels"].elements.filter { $0["kind"].value == .string(ChannelKind.inbox.rawValue) }
        for extra in inboxes.dropFirst() {
            extra["kind"].fail("only one channel may be the inbox; another channel already is")
        }
        let defaultTenant = root["default_tenant"].identifier(required: false) ?? tenants.first?.id ?? ""
        if root["default_tenant"].isPresent, !defaultTenant.isEmpty,
            !tenants.contains(where: { $0.id == defaultTenant })
        {
            root["default_tenant"].fail("\"\(defaultTenant)\" is not one of the tenants")
        }
        let followable = root["followable_topics"].list().compactMap(readTopicPattern)
        return WorkspaceConfig(
            channels: channels, sections: sections, categories: categories, tenants: tenants,
            defaultTenant: defaultTenant, followableTopics: root["followable_topics"].isPresent ? followable : nil)
    }

    /// A topic name, or a prefix of one followed by `*`.
    private static func readTopicPattern(_ node: ConfigNode) -> String? {
        guard let pattern = node.string(required: true, maxLength: 129) else { return nil }
        let name = pattern.hasSuffix("*") ? String(pattern.dropLast()) : pattern
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.@:+-")
        guard name.count <= 128, name.allSatisfy(allowed.contains), !(name.isEmpty && !pattern.hasSuffix("*")) else {
            node.fail(
                "\"\(pattern.prefix(40))\" is neither a topic name (1 to 128 letters, digits or any of _ . @ : + -) "
                    + "nor such a prefix ending in *")
            return nil
        }
        return pattern
    }

    /// Ids already read, for checking references to them.
    private struct Known {
        var channels: Set<String>
        var sections: Set<String>
        var inboxes: Set<String>
    }

    private static func nonEmptyList(_ node: ConfigNode, _ noun: String) -> [ConfigNode] {
        let elements = node.list(required: true)
        if case .some(.array([])) = node.value {
            node.fail("must list at least one \(noun)")
        }
        return elements
    }

    /// Reports every repeated id in a list, reading the raw ids so that elements with other problems count too.
    private static func reportDuplicates(_ nodes: [ConfigNode], key: String?, noun: String) {
        var seen = Set<String>()
        for node in nodes {
            let idNode = key.map { node[$0] } ?? node
            guard case .some(.string(let id)) = idNode.value else { continue }
            if !seen.insert(id).inserted {
                idNode.fail("duplicate \(noun) id \"\(id)\"")
            }
        }
    }

    private static func readChannel(_ node: ConfigNode) -> ChannelDefinition? {
        guard node.object(keys: ["id", "kind", "name", "default", "internal"]) else { return nil }
        let id = node["id"].identifier()
        if !node["kind"].isPresent { node["kind"].fail("is required") }
        let kind = node["kind"].choice(ChannelKind.self)
        let name = node["name"].string() ?? id
        let defaultPreference = node["default"].choice(default: ChannelLevelPreferenceOptions.all)
        let isInternal = node["internal"].isPresent ? node["internal"].bool(default: false) : nil
        guard let id, let kind, let name, let defaultPreference else { return nil }
        return ChannelDefinition(
            id: id, kind: kind, name: name, defaultPreference: defaultPreference, isInternal: isInternal)
    }

    private static func readSection(_ node: ConfigNode) -> SectionDefinition? {
        guard node.object(keys: ["id", "name", "description"]) else { return nil }
        let id = node["id"].identifier()
        let name = node["name"].string()
        let description = node["description"].string()
        guard let id else { return nil }
        return SectionDefinition(id: id, name: name, description: description)
    }

    private static func readCategory(_ node: ConfigNode, _ known: Known) -> CategoryDefinition? {
        let keys: Set<String> = [
            "id", "name", "description", "section", "default", "is_editable", "channels",
            "mandatory_channels", "actions", "push", "email", "throttle", "batch", "content", "data_schema",
        ]
        guard node.object(keys: keys) else { return nil }
        let id = node["id"].identifier()
        let name = node["name"].string(required: true, maxLength: 200)
        let description = node["description"].string()
        let section = node["section"].identifier(required: false)
        if let section, !known.sections.contains(section) {
            node["section"].fail("\"\(section)\" is not one of the sections")
        }
        let defaultPreference = node["default"].choice(default: PreferenceOptions.optIn)
        let isEditable = node["is_editable"].bool(default: true)
        if !isEditable && node["default"].isPresent && defaultPreference != .optIn {
            node["default"].fail("a category users cannot edit is always sent, so its default must be \"opt_in\"")
        }
        let channelNodes = nonEmptyList(node["channels"], "channel")
        let channels = channelNodes.compactMap { readCategoryChannel($0, known) }
        reportDuplicates(channelNodes, key: nil, noun: "channel")
        reportDuplicates(channelNodes.filter { !isString($0) }, key: "channel", noun: "channel")
        let mandatory = node["mandatory_channels"].list().compactMap { element -> String? in
            guard let channel = element.identifier() else { return nil }
            if !channels.contains(where: { $0.channel == channel }) {
                element.fail("\"\(channel)\" is not one of this category's channels")
            }
            return channel
        }
        let actionNodes = node["actions"].list()
        let actions = actionNodes.compactMap(readAction)
        reportDuplicates(actionNodes, key: "id", noun: "action")
        let push = readPushHints(node["push"])
        let email = node["email"].isPresent ? readEmail(node["email"], allowsLocales: true) : nil
        let throttle = node["throttle"].isPresent ? readThrottle(node["throttle"]) : nil
        let batch = node["batch"].isPresent ? readBatch(node["batch"]) : nil
        let content = node["content"].isPresent ? readContent(node["content"], allowsLocales: true) : nil
        let dataSchema = node["data_schema"].isPresent ? readDataSchema(node["data_schema"]) : nil
        // A fallback waits for the inbox notification to be read: the category needs the inbox.
        if !channels.contains(where: { known.inboxes.contains($0.channel) }) {
            for channel in channels where channel.unless != nil {
                let channelNode = channelNodes.first { $0["channel"].value == .string(channel.channel) }
                channelNode?["unless"].fail("\"unless\" needs the inbox among the category's channels")
            }
        }
        guard let id, let name, let defaultPreference else { return nil }
        return CategoryDefinition(
            id: id, name: name, description: description, section: section,
            defaultPreference: defaultPreference, isEditable: isEditable, channels: channels,
            mandatoryChannels: mandatory, actions: actions, push: push, email: email, throttle: throttle,
            batch: batch, content: content, dataSchema: dataSchema
        )
    }

    private static func isString(_ node: ConfigNode) -> Bool {
        if case .some(.string) = node.value { return true }
        return false
    }

    /// A category channel is an object, or just the channel id for the defaults.
    private static func readCategoryChannel(_ node: ConfigNode, _ known: Known) -> CategoryChannelDefinition? {
        var definition: CategoryChannelDefinition?
        var idNode = node
        if isString(node) {
            definition = node.identifier().map { CategoryChannelDefinition(channel: $0) }
        } else if node.object(keys: ["channel", "default", "is_editable", "delay_seconds", "unless"]) {
            idNode = node["channel"]
            let channel = idNode.identifier()
            let defaultPreference = node["default"].choice(default: PreferenceOptions.optIn)
            let isEditable = node["is_editable"].bool(default: true)
            if !isEditable && defaultPreference != .optIn {
                node["default"].fail("a channel users cannot edit is always used, so its default must be \"opt_in\"")
            }
            // Up to a week: a fallback is about a notification still worth sending.
            let delay = node["delay_seconds"].int(in: 1...604_800)
            let unless = node["unless"].choice(CategoryChannelDefinition.Condition.self)
            if node["unless"].isPresent && !node["delay_seconds"].isPresent {
                node["unless"].fail("\"unless\" needs \"delay_seconds\": the time the user has to read it first")
            }
            if let channel, known.inboxes.contains(channel), node["delay_seconds"].isPresent {
                node["delay_seconds"].fail("the inbox is what a delayed channel waits on; it cannot wait itself")
            }
            if let channel, let defaultPreference {
                definition = CategoryChannelDefinition(
                    channel: channel, defaultPreference: defaultPreference, isEditable: isEditable,
                    delaySeconds: delay, unless: unless)
            }
        }
        if let definition, !known.channels.contains(definition.channel) {
            idNode.fail("\"\(definition.channel)\" is not one of the workspace channels")
        }
        return definition
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

    /// Variants by language tag under `node`, each read by `read`; `nil` when absent.
    private static func readLocales<T>(
        _ node: ConfigNode, example: String, _ read: (ConfigNode) -> T?
    ) -> [String: T]? {
        guard node.isPresent else { return nil }
        guard case .some(.object(let fields)) = node.value else {
            node.fail("expected an object of language tags, such as {\"de\": \(example)}")
            return nil
        }
        var locales: [String: T] = [:]
        for tag in fields.keys.sorted() {
            let child = node[tag]
            if !isLanguageTag(tag) {
                child.fail("\"\(tag)\" is not a language tag such as de or pt-BR")
            } else if let variant = read(child) {
                locales[tag] = variant
            }
        }
        return locales
    }

    /// A category's email templates; their Mustache syntax is checked where they are rendered.
    private static func readEmail(_ node: ConfigNode, allowsLocales: Bool) -> EmailTemplates? {
        let keys: Set<String> = allowsLocales ? ["subject", "text", "html", "locales"] : ["subject", "text", "html"]
        guard node.object(keys: keys) else { return nil }
        let locales =
            allowsLocales
            ? readLocales(node["locales"], example: "{\"subject\": \"…\"}") { readEmail($0, allowsLocales: false) }
            : nil
        return EmailTemplates(
            subject: node["subject"].string(maxLength: 1_000), text: node["text"].string(maxLength: 100_000),
            html: node["html"].string(maxLength: 100_000), locales: locales)
    }

    /// A category's content templates; their Mustache syntax is checked where they are rendered.
    private static func readContent(_ node: ConfigNode, allowsLocales: Bool) -> ContentTemplates? {
        let keys: Set<String> =
            allowsLocales ? ["title", "body", "url", "push", "locales"] : ["title", "body", "url", "push"]
        guard node.object(keys: keys) else { return nil }
        let locales =
            allowsLocales
            ? readLocales(node["locales"], example: "{\"title\": \"…\"}") { readContent($0, allowsLocales: false) }
            : nil
        let push = node["push"].isPresent ? readText(node["push"]) : nil
        let content = ContentTemplates(
            title: node["title"].string(maxLength: 1_000), body: node["body"].string(maxLength: 10_000),
            url: node["url"].string(maxLength: 2_000), push: push, locales: locales)
        if allowsLocales && content.title == nil {
            node["title"].fail("a category's content needs a title template; its locales may leave it out")
        }
        return content
    }

    /// A title and a body template.
    private static func readText(_ node: ConfigNode) -> TextTemplates? {
        guard node.object(keys: ["title", "body"]) else { return nil }
        return TextTemplates(title: node["title"].string(maxLength: 1_000), body: node["body"].string(maxLength: 4_000))
    }

    /// The fields of a category's `data`: `{"properties": {"page": {"type": "string"}}, "required": ["page"]}`.
    private static func readDataSchema(_ node: ConfigNode) -> DataSchema? {
        guard node.object(keys: ["type", "properties", "required"]) else { return nil }
        if node["type"].isPresent, node["type"].value != .string("object") {
            node["type"].fail("the data of an event is an object: expected \"object\"")
        }
        var properties: [String: DataSchema.Field] = [:]
        if case .some(.object(let fields)) = node["properties"].value {
            for name in fields.keys.sorted() {
                let field = node["properties"][name]
                guard field.object(keys: ["type", "description"]) else { continue }
                _ = field["description"].string()
                let type = field["type"].choice(DataSchema.FieldType.self)
                properties[name] = DataSchema.Field(type: type)
            }
        } else {
            node["properties"].fail("expected an object of the fields, such as {\"page\": {\"type\": \"string\"}}")
        }
        let required = node["required"].list().compactMap { element -> String? in
            guard let name = element.string() else { return nil }
            if properties[name] == nil { element.fail("\"\(name)\" is not one of the properties") }
            return name
        }
        return DataSchema(properties: properties, required: required)
    }

    private static func readThrottle(_ node: ConfigNode) -> ThrottleRule? {
        guard node.object(keys: ["limit", "window_seconds"]) else { return nil }
        let limit = node["limit"].int(in: 1...10_000)
        let window = node["window_seconds"].int(in: 1...2_592_000)
        if !node["limit"].isPresent { node["limit"].fail("is required") }
        if !node["window_seconds"].isPresent { node["window_seconds"].fail("is required") }
        guard let limit, let window else { return nil }
        return ThrottleRule(limit: limit, windowSeconds: window)
    }

    /// A batch closes after a window or on a schedule; its templates' Mustache syntax is checked
    /// where they are rendered.
    private static func readBatch(_ node: ConfigNode) -> BatchRule? {
        guard node.object(keys: ["window_seconds", "schedule", "key", "max_items", "title", "body", "locales"])
        else { return nil }
        // Up to 30 days: a digest is about events still worth telling.
        let window = node["window_seconds"].int(in: 1...2_592_000)
        var schedule: CalendarRule?
        let scheduleNode = node["schedule"]
        if scheduleNode.isPresent, scheduleNode.object(keys: ["calendar"]) {
            let calendar = scheduleNode["calendar"]
            if calendar.object(keys: ["month", "day", "weekday", "hour", "minute"]) {
                let rule = CalendarRule(
                    month: calendar["month"].int(in: 1...12), day: calendar["day"].int(in: 1...31),
                    weekday: calendar["weekday"].int(in: 1...7), hour: calendar["hour"].int(in: 0...23),
                    minute: calendar["minute"].int(in: 0...59), repeats: true)
                if rule.problems.isEmpty {
                    if rule.nextDate(after: Date(timeIntervalSince1970: 0), in: .gmt) == nil {
                        calendar.fail("no date matches it (such as 30 February)")
                    } else {
                        schedule = rule
                    }
                } else if [rule.month, rule.day, rule.weekday, rule.hour, rule.minute].allSatisfy({ $0 == nil }) {
                    calendar.fail("give at least one of month, day, weekday, hour, minute")
                }
            }
        }
        if node["window_seconds"].isPresent == scheduleNode.isPresent {
            node.fail("a batch closes after \"window_seconds\" or on a \"schedule\": give exactly one")
        }
        let key = node["key"].string(maxLength: 64)
        let maxItems = node["max_items"].isPresent ? node["max_items"].int(in: 1...100) : 10
        let title = node["title"].string(maxLength: 1_000)
        let body = node["body"].string(maxLength: 4_000)
        let locales = readLocales(node["locales"], example: "{\"title\": \"…\"}", readText)
        guard window != nil || schedule != nil, let maxItems else { return nil }
        return BatchRule(
            windowSeconds: window, schedule: schedule, key: key, maxItems: maxItems, title: title, body: body,
            locales: locales)
    }

    /// `de`, `pt-BR`, `zh-Hant-TW`: letters and digits in parts of 1 to 8, the first all letters.
    private static func isLanguageTag(_ tag: String) -> Bool {
        let parts = tag.split(separator: "-", omittingEmptySubsequences: false)
        guard let first = parts.first, (2...8).contains(first.count), first.allSatisfy({ $0.isASCII && $0.isLetter })
        else { return false }
        return parts.allSatisfy {
            (1...8).contains($0.count) && $0.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber) }
        }
    }

    private static func readPushHints(_ node: ConfigNode) -> PushHints {
        guard node.isPresent,
            node.object(keys: [
                "thread_id", "collapse_key", "interruption_level", "priority", "ttl_seconds", "content_available",
            ])
        else { return PushHints() }
        return PushHints(
            threadID: node["thread_id"].string(maxLength: 200),
            collapseKey: node["collapse_key"].string(maxLength: 64),
            interruptionLevel: node["interruption_level"].choice(PushHints.InterruptionLevel.self),
            priority: node["priority"].choice(default: PushHints.Priority.high) ?? .high,
            // APNs and Web Push services keep an undelivered message for about four weeks at most.
            ttlSeconds: node["ttl_seconds"].int(in: 0...2_419_200),
            contentAvailable: node["content_available"].bool(default: false)
        )
    }

    private static func readTenant(_ node: ConfigNode) -> TenantDefinition? {
        guard node.object(keys: ["id", "name", "apps"]) else { return nil }
        let id = node["id"].identifier()
        let name = node["name"].string() ?? id
        let apps = node["apps"].isPresent ? node["apps"].list().compactMap { $0.identifier() } : nil
        guard let id, let name else { return nil }
        return TenantDefinition(id: id, name: name, apps: apps)
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
