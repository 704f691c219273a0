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
            let preview: TemplatePreview
            do {
                preview = try TemplatePreview(
                    category, data: data, tenant: tenant, locale: locale, count: count, workspace: workspace)
            } catch {
                throw ValidationError("category \"\(category.id)\": \(error)")
            }
            guard !preview.blocks.isEmpty else {
                throw ValidationError(
                    "category \"\(category.id)\" has no content templates and no digest: its events carry their own text"
                )
            }
            return preview.blocks.map { block in
                (["[\(block.label)]"] + block.fields.map { "\($0.name): \($0.value)" }).joined(separator: "\n")
            }.joined(separator: "\n\n")
        }
    }
}
