import Fluent
import SQLKit

// The delivery tables are read and written with SQLKit (batched statements on the hot paths),
// so they have no Fluent models; Fluent's schema builder still creates them portably.

extension SchemaBuilder {
    /// What a notification says, stored alike on the event and on each notification made from it.
    fileprivate func notificationContent() -> Self {
        field("category", .string, .required)
            .field("tenant", .string, .required)
            .field("title", .string, .required)
            .field("body", .string, .required)
            .field("url", .string)
            .field("data", .string)
    }
}

struct CreateEvents: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.schema("events")
            .id()
            .notificationContent()
            .field("calendar_rule", .string)
            .field("state", .string, .required)
            .field("not_before", .datetime, .required)
            .field("recipients", .int, .required)
            .field("processed", .int, .required)
            .field("failures", .int, .required)
            .field("last_error", .string)
            .field("lease_expires_at", .datetime)
            .field("created_at", .datetime, .required)
            .create()
        try await database.schema("event_recipients")
            .field("event_id", .uuid, .required, .references("events", .id, onDelete: .cascade))
            .field("position", .int, .required)
            .field("external_id", .string, .required)
            .compositeIdentifier(over: "event_id", "position")
            .create()
        try await database.schema("idempotency_keys")
            .field("key", .string, .identifier(auto: false))
            .field("event_id", .uuid, .required, .references("events", .id, onDelete: .cascade))
            .field("request_hash", .string, .required)
            .field("created_at", .datetime, .required)
            .create()
        try await database.schema("event_skips")
            .field("event_id", .uuid, .required, .references("events", .id, onDelete: .cascade))
            .field("channel", .string, .required)
            .field("reason", .string, .required)
            .field("count", .int, .required)
            .compositeIdentifier(over: "event_id", "channel", "reason")
            .create()
        try await database.sql.raw("CREATE INDEX events_due ON events (state, not_before)").run()
    }

    func revert(on database: any Database) async throws {
        for table in ["event_skips", "idempotency_keys", "event_recipients", "events"] {
            try await database.schema(table).delete()
        }
    }
}

struct CreateNotifications: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.schema("notifications")
            .id()
            .field("event_id", .uuid, .required, .references("events", .id, onDelete: .cascade))
            .field("user_id", .uuid, .required, .references(UserModel.schema, .id, onDelete: .cascade))
            .notificationContent()
            .field("in_inbox", .bool, .required)
            .field("created_at", .datetime, .required)
            .field("available_at", .datetime, .required)
            .field("seen_at", .datetime)
            .field("read_at", .datetime)
            .field("archived_at", .datetime)
            .unique(on: "event_id", "user_id")
            .create()
        try await database.sql.raw("CREATE INDEX notifications_inbox ON notifications (user_id, created_at)").run()
    }

    func revert(on database: any Database) async throws {
        try await database.schema("notifications").delete()
    }
}

struct CreateDeliveries: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.schema("deliveries")
            .id()
            .field("notification_id", .uuid, .required, .references("notifications", .id, onDelete: .cascade))
            .field("event_id", .uuid, .required)
            .field("user_id", .uuid, .required)
            .field("channel", .string, .required)
            .field("kind", .string, .required)
            .field("action_id", .string)
            .field("device_id", .uuid)
            .field("status", .string, .required)
            .field("attempts", .int, .required)
            .field("next_attempt_at", .datetime, .required)
            .field("lease_expires_at", .datetime)
            .field("worker", .string)
            .field("last_error", .string)
            .field("last_status", .int)
            .field("created_at", .datetime, .required)
            .field("updated_at", .datetime, .required)
            .create()
        try await database.sql.raw("CREATE INDEX deliveries_due ON deliveries (status, next_attempt_at)").run()
        try await database.sql.raw("CREATE INDEX deliveries_event ON deliveries (event_id, channel, status)").run()
        try await database.schema("delivery_attempts")
            .id()
            .field("delivery_id", .uuid, .required, .references("deliveries", .id, onDelete: .cascade))
            .field("attempt", .int, .required)
            .field("started_at", .datetime, .required)
            .field("finished_at", .datetime, .required)
            .field("outcome", .string, .required)
            .field("status_code", .int)
            .field("error", .string)
            .create()
        try await database.schema("notification_actions")
            .id()
            .field("notification_id", .uuid, .required, .references("notifications", .id, onDelete: .cascade))
            .field("action_id", .string, .required)
            .field("created_at", .datetime, .required)
            .create()
    }

    func revert(on database: any Database) async throws {
        try await database.schema("notification_actions").delete()
        try await database.schema("delivery_attempts").delete()
        try await database.schema("deliveries").delete()
    }
}

