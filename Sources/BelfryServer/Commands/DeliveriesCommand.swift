import ArgumentParser
import Foundation
import Vapor

/// `belfry deliveries`: the deliveries that ended unsent (failed or dead), and retrying them one
/// by one or a channel's all at once.
struct DeliveriesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "deliveries", abstract: "List failed and dead deliveries, and queue them again.",
        subcommands: [List.self, Retry.self], defaultSubcommand: List.self)

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Failed and dead deliveries, the latest first: id, ended, status, channel, user, event, "
                + "attempts, why.")

        @ArgumentParser.Option(help: "failed or dead (default: both).")
        var status: String?

        @ArgumentParser.Option(help: "Only this channel.")
        var channel: String?

        @ArgumentParser.Option(help: "Only those that ended this long ago or since: 30m, 24h, 7d.")
        var since: String?

        @ArgumentParser.Option(help: "How many (1 to 10000).")
        var limit = 100

        @OptionGroup var storage: StorageOptions
        @OptionGroup var output: ListOutput

        func validate() throws {
            if let status, !DeadLetters.retryable.map(\.rawValue).contains(status) {
                throw ValidationError("--status must be failed or dead, got \"\(status)\"")
            }
            if let since, LinkCommand.seconds(since) == nil {
                throw ValidationError("--since must be a duration such as 30m, 24h or 7d, got \"\(since)\"")
            }
            guard (1...10_000).contains(limit) else { throw ValidationError("--limit must be from 1 to 10000") }
        }

        func run() async throws {
            let statuses = status.flatMap(DeliveryStatus.init(rawValue:)).map { [$0] } ?? DeadLetters.retryable
            let (channel, limit, window) = (channel, limit, since.flatMap(LinkCommand.seconds))
            let ended = try await withStorage(storage, failures: []) { belfry in
                let since = window.map { belfry.context.now().addingTimeInterval(-TimeInterval($0)) }
                return try await belfry.services.deadLetters.list(
                    statuses: statuses, channel: channel, since: since, limit: limit, on: belfry.db)
            }
            output.say(
                ended.map { delivery in
                    [
                        delivery.id.uuidString.lowercased(), delivery.updatedAt.ISO8601Format(),
                        delivery.status.rawValue, delivery.channel, delivery.user,
                        delivery.eventID.uuidString.lowercased(), "\(delivery.attempts)",
                        ConsolePages.inWords(delivery.lastError),
                    ]
                }, columns: ["id", "ended_at", "status", "channel", "user", "event", "attempts", "why"],
                empty: "no failed or dead deliveries")
        }
    }

    struct Retry: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Queue failed or dead deliveries again, each with its attempts anew: by id, or a channel's all.")

        @ArgumentParser.Argument(help: "Delivery ids.")
        var ids: [String] = []

        @ArgumentParser.Option(help: "Every failed and dead delivery of this channel.")
        var channel: String?

        @OptionGroup var storage: StorageOptions

        func validate() throws {
            guard ids.isEmpty != (channel == nil) else {
                throw ValidationError("name delivery ids or --channel, one of the two")
            }
            for id in ids where UUID(uuidString: id) == nil {
                throw ValidationError("\"\(id)\" is not a delivery id")
            }
        }

        func run() async throws {
            let (ids, channel) = (ids.compactMap(UUID.init(uuidString:)), channel)
            let (queued, unknown) = try await withStorage(storage, failures: []) { belfry -> (Int, [UUID]) in
                let letters = belfry.services.deadLetters
                var queued = 0
                var unknown: [UUID] = []
                if let channel {
                    queued = try await letters.retry(channel: channel, on: belfry.db)
                } else {
                    for id in ids {
                        if try await letters.retry(delivery: id, on: belfry.db) {
                            queued += 1
                        } else {
                            unknown.append(id)
                        }
                    }
                }
                if queued > 0 {
                    try await belfry.services.auditLog.record(
                        .deliveriesRetried, by: "cli", subject: channel.map { "channel:\($0)" },
                        detail: "\(queued) queued", on: belfry.db)
                }
                return (queued, unknown)
            }
            say("\(queued) \(queued == 1 ? "delivery" : "deliveries") queued again")
            if !unknown.isEmpty {
                throw CommandFailure(
                    "no failed or dead delivery "
                        + unknown.map { $0.uuidString.lowercased() }.joined(separator: ", "))
            }
        }
    }
}
