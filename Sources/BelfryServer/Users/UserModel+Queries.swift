import BelfryCore
import Fluent
import Foundation

extension UserModel {
    /// The user with this external id, or a 404.
    static func find(externalID: String, on database: any Database) async throws -> UserModel {
        guard let user = try await UserModel.query(on: database).filter(\.$externalID == externalID).first() else {
            throw BelfryError(.userNotFound, "no user \"\(externalID)\"")
        }
        return user
    }

    func tenantIDs(on database: any Database) async throws -> [String] {
        try await UserTenantModel.query(on: database)
            .filter(\.$user.$id == requireID())
            .sort(\.$tenant)
            .all()
            .map(\.tenant)
    }

    func record(tenants: [String]) -> UserRecord {
        UserRecord(
            id: externalID, email: email, timeZone: timeZone, locale: locale, tenants: tenants, createdAt: createdAt,
            updatedAt: updatedAt)
    }
}