/// The queue claims each channel kind's due deliveries in the order they fell due: an index by
/// status, channel and due time gives them in that order without reading the rest of the queue.
/// Expired leases are found by the status and lease alone: only deliveries under way have one.
struct AddDeliveryClaimIndexes: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.sql.raw("CREATE INDEX deliveries_claim ON deliveries (status, channel, next_attempt_at)")
            .run()
        try await database.sql.raw("CREATE INDEX deliveries_lease ON deliveries (status, lease_expires_at)").run()
    }

    func revert(on database: any Database) async throws {
        try await database.sql.raw("DROP INDEX deliveries_lease").run()
        try await database.sql.raw("DROP INDEX deliveries_claim").run()
    }
}

/// The console's "sent in the last hour" counts inbox notifications too, which have no
/// delivery row: by when they became available.
struct AddNotificationsAvailableIndex: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.sql.raw("CREATE INDEX notifications_available ON notifications (available_at)").run()
    }

    func revert(on database: any Database) async throws {
        try await database.sql.raw("DROP INDEX notifications_available").run()
    }
}

/// Events stored by `belfry send` say so: the instance that starts their fan-out counts them as
/// accepted, as the one that answered counts an API's.
struct AddEventSource: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.schema("events").field("source", .string).update()
    }

    func revert(on database: any Database) async throws {
        try await database.schema("events").deleteField("source").update()
    }
}

/// An event's own `push.content_available`: a background push instead of an alert.
struct AddEventBackgroundPush: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.schema("events").field("content_available", .bool).update()
    }

    func revert(on database: any Database) async throws {
        try await database.schema("events").deleteField("content_available").update()
    }
}

/// Status events for the workspace's `webhooks`, each queued in the transaction of the change
/// it reports and sent from here (an outbox of its own: not every event has a notification).
struct AddStatusEvents: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.schema("status_events")
            .id()
            .field("endpoint", .string, .required)
            .field("type", .string, .required)
            .field("body", .string, .required)
            // Whom it is about, so that erasing a user erases their events too.
            .field("user_external_id", .string)
            .field("status", .string, .required)
            .field("attempts", .int, .required)
            .field("next_attempt_at", .datetime, .required)
            .field("lease_expires_at", .datetime)
            .field("worker", .string)
            .field("last_error", .string)
            .field("last_status", .int)
            .field("created_at", .datetime, .required)
            .field("updated_at", .datetime, .required)
            .create()
        try await database.sql.raw("CREATE INDEX status_events_due ON status_events (status, next_attempt_at)").run()
        try await database.sql.raw("CREATE INDEX status_events_lease ON status_events (status, lease_expires_at)")
            .run()
        try await database.sql.raw("CREATE INDEX status_events_user ON status_events (user_external_id)").run()
    }

    func revert(on database: any Database) async throws {
        try await database.schema("status_events").delete()
    }
}

/// Content from templates: an event's text in each language its category has templates for,
/// and on each notification the language it was rendered in and the shorter push text.
struct AddLocalizedContent: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.schema("events").field("content_variants", .string).update()
        // One column at a time: SQLite adds one per statement.
        try await database.schema("notifications").field("locale", .string).update()
        try await database.schema("notifications").field("push_title", .string).update()
        try await database.schema("notifications").field("push_body", .string).update()
    }

    func revert(on database: any Database) async throws {
        try await database.schema("notifications").deleteField("push_body").update()
        try await database.schema("notifications").deleteField("push_title").update()
        try await database.schema("notifications").deleteField("locale").update()
        try await database.schema("events").deleteField("content_variants").update()
    }
}

