import ArgumentParser
import BelfryCore
import Fluent
import Foundation
import Vapor

/// `belfry messages`: the message log, as `GET /v1/messages` reads it.
struct MessagesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "messages", abstract: "The message log: each notification on each channel, with its attempts.",
        subcommands: [List.self, Show.self], defaultSubcommand: List.self)

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Messages, newest first: id, created, user, channel, status, attempts, category, title.")

        @ArgumentParser.Option(help: "Only this user's (their external id).")
        var user: String?

        @ArgumentParser.Option(help: "Only this event's.")
        var event: String?

        @ArgumentParser.Option(help: "Only this channel's.")
        var channel: String?

        @ArgumentParser.Option(help: "queued, running, sent, failed, dead or skipped.")
        var status: String?

        @ArgumentParser.Option(help: "Only those created this long ago or since: 30m, 24h, 7d.")
        var since: String?

        @ArgumentParser.Option(help: "How many (1 to 10000).")
        var limit = 50

        @ArgumentParser.Option(help: "The last message of the previous page: the next page's command names it.")
        var after: String?

        @OptionGroup var storage: StorageOptions
        @OptionGroup var output: ListOutput

        func validate() throws {
            if let status, DeliveryStatus(rawValue: status) == nil {
                throw ValidationError(
                    "--status must be queued, running, sent, failed, dead or skipped, got \"\(status)\"")
            }
            if let event, UUID(uuidString: event) == nil { throw ValidationError("\"\(event)\" is not an event id") }
            if let after, UUID(uuidString: after) == nil { throw ValidationError("\"\(after)\" is not a message id") }
            if let since, LinkCommand.seconds(since) == nil {
                throw ValidationError("--since must be a duration such as 30m, 24h or 7d, got \"\(since)\"")
            }
            guard (1...10_000).contains(limit) else { throw ValidationError("--limit must be from 1 to 10000") }
        }

        func run() async throws {
            let (user, limit, window) = (user, limit, since.flatMap(LinkCommand.seconds))
            var filter = MessageLog.Filter(
                event: event.flatMap(UUID.init(uuidString:)), channel: channel, status: status)
            let after = after.flatMap(UUID.init(uuidString:))
            let messages = try await withStorage(storage, failures: [.userNotFound]) { belfry in
                if let user { filter.user = try await UserModel.find(externalID: user, on: belfry.db).requireID() }
                filter.since = window.map { belfry.context.now().addingTimeInterval(-TimeInterval($0)) }
                return try await belfry.services.messageLog.page(filter, after: after, limit: limit, on: belfry.db)
            }
            // The next page: the same filters, after the last message shown.
            let next =
                messages.count == limit
                ? messages.last.map { last in
                    (["belfry messages list"]
                        + [
                            ("--user", self.user), ("--event", event), ("--channel", channel), ("--status", status),
                            ("--since", since),
                        ].compactMap { flag, value in value.map { "\(flag) \($0)" } }
                        + ["--limit \(limit)", "--after \(last.id.uuidString.lowercased())"]).joined(separator: " ")
                } : nil
            output.say(
                messages.map { message in
                    [
                        message.id.uuidString.lowercased(), message.createdAt.ISO8601Format(), message.user,
                        message.channel, message.status, "\(message.attempts.count)", message.category, message.title,
                    ]
                }, columns: ["id", "created_at", "user", "channel", "status", "attempts", "category", "title"],
                empty: "no messages", more: next)
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "One message as GET /v1/messages/{id} answers, with every attempt.")

        @ArgumentParser.Argument(help: "The message's id.")
        var id: String

        @OptionGroup var storage: StorageOptions
        @OptionGroup var output: ShowOutput

        func validate() throws {
            if UUID(uuidString: id) == nil { throw ValidationError("\"\(id)\" is not a message id") }
        }

        func run() async throws {
            let id = UUID(uuidString: id) ?? UUID()
            let message = try await withStorage(storage, failures: [.notFound]) { belfry in
                guard let message = try await belfry.services.messageLog.message(id, on: belfry.db) else {
                    throw BelfryError(.notFound, "no message \(id.uuidString.lowercased())")
                }
                return message
            }
            try sayJSON(message, compact: output.json)
        }
    }
}
