import ArgumentParser
import BelfryCore
import Foundation

/// `belfry templates render CATEGORY`: a category's content as each language renders it from
/// sample data, without sending anything; the console's template page shows the same.
struct TemplatesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "templates", abstract: "Preview a category's content templates.",
        subcommands: [Render.self], defaultSubcommand: Render.self)

    struct Render: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Render a category's content (and digest summary) for a locale, or for every language it has.")

        @ArgumentParser.Argument(help: "The category id.")
        var category: String

        @ArgumentParser.Option(help: "A user's locale, such as de-AT. Default: the default and every variant.")
        var locale: String?

        @ArgumentParser.Option(help: "The event's data as a JSON object, such as '{\"page\": \"Glocke\"}'.")
        var data: String = "{}"

        @ArgumentParser.Option(help: "The tenant. Default: the workspace's default tenant.")
        var tenant: String?

        @ArgumentParser.Option(help: "For a digest: how many events it gathered.")
        var count: Int = 1

        @OptionGroup var storage: StorageOptions

        func run() async throws {
            let settings = try ServerConfiguration.forCommand(.init(database: storage.database, config: storage.config))
            let workspace = settings.workspace
            guard let category = workspace.category(category) else {
                throw ValidationError(
                    "no category \"\(category)\"; the categories are \(workspace.categories.map(\.id).joined(separator: ", "))"
                )
            }
            guard case .object(let fields) = try? JSONDecoder().decode(JSONValue.self, from: Data(data.utf8)) else {
                throw ValidationError("--data must be a JSON object, such as '{\"page\": \"Glocke\"}'")
            }
            let tenant = tenant ?? workspace.defaultTenant
            guard workspace.tenant(tenant) != nil else { throw ValidationError("no tenant \"\(tenant)\"") }
            say(
                try Self.preview(
                    category, data: fields, tenant: tenant, locale: locale, count: count, workspace: workspace))
        }

        /// The preview's text: a block per language.
        static func preview(
            _ category: CategoryDefinition, data: [String: JSONValue], tenant: String, locale: String?, count: Int,
            workspace: WorkspaceConfig
        ) throws -> String {
            var blocks: [String] = []
            if let templates = category.content {
                let rendered: LocalizedContent
                do {
                    rendered = try ContentRendering.render(
                        templates, given: .init(), data: data, category: category, tenant: tenant, workspace: workspace)
                } catch {
                    throw ValidationError("category \"\(category.id)\": \(error)")
                }
                let variants: [(String?, RenderedContent)] =
                    if let locale {
                        [rendered.variant(for: locale)]
                    } else {
                        [(nil, rendered.base)] + rendered.locales.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
                    }
                for (tag, content) in variants {
                    var lines = ["[\(tag ?? "default")\(locale.map { " for \($0)" } ?? "")]"]
                    lines.append("title: \(content.title)")
                    lines.append("body: \(content.body)")
                    if let url = content.url { lines.append("url: \(url)") }
                    if let title = content.pushTitle { lines.append("push title: \(title)") }
                    if let body = content.pushBody { lines.append("push body: \(body)") }
                    blocks.append(lines.joined(separator: "\n"))
                }
            }
            if let rule = category.batch {
                let items = (0..<min(count, rule.maxItems)).map { index in
                    NotificationBatch.Item(
                        eventID: UUID(), title: "Event \(index + 1)", body: "", url: nil, data: data,
                        createdAt: Date())
                }
                let tags: [String?] = locale.map { [$0] } ?? [nil] + (rule.locales ?? [:]).keys.sorted()
                for tag in tags {
                    let text = BatchText.render(rule, NotificationBatch(count: count, items: items), locale: tag)
                    blocks.append(
                        "[digest of \(count), \(text.locale ?? "default")\(locale.map { " for \($0)" } ?? "")]\n"
                            + "title: \(text.title)\nbody: \(text.body)")
                }
            }
            guard !blocks.isEmpty else {
                throw ValidationError(
                    "category \"\(category.id)\" has no content templates and no digest: its events carry their own text"
                )
            }
            return blocks.joined(separator: "\n\n")
        }
    }
}
