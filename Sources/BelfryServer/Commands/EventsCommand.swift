import ArgumentParser
import BelfryCore
import Foundation
import Vapor

/// `belfry events`: recent events, one event's fan-out and delivery status, and putting an
/// event's dead deliveries back in the queue. Works on the database `belfry serve` uses; a
/// running server's workers send what `retry` queued.
struct EventsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "events", abstract: "List events, show one, or retry its failed and dead deliveries.",
        subcommands: [List.self, Show.self, Retry.self], defaultSubcommand: List.self)

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The newest events, one a line.")

        @ArgumentParser.Option(help: "Only events in this state: pending, running, done or failed.")
        var state: String?

        @ArgumentParser.Option(help: "How many (1 to 1000).")
        var limit = 20

        @OptionGroup var storage: StorageOptions
        @OptionGroup var output: ListOutput

        func validate() throws {
            if let state, EventStatus.FanoutState(rawValue: state) == nil {
                throw ValidationError("--state must be pending, running, done or failed, got \"\(state)\"")
            }
            guard (1...1000).contains(limit) else { throw ValidationError("--limit must be from 1 to 1000") }
        }

        func run() async throws {
            let settings = try ServerConfiguration.forCommand(.init(database: storage.database, config: storage.config))
            let wanted = state.flatMap(EventStatus.FanoutState.init(rawValue:))
            let events = try await withConfiguredApp(settings, arguments: ["belfry"]) { belfry, _ in
                try await belfry.services.eventStatuses.recent(state: wanted, limit: limit, on: belfry.db)
            }
            output.say(
                events.map { event in
                    [
                        event.id.uuidString, event.createdAt.ISO8601Format(), event.state, event.category, event.tenant,
                        "\(event.processed)/\(event.recipients)",
                    ]
                }, columns: ["id", "created_at", "state", "category", "tenant", "processed"], empty: "no events")
        }
    }

    /// What `show` and `retry` take: an event id and the database.
    struct Target: ParsableArguments {
        @ArgumentParser.Argument(help: "The event id (from POST /v1/events or `belfry events list`).")
        var id: String

        @OptionGroup var storage: StorageOptions

        func validate() throws {
            guard UUID(uuidString: id) != nil else { throw ValidationError("\"\(id)\" is not an event id") }
        }

        /// Runs `body` once the event is known to exist.
        func run<T>(_ body: @escaping (CommandScope, UUID) async throws -> T) async throws -> T {
            let settings = try ServerConfiguration.forCommand(.init(database: storage.database, config: storage.config))
            let event = UUID(uuidString: id)!  // checked in validate()
            return try await withConfiguredApp(settings, arguments: ["belfry"]) { belfry, _ in
                guard try await belfry.services.eventStatuses.exists(event, on: belfry.db) else {
                    throw CommandFailure("no event \(id)")
                }
                return try await body(belfry, event)
            }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "An event's fan-out and delivery status, as GET /v1/events/{id} answers it.")

        @OptionGroup var target: Target
        @OptionGroup var output: ShowOutput

        func run() async throws {
            let status = try await target.run { belfry, event in
                try await belfry.services.eventStatuses.status(of: event, on: belfry.db)
            }
            try sayJSON(status, compact: output.json)
        }
    }

    struct Retry: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Put the event's failed and dead deliveries back in the queue, each with its attempts anew.")

        @OptionGroup var target: Target

        func run() async throws {
            let queued = try await target.run { belfry, event in
                let queued = try await belfry.services.deadLetters.retry(event: event, on: belfry.db)
                try await belfry.services.auditLog.record(
                    .deliveriesRetried, by: "cli", subject: event.uuidString.lowercased(), detail: "\(queued) queued",
                    on: belfry.db)
                return queued
            }
            say("\(queued) \(queued == 1 ? "delivery" : "deliveries") queued again")
        }
    }
}
