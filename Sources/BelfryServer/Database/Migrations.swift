import Fluent

enum BelfryMigrations {
    /// Every migration, in order. New ones go at the end; shipped ones never change.
    static let all: [any Migration] = [
        CreateUsers(),
        CreateUserTenants(),
        CreatePreferenceSets(),
        CreateServerSecrets(),
        CreateEvents(),
        CreateNotifications(),
        CreateDeliveries(),
        AddQuietHours(),
        CreateDevices(),
        AddEventPushOptions(),
        CreateTopics(),
        AddDeliveryPolicies(),
        AddBatches(),
        AddConsoleHistory(),
        AddDeliveryClaimIndexes(),
        AddSessionEpochs(),
        CreateAPIKeysAndAuditLog(),
        AddDeviceApps(),
        AddNotificationsAvailableIndex(),
        AddEventSource(),
        AddEventBackgroundPush(),
        AddStatusEvents(),
        AddLocalizedContent(),
        PartialStatusEventIndexes(),
        AddInboxAnnouncements(),
        AddStatusEventBundles(),
        PartialDeliveryClaimIndexes(),
        PartialOpenEventsIndex(),
        AddEventSkipsColumn(),
        DropHotForeignKeys(),
        PartialDeliveriesDueIndex(),
        DropEventRecipientsForeignKey(),
        DropNotificationUserForeignKey(),
        IndexChildKeys(),
        IndexUnreadNotifications(),
    ]
}

struct CreateUsers: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.schema(UserModel.schema)
            .id()
            .field("external_id", .string, .required)
            .field("email", .string)
            .field("time_zone", .string)
            .field("locale", .string)
            .field("created_at", .datetime, .required)
            .field("updated_at", .datetime, .required)
            .unique(on: "external_id")
            .create()
    }

    func revert(on database: any Database) async throws {
        try await database.schema(UserModel.schema).delete()
    }
}

struct CreateUserTenants: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.schema(UserTenantModel.schema)
            .id()
            .field("user_id", .uuid, .required, .references(UserModel.schema, .id, onDelete: .cascade))
            .field("tenant", .string, .required)
            .unique(on: "user_id", "tenant")
            .create()
    }

    func revert(on database: any Database) async throws {
        try await database.schema(UserTenantModel.schema).delete()
    }
}

struct CreatePreferenceSets: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.schema(PreferenceSetModel.schema)
            .id()
            .field("user_id", .uuid, .required, .references(UserModel.schema, .id, onDelete: .cascade))
            .field("scope", .string, .required)
            .field("version", .int, .required)
            .field("selections", .string, .required)
            .field("updated_at", .datetime, .required)
            .unique(on: "user_id", "scope")
            .create()
    }

    func revert(on database: any Database) async throws {
        try await database.schema(PreferenceSetModel.schema).delete()
    }
}

struct CreateServerSecrets: AsyncMigration {
    func prepare(on database: any Database) async throws {
        try await database.schema(ServerSecretModel.schema)
            .id()
            .field("name", .string, .required)
            .field("value", .string, .required)
            .field("created_at", .datetime, .required)
            .unique(on: "name")
            .create()
    }

    func revert(on database: any Database) async throws {
        try await database.schema(ServerSecretModel.schema).delete()
    }
}

struct AddQuietHours: AsyncMigration {
    func prepare(on database: any Database) async throws {
        // One column per statement: SQLite's ALTER TABLE adds a single column.
        for column in ["quiet_start", "quiet_end", "quiet_time_zone"] {
            try await database.schema(UserModel.schema).field(.string(column), .string).update()
        }
    }

    func revert(on database: any Database) async throws {
        for column in ["quiet_start", "quiet_end", "quiet_time_zone"] {
            try await database.schema(UserModel.schema).deleteField(.string(column)).update()
        }
    }
}
