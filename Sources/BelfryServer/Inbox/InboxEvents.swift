import BelfryCore
import BelfryJSON
import Fluent
import Foundation
import SQLKit

/// What changed in a user's inbox or preferences, small enough to tell other instances.
///
/// It names rows, never their content: a receiver reads what it needs for the streams it
/// holds, and PostgreSQL's NOTIFY payloads stay under their 8 000-byte limit.
enum InboxSignal: Codable, Sendable, Equatable {
    /// An event's notifications became visible in these users' inboxes.
    case created(event: UUID, users: [UUID])
    /// One notification changed state.
    case updated(user: UUID, notification: UUID)
    /// Several notifications changed state at once (read-all, seen-all).
    case counts(user: UUID)
    /// A preference scope has a new version.
    case preferences(user: UUID, tenant: String?, etag: String)
}

/// Tells the open inbox streams about changes, after they committed: streams on this instance
/// directly, and on PostgreSQL those on every other instance through `NOTIFY` (see
/// `InboxRelayListener`). On SQLite there is one instance, so the first is all there is.
struct InboxEvents: Sendable {
    static let channel = "belfry_inbox"
    /// Users named in one `created` message: 150 UUIDs keep it well under NOTIFY's 8 000 bytes.
    static let usersPerMessage = 150

    /// A message between instances; each instance ignores its own.
    struct Message: Codable, Sendable {
        var origin: UUID
        var signal: InboxSignal

        /// The message as sent: its origin first, written so, that an instance knows its own
        /// messages by their start (`sentBy(_:)`) without decoding them. Fan-out sends one for
        /// every event, and every instance hears its own as well as the others'.
        func payload(_ encoder: JSONEncoder) throws -> String {
            Self.start(origin) + "\"signal\":" + (try Self.text(of: signal, encoder)) + "}"
        }

        /// A signal as JSON, as `encoder` writes it. `created`, which fan-out sends for every
        /// batch, is written by hand: the encoder was 1.3 % of the machine in the PostgreSQL
        /// intake benchmark.
        static func text(of signal: InboxSignal, _ encoder: JSONEncoder) throws -> String {
            guard case .created(let event, let users) = signal else {
                return String(decoding: try encoder.encode(signal), as: UTF8.self)
            }
            var text = #"{"created":{"event":""# + event.upperCaseText + #"","users":["#
            text.reserveCapacity(text.utf8.count + users.count * 39 + 3)
            for (index, user) in users.enumerated() {
                text += (index == 0 ? "\"" : ",\"") + user.upperCaseText + "\""
            }
            return text + "]}}"
        }

        /// Whether `payload` is a message `instance` sent.
        static func sentBy(_ instance: UUID, _ payload: String) -> Bool { payload.hasPrefix(start(instance)) }

        private static func start(_ origin: UUID) -> String { "{\"origin\":\"" + origin.upperCaseText + "\"," }
    }

    /// This instance's open streams.
    let hub: InboxHub
    /// Reads what the streams need (items, counts).
    let store: InboxStore
    /// On PostgreSQL, other instances hear of changes through `NOTIFY`.
    let relays: Bool
    /// This process, so that it ignores its own messages.
    let instance: UUID
    let logger: Logger

    /// New notifications of one event or more (a fan-out batch). `items` are those of users
    /// followed here, already built; `users` are all whose inbox got one, by event in order, for
    /// the other instances, all told in one statement, in that order.
    func created(
        items: [(UUID, InboxNotification)], users: [(event: UUID, users: [UUID])], on db: any Database
    )
        async
    {
        if !items.isEmpty {
            publishCreated(items, counts: (try? await store.counts(of: items.map(\.0), on: db)) ?? [:])
        }
        var signals: [InboxSignal] = []
        for (event, users) in users {
            for chunk in users.chunked(Self.usersPerMessage) {
                signals.append(.created(event: event, users: Array(chunk)))
            }
        }
        await relay(signals, on: db)
    }

    /// A notification of an event that only now became due (a calendar schedule).
    func becameAvailable(event: UUID, user: UUID, on db: any Database) async {
        await apply(.created(event: event, users: [user]), on: db)
        await relay([.created(event: event, users: [user])], on: db)
    }

