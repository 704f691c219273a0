/// The body of `POST /v1/me/preferences/changes`: changes applied to several tenants
/// (and optionally the user's defaults) in one atomic request.
public struct PreferenceChangesRequest: Codable, Hashable, Sendable {
    /// The tenants to change. With neither tenants nor `defaults`, the workspace default tenant.
    public var tenants: [String]?
    /// Whether to change the user's defaults too, which apply to every tenant without a value of its own.
    public var defaults: Bool?
    public var changes: [PreferenceChange]
    /// Optional ETags, by tenant id (`"defaults"` for the defaults): a stale one refuses the whole request.
    public var ifMatch: [String: String]?

    public init(
        tenants: [String]? = nil, defaults: Bool? = nil, changes: [PreferenceChange], ifMatch: [String: String]? = nil
    ) {
        self.tenants = tenants
        self.defaults = defaults
        self.changes = changes
        self.ifMatch = ifMatch
    }

    enum CodingKeys: String, CodingKey, CaseIterable {
        case tenants, defaults, changes
        case ifMatch = "if_match"
    }
}

extension PreferenceChangesRequest: RequestFields {
    public static var fields: Set<String> { CodingKeys.names }
    /// Each change of the list.
    public static var nestedFields: [String: Set<String>] { ["changes": PreferenceChange.fields] }
}

/// The answer to a preference change: the new preferences of each scope changed.
public struct PreferenceChangesResponse: Codable, Hashable, Sendable {
    public struct Result: Codable, Hashable, Sendable {
        /// The tenant changed, or `nil` for the user's defaults.
        public var tenant: String?
        /// The new version, to send back as `If-Match`.
        public var etag: String
        public var preferences: PreferenceData

        public init(tenant: String?, etag: String, preferences: PreferenceData) {
            self.tenant = tenant
            self.etag = etag
            self.preferences = preferences
        }
    }

    public var results: [Result]

    public init(results: [Result]) {
        self.results = results
    }
}
