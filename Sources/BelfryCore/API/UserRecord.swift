import Foundation

/// A user (subscriber) as the server API shows it.
public struct UserRecord: Codable, Hashable, Sendable {
    /// The external id the app knows the user by.
    public var id: String
    public var email: String?
    public var timeZone: String?
    public var locale: String?
    /// The tenants (sites) the user belongs to.
    public var tenants: [String]
    public var createdAt: Date
    public var updatedAt: Date

    public init(
        id: String, email: String?, timeZone: String?, locale: String?, tenants: [String], createdAt: Date,
        updatedAt: Date
    ) {
        self.id = id
        self.email = email
        self.timeZone = timeZone
        self.locale = locale
        self.tenants = tenants
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }

    enum CodingKeys: String, CodingKey {
        case id, email, locale, tenants
        case timeZone = "time_zone"
        case createdAt = "created_at"
        case updatedAt = "updated_at"
    }
}

/// The body of `PUT /v1/users/{user_id}`. Absent fields keep their value.
public struct UserUpsert: Codable, Hashable, Sendable {
    public var email: String?
    public var timeZone: String?
    public var locale: String?
    /// When given, replaces the user's tenants.
    public var tenants: [String]?

    public init(email: String? = nil, timeZone: String? = nil, locale: String? = nil, tenants: [String]? = nil) {
        self.email = email
        self.timeZone = timeZone
        self.locale = locale
        self.tenants = tenants
    }

    enum CodingKeys: String, CodingKey, CaseIterable {
        case email, locale, tenants
        case timeZone = "time_zone"
    }
}

/// A minted user token.
public struct TokenGrant: Codable, Hashable, Sendable {
    public var token: String
    public var expiresAt: Date

    public init(token: String, expiresAt: Date) {
        self.token = token
        self.expiresAt = expiresAt
    }

    enum CodingKeys: String, CodingKey {
        case token
        case expiresAt = "expires_at"
    }
}

extension UserUpsert: RequestFields {
    public static var fields: Set<String> { CodingKeys.names }
}
