import Fluent
import FluentPostgresDriver
import Foundation
import NIOConcurrencyHelpers
import PostgresNIO
import Vapor

/// On PostgreSQL, listens for the inbox signals other instances send (`InboxEvents`) on a
/// connection of its own, and applies them to this instance's streams.
///
/// A lost connection is opened again with backoff; once it is back, every followed user gets
/// fresh counts, since signals sent meanwhile are gone.
final class InboxRelayListener: LifecycleHandler, Sendable {
    private let configuration: PostgresConnection.Configuration
    private let context: BelfryContext
    private let services: BelfryServices
    private let task = NIOLockedValueBox<Task<Void, Never>?>(nil)
    /// Whether LISTEN is in place: tests wait for it.
    let isListening = NIOLockedValueBox(false)

    init(url: String, context: BelfryContext, services: BelfryServices) throws {
        var configuration = try SQLPostgresConfiguration(url: url)
        configuration.searchPath = nil
        self.configuration = configuration.coreConfiguration
        self.context = context
        self.services = services
    }

    func didBootAsync(_ application: Application) async throws {
        let context = context
        let services = services
        let database: @Sendable () -> any Database = { [unowned application] in application.db }
        let eventLoop = application.eventLoopGroup.any()
        let logger = application.logger
        task.withLockedValue { task in
            task = Task {
                await self.run(
                    context: context, services: services, database: database, eventLoop: eventLoop, logger: logger)
            }
        }
    }

    func shutdownAsync(_ application: Application) async {
        let task = task.withLockedValue { $0 }
        task?.cancel()
        await task?.value
    }

    private func run(
        context: BelfryContext, services: BelfryServices, database: @escaping @Sendable () -> any Database,
        eventLoop: any EventLoop,
        logger: Logger
    ) async {
        var delay: TimeInterval = 0.5
        var connectedBefore = false
        while !Task.isCancelled {
            do {
                let connection = try await PostgresConnection.connect(
                    on: eventLoop, configuration: configuration, id: 0, logger: logger
                ).get()
                do {
                    try await connection.listen(on: InboxEvents.channel) { notifications in
                        isListening.withLockedValue { $0 = true }
                        delay = 0.5
                        logger.info("listening for other instances' inbox changes")
                        if connectedBefore { await resync(context: context, services: services, on: database()) }
                        connectedBefore = true
                        for try await notification in notifications {
                            guard !InboxEvents.Message.sentBy(context.instance, notification.payload),
                                let message = try? JSONDecoder().decode(
                                    InboxEvents.Message.self, from: Data(notification.payload.utf8)),
                                message.origin != context.instance
                            else { continue }
                            await services.inboxEvents.apply(message.signal, on: database())
                        }
                    }
                } catch {
                    isListening.withLockedValue { $0 = false }
                    try? await connection.close()
                    throw error
                }
                isListening.withLockedValue { $0 = false }
                try? await connection.close()
            } catch {
                guard !Task.isCancelled else { return }
                logger.warning(
                    "lost the connection for other instances' inbox changes; retrying",
                    metadata: ["belfry.error": "\(String(reflecting: error))", "belfry.retry_in": "\(delay)"])
            }
            try? await Task.sleep(for: .seconds(delay))
            delay = min(delay * 2, 10)
        }
    }

    /// Fresh counts for every followed user, after a gap in which signals may have been lost.
    private func resync(context: BelfryContext, services: BelfryServices, on db: any Database) async {
        let users = context.inboxHub.followedUsers()
        guard !users.isEmpty, let counts = try? await services.inboxStore.counts(of: users, on: db) else {
            return
        }
        let events = services.inboxEvents
        for (user, counts) in counts { events.publish(to: user, .counts, counts) }
    }
}