    func updated(_ item: InboxNotification, user: UUID, on db: any Database) async {
        publish(to: user, .notificationUpdated, item)
        await publishCounts(to: user, on: db)
        await relay([.updated(user: user, notification: item.id)], on: db)
    }

    func countsChanged(user: UUID, on db: any Database) async {
        await publishCounts(to: user, on: db)
        await relay([.counts(user: user)], on: db)
    }

    func preferencesChanged(user: UUID, tenant: String?, etag: String, on db: any Database) async {
        await apply(.preferences(user: user, tenant: tenant, etag: etag), on: db)
        await relay([.preferences(user: user, tenant: tenant, etag: etag)], on: db)
    }

    /// Brings this instance's streams up to date with a signal, reading what they need.
    func apply(_ signal: InboxSignal, on db: any Database) async {
        do {
            switch signal {
            case .created(let event, let users):
                let followed = users.filter(hub.isFollowed)
                guard !followed.isEmpty else { return }
                let items = try await store.items(ofEvent: event, users: followed, on: db)
                publishCreated(items, counts: try await store.counts(of: followed, on: db))
            case .updated(let user, let notification):
                guard hub.isFollowed(user) else { return }
                if let item = try await store.item(notification, userID: user, on: db) {
                    publish(to: user, .notificationUpdated, item)
                }
                await publishCounts(to: user, on: db)
            case .counts(let user):
                await publishCounts(to: user, on: db)
            case .preferences(let user, let tenant, let etag):
                struct Changed: Encodable {
                    var tenant: String?
                    var etag: String
                }
                publish(to: user, .preferencesUpdated, Changed(tenant: tenant, etag: etag))
            }
        } catch {
            logger.warning(
                "could not update inbox streams", metadata: ["belfry.error": "\(String(reflecting: error))"])
        }
    }

    /// Each new notification, then its user's counts, to the streams here.
    private func publishCreated(_ items: [(UUID, InboxNotification)], counts: [UUID: InboxCounts]) {
        for (user, item) in items where hub.isFollowed(user) {
            // Together, so that each stream writes both at once.
            let events = [
                Self.encoded(.notificationCreated, item), counts[user].flatMap { Self.encoded(.counts, $0) },
            ]
            hub.publish(to: user, events.compactMap { $0 })
        }
    }

    /// Tells the other instances, a message a signal, in one statement; a lost message costs
    /// their streams one update, never data.
    private func relay(_ signals: [InboxSignal], on db: any Database) async {
        guard relays, !signals.isEmpty else { return }
        do {
            let encoder = JSONEncoder()
            let payloads = try signals.map { try Message(origin: instance, signal: $0).payload(encoder) }
            // A notice lost with its connection must not hold up the change it follows.
            try await withDeadline(5, "telling other instances") {
                try await db.sql.raw(
                    """
                    SELECT pg_notify(\(bind: Self.channel), payload)
                    FROM unnest(\(bind: payloads)::text[]) WITH ORDINALITY AS sent(payload, position) ORDER BY position
                    """
                ).run()
            }
        } catch {
            logger.warning(
                "could not tell other instances of an inbox change",
                metadata: ["belfry.error": "\(String(reflecting: error))"])
        }
    }

    /// Sends an event to `user`'s open streams here, if they have any. Call it after the change committed.
    func publish(to user: UUID, _ name: InboxStreamEvent, _ value: some Encodable) {
        guard hub.isFollowed(user), let event = Self.encoded(name, value) else { return }
        hub.publish(to: user, [event])
    }

    private static func encoded(_ name: InboxStreamEvent, _ value: some Encodable) -> (name: String, data: String)? {
        (try? JSONCoding.encoder.encode(value)).map { (name.rawValue, String(decoding: $0, as: UTF8.self)) }
    }

    /// Sends `user`'s current bell counts to their open streams here, if they have any.
    func publishCounts(to user: UUID, on db: any Database) async {
        guard hub.isFollowed(user), let counts = try? await store.counts(userID: user, tenant: nil, on: db) else {
            return
        }
        publish(to: user, .counts, counts)
    }
}
