import Foundation

/// One line of the audit log (`GET /v1/audit`): who did what, to what, when.
public struct AuditEntry: Codable, Hashable, Sendable {
    public var id: UUID
    public var at: Date
    /// Who: `key:<name>` (an API key), `console:<key name>`, `cli`, `user:<id>`, `server`, or
    /// `address:<ip>` for a refused sign-in.
    public var actor: String
    /// What, such as `key.created`, `user.erased`, `console.sign_in_failed`.
    public var action: String
    /// To what: a key's name, a user's id, an event's id.
    public var subject: String?
    /// More, in words.
    public var detail: String?

    public init(
        id: UUID, at: Date, actor: String, action: String, subject: String? = nil, detail: String? = nil
    ) {
        self.id = id
        self.at = at
        self.actor = actor
        self.action = action
        self.subject = subject
        self.detail = detail
    }
}

/// `GET /v1/audit`: entries newest first, and the cursor for older ones.
public struct AuditPage: Codable, Hashable, Sendable {
    public var entries: [AuditEntry]
    /// Pass as `before` for the next page; absent on the last page.
    public var nextBefore: String?

    public init(entries: [AuditEntry], nextBefore: String?) {
        self.entries = entries
        self.nextBefore = nextBefore
    }

    enum CodingKeys: String, CodingKey {
        case entries
        case nextBefore = "next_before"
    }
}
