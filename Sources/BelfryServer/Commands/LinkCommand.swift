import ArgumentParser
import Fluent
import Foundation
import Vapor

/// `belfry link`: a signed one-click link for emails that opens a user's preference center or
/// inbox, signed in, until it expires.
struct LinkCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "link",
        abstract: "Print a signed link that opens a user's preference center or inbox (for emails).")

    @ArgumentParser.Option(help: "The user's external id.")
    var user: String

    @ArgumentParser.Option(help: "The page: preferences or inbox.")
    var page = "preferences"

    @ArgumentParser.Option(help: "How long the link works: seconds, or a number with s, m, h or d (at most 30d).")
    var expires = "7d"

    @ArgumentParser.Option(help: "The site the preference center opens on. Default: the workspace's default tenant.")
    var tenant: String?

    @ArgumentParser.Option(
        help:
            "The server's address as users reach it, e.g. https://notify.example.org. Default: \(ServerSetting.publicURL.environment)."
    )
    var baseURL: String?

    @OptionGroup var storage: StorageOptions

    static let longest = 30 * 86400

    /// Seconds in `text`: `3600`, `90m`, `12h`, `7d`.
    static func seconds(_ text: String) -> Int? {
        let units: [Character: Int] = ["s": 1, "m": 60, "h": 3600, "d": 86400]
        let (number, unit) =
            if let last = text.last, let unit = units[last] { (text.dropLast(), unit) } else { (Substring(text), 1) }
        guard let value = Int(number), value > 0 else { return nil }
        let (product, overflow) = value.multipliedReportingOverflow(by: unit)
        return overflow ? nil : product
    }

    func run() async throws {
        guard WebLink.pages.contains(page) else {
            throw ValidationError("--page must be one of \(WebLink.pages.joined(separator: ", ")), got \"\(page)\"")
        }
        guard let lifetime = Self.seconds(expires), lifetime <= Self.longest else {
            throw ValidationError(
                "--expires must be a duration such as 3600, 90m, 12h or 7d, at most 30d; got \"\(expires)\"")
        }
        let settings = try ServerConfiguration.forCommand(.init(database: storage.database, config: storage.config))
        if let tenant, settings.workspace.tenant(tenant) == nil {
            throw ValidationError("--tenant: no tenant \"\(tenant)\" in this workspace")
        }
        // Never a guess: a link to the wrong host or port reaches nobody.
        guard let given = baseURL ?? settings.publicURL else {
            throw ValidationError(
                "a link needs the address users reach the server at: set \(ServerSetting.publicURL.environment) or pass --base-url"
            )
        }
        let base = given.trimmingCharacters(in: CharacterSet(charactersIn: "/"))
        guard let components = URLComponents(string: base), components.scheme == "http" || components.scheme == "https",
            components.host != nil
        else {
            throw ValidationError("--base-url must be an http or https address, got \"\(base)\"")
        }
        let link = try await withConfiguredApp(settings, arguments: ["belfry"]) { belfry, _ in
            guard let model = try await UserModel.query(on: belfry.db).filter(\.$externalID == user).first() else {
                throw CommandFailure("no user \"\(user)\"; create it with PUT /v1/users/\(user)")
            }
            return try belfry.context.webSigner.link(
                page: page, userID: try model.requireID(), externalID: model.externalID, now: belfry.context.now(),
                lifetime: lifetime)
        }
        say("\(base)/\(page)?link=\(link)\(tenant.map { "&tenant=\($0)" } ?? "")")
    }
}
