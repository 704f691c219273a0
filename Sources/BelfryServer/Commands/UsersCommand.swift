import ArgumentParser
import BelfryCore
import Fluent
import Foundation
import SQLKit
import Vapor

/// `belfry users`: list users, show one, or erase one (as `DELETE /v1/users/{id}` does).
struct UsersCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "users", abstract: "List users, show one, or erase one and everything stored about them.",
        subcommands: [List.self, Show.self, Delete.self], defaultSubcommand: List.self)

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Users by id, one a line: id, email, created.")

        @ArgumentParser.Option(help: "How many (1 to 10000).")
        var limit = 100

        @ArgumentParser.Option(help: "Only ids after this one, for the next page.")
        var after: String?

        @OptionGroup var storage: StorageOptions
        @OptionGroup var output: ListOutput

        func validate() throws {
            guard (1...10_000).contains(limit) else { throw ValidationError("--limit must be from 1 to 10000") }
        }

        func run() async throws {
            let settings = try ServerConfiguration.forCommand(.init(database: storage.database, config: storage.config))
            let users = try await withConfiguredApp(settings, arguments: ["belfry"]) { belfry, _ in
                let query = UserModel.query(on: belfry.db).sort(\.$externalID).limit(limit)
                if let after { query.filter(\.$externalID > after) }
                return try await query.all()
            }
            output.say(
                users.map { [$0.externalID, $0.email ?? "-", $0.createdAt.ISO8601Format()] },
                columns: ["id", "email", "created_at"], empty: "no users",
                more: users.count == limit ? users.last.map { "belfry users list --after \($0.externalID)" } : nil)
        }
    }

    /// What `show` and `delete` take: a user id and the database.
    struct Target: ParsableArguments {
        @ArgumentParser.Argument(help: "The user's external id.")
        var user: String

        @OptionGroup var storage: StorageOptions

        func validate() throws { try UserID.check(user) }

        func run<T>(_ body: @escaping (CommandScope) async throws -> T) async throws -> T {
            try await withUsers(storage, body)
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "A user as GET /v1/users/{id} answers, with their devices.")

        @OptionGroup var target: Target
        @OptionGroup var output: ShowOutput

        func run() async throws {
            let user = target.user
            let record = try await target.run { belfry in
                let model = try await UserModel.find(externalID: user, on: belfry.db)
                return model.record(tenants: try await model.tenantIDs(on: belfry.db))
            }
            try sayJSON(record, compact: output.json)
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Erase the user: preferences, devices, inbox, deliveries, topics, batches and pending events.")

        @OptionGroup var target: Target

        @ArgumentParser.Flag(help: "Erase without asking.")
        var yes = false

        func run() async throws {
            let user = target.user
            if !yes {
                // Erasure cannot be undone: a person at a terminal types the id; a script says --yes.
                guard isatty(STDIN_FILENO) == 1 else {
                    throw ValidationError("erasing \(user) cannot be undone: pass --yes to erase without asking")
                }
                FileHandle.standardError.write(
                    Data("Erase \(user) and everything stored about them? Type the id to confirm: ".utf8))
                guard readLine()?.trimmingCharacters(in: .whitespaces) == user else {
                    throw CommandFailure("not erased: the id typed was not \(user)")
                }
            }
            try await target.run { belfry in
                try await UserErasure.erase(user, storage: belfry.context.database, on: belfry.db)
                try await belfry.services.auditLog.record(.userErased, by: "cli", subject: user, on: belfry.db)
            }
            say("erased \(user)")
        }
    }
}

/// `belfry devices list --user ID`: a user's push devices, active and retired.
struct DevicesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "devices", abstract: "List a user's push devices.", subcommands: [List.self],
        defaultSubcommand: List.self)

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "A user's devices, newest first: id, platform, authorization, address, state.")

        @ArgumentParser.Option(help: "The user's external id.")
        var user: String

        @OptionGroup var storage: StorageOptions
        @OptionGroup var output: ListOutput

        func validate() throws { try UserID.check(user) }

        func run() async throws {
            let user = user
            let devices = try await withUsers(storage) { belfry in
                let model = try await UserModel.find(externalID: user, on: belfry.db)
                return try await belfry.services.devices.devices(of: try model.requireID(), on: belfry.db)
            }
            let rows = devices.map { device in
                // Enough of the address to tell devices apart, not the credential itself: a token's
                // first characters, a subscription's push service.
                let address =
                    device.platform == .apns
                    ? String(device.address.prefix(8)) + "…" : (URL(string: device.address)?.host ?? "?")
                let state =
                    device.retiredAt.map { "retired \($0.ISO8601Format()): \(device.retiredReason ?? "")" } ?? "active"
                return [device.id.uuidString, device.platform.rawValue, device.authorization.rawValue, address, state]
            }
            output.say(
                rows, columns: ["id", "platform", "authorization", "address", "state"], empty: "no devices")
        }
    }
}

/// Runs `body` on the configured database; a user it does not find is a usage error.
private func withUsers<T>(
    _ storage: StorageOptions, _ body: @escaping (CommandScope) async throws -> T
) async throws -> T {
    try await withStorage(storage, failures: [.userNotFound], body)
}
