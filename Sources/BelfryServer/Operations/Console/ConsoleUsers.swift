import BelfryCore
import Fluent
import Foundation
import SQLKit

/// What the console shows of one user: who they are, their devices, their preferences per
/// site, and their messages (deliveries) with every attempt, newest first, a page at a time.
extension ConsoleData {
    static let messagesShown = 50

    struct UserDetail: Sendable {
        var user: UserRecord
        var devices: [DeviceRecord]
        /// Per tenant: the categories turned off, and the channels set to required.
        var preferences: [(tenant: String, off: [String], required: [String])]
        var messages: [MessageRecord]
        /// The last message's delivery id, when there may be older ones.
        var older: UUID?
        var inboxCount: Int
    }

    func user(
        _ externalID: String, before: UUID?, preferences store: PreferenceStore, devices: DeviceStore,
        on db: any Database
    ) async throws -> UserDetail? {
        guard let model = try await UserModel.query(on: db).filter(\.$externalID == externalID).first() else {
            return nil
        }
        let id = try model.requireID()
        let tenants = try await model.tenantIDs(on: db)
        var preferences: [(String, [String], [String])] = []
        for tenant in tenants.isEmpty ? [store.workspace.defaultTenant] : tenants {
            let data = try await store.view(userID: id, scope: .tenant(tenant), on: db).data
            let off = (data.sections ?? []).flatMap { $0.subcategories ?? [] }.filter { $0.preference == .optOut }
                .map(\.category)
            let required = (data.channelPreferences ?? []).filter(\.isRestricted).map(\.channel)
            preferences.append((tenant, off, required))
        }
        let messages = try await MessageLog().page(
            MessageLog.Filter(user: id), after: before, limit: Self.messagesShown, on: db)
        let inbox =
            try await db.sql.select().column(SQLFunction("COUNT", args: SQLLiteral.all), as: "n").from(
                Tables.notifications
            )
            .where("user_id", .equal, id).where("in_inbox", .equal, true).first()?.decode(column: "n", as: Int.self)
            ?? 0
        return UserDetail(
            user: model.record(tenants: tenants), devices: try await devices.devices(of: id, on: db).map(\.record),
            preferences: preferences, messages: messages,
            older: messages.count == Self.messagesShown ? messages.last?.id : nil,
            inboxCount: inbox)
    }
}