/// The status events' claim indexes hold only the rows they find: queued ones by when they are
/// due, running ones by when their lease ends. An event is written in the transaction of the
/// change it reports, beside the deliveries: one index entry for it instead of two, and none
/// left once it is sent.
struct PartialStatusEventIndexes: AsyncMigration {
    func prepare(on database: any Database) async throws {
        let sql = database.sql
        try await sql.raw("DROP INDEX status_events_due").run()
        try await sql.raw("DROP INDEX status_events_lease").run()
        try await sql.raw(
            "CREATE INDEX status_events_due ON status_events (next_attempt_at) WHERE status = 'queued'"
        ).run()
        try await sql.raw(
            "CREATE INDEX status_events_lease ON status_events (lease_expires_at) WHERE status = 'running'"
        ).run()
    }

    func revert(on database: any Database) async throws {
        let sql = database.sql
        try await sql.raw("DROP INDEX status_events_due").run()
        try await sql.raw("DROP INDEX status_events_lease").run()
        try await sql.raw("CREATE INDEX status_events_due ON status_events (status, next_attempt_at)").run()
        try await sql.raw("CREATE INDEX status_events_lease ON status_events (status, lease_expires_at)").run()
    }
}

/// A notification due in the inbox later (a calendar schedule) carries the time to announce it
/// to the user's streams, instead of a delivery row that went round the queue.
struct AddInboxAnnouncements: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.schema("notifications").field("announce_at", .datetime).update()
        try await database.sql.raw(
            "CREATE INDEX notifications_announce ON notifications (announce_at) WHERE announce_at IS NOT NULL"
        ).run()
    }

    func revert(on database: any Database) async throws {
        try await database.sql.raw("DROP INDEX notifications_announce").run()
        try await database.schema("notifications").deleteField("announce_at").update()
    }
}

/// A status event row may bundle many reports of one type to one endpoint
/// (``StatusEventReports``): how many it holds.
struct AddStatusEventBundles: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.schema("status_events").field("reports", .int, .required, .sql(.default(1))).update()
    }

    func revert(on database: any Database) async throws {
        try await database.schema("status_events").deleteField("reports").update()
    }
}

/// The deliveries' claim indexes hold only the rows they find: queued ones by channel and due
/// time, running ones by when their lease ends. A delivery's status changes twice (claimed,
/// then its result), and each change moved its entry in both indexes; sent deliveries, most of
/// the table, were in both for good.
struct PartialDeliveryClaimIndexes: AsyncMigration {
    func prepare(on database: any Database) async throws {
        let sql = database.sql
        try await sql.raw("DROP INDEX deliveries_claim").run()
        try await sql.raw("DROP INDEX deliveries_lease").run()
        try await sql.raw(
            "CREATE INDEX deliveries_claim ON deliveries (channel, next_attempt_at) WHERE status = 'queued'"
        ).run()
        try await sql.raw(
            "CREATE INDEX deliveries_lease ON deliveries (lease_expires_at) WHERE status = 'running'"
        ).run()
    }

    func revert(on database: any Database) async throws {
        try await AddDeliveryClaimIndexes().revert(on: database)
        try await AddDeliveryClaimIndexes().prepare(on: database)
    }
}

/// On PostgreSQL, the events fan-out has yet to finish, by due time. An event's state is part of
/// `events_due`, so each change of state adds an entry there and leaves the old one until a
/// vacuum: under a stream of events the due-event read walked every event fanned out since the
/// last vacuum (a bitmap scan marks nothing dead), 15 ms a read after 30 000 events. Here the
/// read stops at its limit, and an index scan marks the entries of rows gone for the next. (On
/// SQLite an update moves the entry at once.) The states are written as `Fanout.open` writes
/// them, literals, or PostgreSQL cannot tell that the read's rows are the index's.
struct PartialOpenEventsIndex: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.onPostgres(
            "CREATE INDEX events_open ON events (not_before) WHERE state IN ('pending', 'running')")
    }

    func revert(on database: any Database) async throws {
        try await database.onPostgres("DROP INDEX events_open")
    }
}

