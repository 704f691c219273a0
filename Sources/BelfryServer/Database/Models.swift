import BelfryCore
import Fluent
import Foundation

// Fluent models stay inside the server: routes map them to wire types before answering.
// They are `@unchecked Sendable` because Fluent's property wrappers are not Sendable;
// each instance is created and used within one request or job.

final class UserModel: Model, @unchecked Sendable {
    static let schema = "users"

    @ID(key: .id) var id: UUID?
    @Field(key: "external_id") var externalID: String
    @OptionalField(key: "email") var email: String?
    @OptionalField(key: "time_zone") var timeZone: String?
    @OptionalField(key: "locale") var locale: String?
    @OptionalField(key: "quiet_start") var quietStart: String?
    @OptionalField(key: "quiet_end") var quietEnd: String?
    @OptionalField(key: "quiet_time_zone") var quietTimeZone: String?
    @Field(key: "created_at") var createdAt: Date
    @Field(key: "updated_at") var updatedAt: Date
    /// Raised by "sign out everywhere": browser sessions and page tokens carrying an older one stop working.
    @Field(key: "session_epoch") var sessionEpoch: Int
    @Children(for: \.$user) var tenants: [UserTenantModel]

    /// The user's quiet hours, if set.
    var quietHours: QuietHours? {
        guard let quietStart, let quietEnd else { return nil }
        return QuietHours(start: quietStart, end: quietEnd, timeZone: quietTimeZone)
    }

    init() {}

    init(externalID: String, now: Date) {
        self.externalID = externalID
        self.createdAt = now
        self.updatedAt = now
        self.sessionEpoch = 0
    }
}

final class UserTenantModel: Model, @unchecked Sendable {
    static let schema = "user_tenants"

    @ID(key: .id) var id: UUID?
    @Parent(key: "user_id") var user: UserModel
    @Field(key: "tenant") var tenant: String

    init() {}

    init(userID: UUID, tenant: String) {
        self.$user.id = userID
        self.tenant = tenant
    }
}

/// One user's selections at one scope (their defaults, or one tenant), with a version for optimistic concurrency.
final class PreferenceSetModel: Model, @unchecked Sendable {
    static let schema = "preference_sets"

    @ID(key: .id) var id: UUID?
    @Parent(key: "user_id") var user: UserModel
    @Field(key: "scope") var scope: String
    @Field(key: "version") var version: Int
    /// The `PreferenceSelections` as JSON: small, always read and written whole.
    @Field(key: "selections") var selections: String
    @Field(key: "updated_at") var updatedAt: Date

    init() {}
}

/// Secrets Belfry creates for itself on first start (the development API key's hash, the token secret).
final class ServerSecretModel: Model, @unchecked Sendable {
    static let schema = "server_secrets"

    @ID(key: .id) var id: UUID?
    @Field(key: "name") var name: String
    @Field(key: "value") var value: String
    @Field(key: "created_at") var createdAt: Date

    init() {}

    init(name: String, value: String, now: Date) {
        self.name = name
        self.value = value
        self.createdAt = now
    }
}
