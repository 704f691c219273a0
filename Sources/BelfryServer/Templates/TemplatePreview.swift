import BelfryCore
import Foundation

/// A category's content rendered from sample data in each of its languages (and its digest's
/// summary), for `belfry templates render` and the console's template page.
struct TemplatePreview: Sendable {
    /// One language's text.
    struct Block: Sendable {
        /// What it is: `default`, `de`, `digest of 21, de`.
        var label: String
        /// The language of the text, for `lang` and `dir`; `nil` for the default.
        var language: String?
        var fields: [(name: String, value: String)]
    }

    var blocks: [Block]

    /// Renders `category`; with `locale`, only the variant that locale gets.
    init(
        _ category: CategoryDefinition, data: [String: JSONValue], tenant: String, locale: String?, count: Int,
        workspace: WorkspaceConfig
    ) throws {
        let asked = locale.map { " for \($0)" } ?? ""
        var blocks: [Block] = []
        if let templates = category.content {
            let rendered = try ContentRendering.render(
                templates, given: .init(), data: data, category: category, tenant: tenant, workspace: workspace)
            let variants = locale.map { [rendered.variant(for: $0)] } ?? rendered.every
            for (tag, content) in variants {
                var fields = [("title", content.title), ("body", content.body)]
                if let url = content.url { fields.append(("url", url)) }
                if let title = content.pushTitle { fields.append(("push title", title)) }
                if let body = content.pushBody { fields.append(("push body", body)) }
                blocks.append(Block(label: (tag ?? "default") + asked, language: tag, fields: fields))
            }
        }
        if let rule = category.batch {
            let items = (0..<min(max(count, 1), rule.maxItems)).map { index in
                NotificationBatch.Item(
                    eventID: UUID(), title: "Event \(index + 1)", body: "", url: nil, data: data, createdAt: Date())
            }
            let tags: [String?] = locale.map { [$0] } ?? [nil] + (rule.locales ?? [:]).keys.sorted()
            for tag in tags {
                let text = BatchText.render(rule, NotificationBatch(count: count, items: items), locale: tag)
                blocks.append(
                    Block(
                        label: "digest of \(count), \(text.locale ?? "default")\(asked)", language: text.locale,
                        fields: [("title", text.title), ("body", text.body)]))
            }
        }
        self.blocks = blocks
    }

    /// Sample data for a category: each field its `data_schema` declares, with a value of its type.
    static func sampleData(for category: CategoryDefinition) -> [String: JSONValue] {
        var data: [String: JSONValue] = [:]
        for (name, field) in category.dataSchema?.properties ?? [:] {
            switch field.type {
            case .number?, .integer?: data[name] = .number(3)
            case .boolean?: data[name] = .bool(true)
            case .object?: data[name] = .object([:])
            case .array?: data[name] = .array([])
            case .string?, nil: data[name] = .string(name.capitalized)
            }
        }
        return data
    }
}