/// An event fanned out in one batch keeps the rule's skips in its own row (see `EventSkips`).
struct AddEventSkipsColumn: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.schema("events").field("skips", .string).update()
    }

    func revert(on database: any Database) async throws {
        try await database.schema("events").deleteField("skips").update()
    }
}

/// PostgreSQL checks each inserted row's foreign keys, a lookup and a row lock apiece: for the
/// hottest rows (a notification's event, a delivery's notification, an attempt's delivery) that
/// was a tenth of the server's work during fan-out and delivery. Events are never deleted, and
/// what deletes notifications or deliveries (erasure, retention) deletes their deliveries and
/// attempts itself, so these three go. A notification's user kept its key here, as what stops a
/// fan-out racing an erasure from writing for a user already gone (until
/// `DropNotificationUserForeignKey` held the users another way). SQLite keeps all of them
/// (its checks cost little, and dropping one means rebuilding the table).
struct DropHotForeignKeys: DroppingForeignKeys {
    static let dropped: [ForeignKey] = [
        ("delivery_attempts", "delivery_attempts_delivery_id_fkey", "delivery_id", "deliveries"),
        ("deliveries", "deliveries_notification_id_fkey", "notification_id", "notifications"),
        ("notifications", "notifications_event_id_fkey", "event_id", "events"),
    ]
}

/// A table's foreign key: its constraint's name, its column, the table it refers to.
typealias ForeignKey = (table: String, constraint: String, column: String, parent: String)

/// A migration that drops foreign keys on PostgreSQL, and adds them back when reverted,
/// deleting along with the rows they refer to.
protocol DroppingForeignKeys: AsyncMigration {
    static var dropped: [ForeignKey] { get }
}

extension DroppingForeignKeys {
    func prepare(on database: any Database) async throws {
        for key in Self.dropped {
            try await database.onPostgres(
                "ALTER TABLE \(unsafeRaw: key.table) DROP CONSTRAINT IF EXISTS \(unsafeRaw: key.constraint)")
        }
    }

    func revert(on database: any Database) async throws {
        for key in Self.dropped {
            try await database.onPostgres(
                """
                ALTER TABLE \(unsafeRaw: key.table) ADD CONSTRAINT \(unsafeRaw: key.constraint) \
                FOREIGN KEY (\(unsafeRaw: key.column)) REFERENCES \(unsafeRaw: key.parent) (id) ON DELETE CASCADE
                """)
        }
    }
}

/// On PostgreSQL, an event's recipients no longer check their event's key. Intake writes them in
/// the statement that writes the event, and events are never deleted, so the check found the
/// event every time, at the cost of a trigger, a lookup and a lock on the event's row for each
/// recipient (`SELECT … FROM ONLY events … FOR KEY SHARE`: 2.5–3.5 µs of execution alone, once
/// an event in the intake benchmark). Erasure deletes a user's recipient rows itself.
struct DropEventRecipientsForeignKey: DroppingForeignKeys {
    static let dropped: [ForeignKey] = [
        ("event_recipients", "event_recipients_event_id_fkey", "event_id", "events")
    ]
}

/// On PostgreSQL, a notification's user is held by the statement that writes the notifications
/// (`NotificationRows.holdUsers`), not by a foreign key. The key checked each row on its own: a
/// trigger, a lookup and a lock for every notification. Copying 20 000 notifications of 20 000
/// users in psql cost 9.3 µs a row with the key, 6.3 µs with the users held in one statement
/// before. The hold takes the same lock the key took: an erasure's delete of the user waits for
/// a fan-out writing for them (and then deletes what it wrote), and a fan-out after the
/// erasure finds the user gone.
struct DropNotificationUserForeignKey: DroppingForeignKeys {
    static let dropped: [ForeignKey] = [
        ("notifications", "notifications_user_id_fkey", "user_id", "users")
    ]
}

