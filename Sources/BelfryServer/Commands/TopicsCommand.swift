import ArgumentParser
import BelfryCore
import Fluent
import Foundation

/// `belfry topics`: the topics and their subscriber counts; `belfry topics add|remove TOPIC USER…`
/// changes who follows one (unknown users are created on `add`).
struct TopicsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "topics", abstract: "List topics with their subscribers, or change who follows one.",
        subcommands: [List.self, Add.self, Remove.self], defaultSubcommand: List.self)

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Each topic and how many users follow it.")

        @ArgumentParser.Argument(help: "Only this topic.")
        var topic: String?

        @OptionGroup var storage: StorageOptions
        @OptionGroup var output: ListOutput

        func run() async throws {
            let settings = try ServerConfiguration.forCommand(.init(database: storage.database, config: storage.config))
            let topics = try await withConfiguredApp(settings, arguments: ["belfry"]) { belfry, _ in
                let store = belfry.services.topics
                if let topic {
                    return [
                        TopicSummary(topic: topic, subscribers: try await store.subscribers(of: topic, on: belfry.db))
                    ]
                }
                return try await store.all(on: belfry.db)
            }
            output.say(
                topics.map { [$0.topic, "\($0.subscribers)"] }, columns: ["topic", "subscribers"],
                empty: "no topics yet")
        }
    }

    /// What `add` and `remove` take: a topic, users, and the database.
    struct Change: ParsableArguments {
        @ArgumentParser.Argument(help: "The topic.")
        var topic: String

        @ArgumentParser.Argument(help: "External user ids.")
        var users: [String]

        @OptionGroup var storage: StorageOptions

        /// Checks the arguments, then runs `body` with the topic store on the configured database.
        func run(_ body: @escaping (TopicStore, any Database) async throws -> Int) async throws -> Int {
            try check(topic: topic, users: users)
            let settings = try ServerConfiguration.forCommand(.init(database: storage.database, config: storage.config))
            return try await withConfiguredApp(settings, arguments: ["belfry"]) { belfry, _ in
                try await body(belfry.services.topics, belfry.db)
            }
        }
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Subscribe users to a topic (only users Belfry knows, unless --create-users).")

        @OptionGroup var change: Change

        @ArgumentParser.Flag(
            help: "Create the users Belfry does not know yet, as PUT /v1/topics/{topic}/subscribers does.")
        var createUsers = false

        func run() async throws {
            let (topic, users, createUsers) = (change.topic, change.users, createUsers)
            let added = try await change.run { store, db in
                if !createUsers {
                    // A mistyped id would otherwise become a new user, silently.
                    let known = Set(
                        try await UserModel.query(on: db).filter(\.$externalID ~~ users).all().map(\.externalID))
                    let unknown = users.filter { !known.contains($0) }
                    if !unknown.isEmpty {
                        throw CommandFailure(
                            "no user \(unknown.prefix(5).map { "\"\($0)\"" }.joined(separator: ", "))"
                                + (unknown.count > 5 ? " and \(unknown.count - 5) more" : "")
                                + "; create them with PUT /v1/users/{id}, or pass --create-users")
                    }
                }
                return try await store.subscribe(users, to: topic, on: db)
            }
            say("\(topic): \(added) subscribed, \(users.count - added) already were")
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Unsubscribe users from a topic.")

        @OptionGroup var change: Change

        func run() async throws {
            let (topic, users) = (change.topic, change.users)
            let removed = try await change.run { store, db in try await store.unsubscribe(users, from: topic, on: db) }
            say("\(topic): \(removed) unsubscribed")
        }
    }
}

private func check(topic: String, users: [String]) throws {
    guard TopicName.isValid(topic) else {
        throw ValidationError("the topic must be \(TopicName.rule), got \"\(topic)\"")
    }
    for user in users { try UserID.check(user) }
    guard !users.isEmpty else { throw ValidationError("name at least one user") }
}