/// Indexes on the keys that lead from a notification to its deliveries and answers, and from a
/// delivery to its attempts: what inbox retention and erasure delete by. Without them each
/// such delete read the whole child table, and on SQLite once for every parent row, as its
/// foreign keys' cascade looks for children: purging 1 000 notifications of a database holding
/// 20 000 deliveries took 8.1 s of the one writer (3.2 s their deliveries, 4.8 s the
/// notifications), growing with the square of the tables (BENCHMARKS.md).
struct IndexChildKeys: AsyncMigration {
    static let indexes: [(name: String, table: String, column: String)] = [
        ("deliveries_notification", "deliveries", "notification_id"),
        ("delivery_attempts_delivery", "delivery_attempts", "delivery_id"),
        ("notification_actions_notification", "notification_actions", "notification_id"),
    ]

    func prepare(on database: any Database) async throws {
        for index in Self.indexes {
            try await database.sql.raw(
                "CREATE INDEX \(unsafeRaw: index.name) ON \(unsafeRaw: index.table) (\(unsafeRaw: index.column))"
            ).run()
        }
    }

    func revert(on database: any Database) async throws {
        for index in Self.indexes {
            try await database.sql.raw("DROP INDEX \(unsafeRaw: index.name)").run()
        }
    }
}

/// On PostgreSQL, `deliveries_due` holds only deliveries not sent. Every change of a
/// delivery's status writes a new entry in each of its indexes, and the last change, to sent,
/// put one there that no read asks for: the outbox's counts (the console, `/metrics`) ask for
/// queued, running, failed and dead ones, which PostgreSQL finds in the smaller index. SQLite
/// would not use it for those counts (its planner proves no `IN` implies `<>`), and an update
/// there replaces its entry in place, so SQLite keeps the whole index.
struct PartialDeliveriesDueIndex: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.onPostgres(
            "DROP INDEX deliveries_due",
            "CREATE INDEX deliveries_due ON deliveries (status, next_attempt_at) WHERE status <> 'sent'")
    }

    func revert(on database: any Database) async throws {
        try await database.onPostgres(
            "DROP INDEX deliveries_due", "CREATE INDEX deliveries_due ON deliveries (status, next_attempt_at)")
    }
}

/// `notifications_unread`: the notifications the bell's counts read (in the inbox, not archived,
/// unread or unseen), with the columns those counts sum. A push's badge is counted for every
/// push, and read each of the user's notifications and its table row: 0.48 ms for a user with
/// 5 000 read ones, paid by each push to that user. The counts now read only this index, and
/// only what the user has not read or seen. The predicate's text is the one the counts' query
/// writes (`InboxStore.counted(postgres:table:)`): SQLite's planner uses a partial index only
/// for a query whose terms include the index's own.
struct IndexUnreadNotifications: AsyncMigration {
    func prepare(on database: any Database) async throws {
        let inInbox = database.sql.dialect.name == "postgresql" ? "in_inbox" : "in_inbox = 1"
        try await database.sql.raw(
            """
            CREATE INDEX notifications_unread ON notifications (user_id, available_at, read_at, seen_at)
            WHERE \(unsafeRaw: inInbox) AND archived_at IS NULL AND (read_at IS NULL OR seen_at IS NULL)
            """
        ).run()
    }

    func revert(on database: any Database) async throws {
        try await database.sql.raw("DROP INDEX notifications_unread").run()
    }
}

extension Database {
    /// Runs `statements` in turn on PostgreSQL, and nothing on SQLite: a migration for what only
    /// PostgreSQL's planner or storage needs.
    func onPostgres(_ statements: SQLQueryString...) async throws {
        guard sql.dialect.name == "postgresql" else { return }
        for statement in statements { try await sql.raw(statement).run() }
    }
}
