import BelfryCore
import BelfryHTTP2
import BelfryWebPush
import Foundation

/// One app of the workspace file's `apps`: a platform and its credentials, read from the
/// files the entry names. The `BELFRY_APNS_*`, `BELFRY_FCM_*` and VAPID settings are each
/// platform's implicit app, which has no id.
public struct PushApp: Sendable, Hashable {
    public enum Credentials: Sendable, Hashable {
        /// `environment`: what a device of the app that does not say uses.
        case apns(ServerConfiguration.APNs, environment: APNsEnvironment?)
        case fcm(ServerConfiguration.FCM)
        case webPush(subject: String, keyPEM: String)
    }

    public var id: String
    public var credentials: Credentials

    public init(id: String, credentials: Credentials) {
        self.id = id
        self.credentials = credentials
    }

    public var platform: DevicePlatform {
        switch credentials {
        case .apns: .apns
        case .fcm: .fcm
        case .webPush: .webPush
        }
    }
}

extension PushApp {
    /// The keys an entry may have, by platform.
    static let keys: [DevicePlatform: Set<String>] = [
        .apns: ["id", "platform", "key_path", "key_id", "team_id", "topic", "environment", "url"],
        .fcm: ["id", "platform", "service_account_path", "url"],
        .webPush: ["id", "platform", "vapid_private_key_path", "subject"],
    ]

    /// Reads the file's `apps`, each problem recorded at its path (`apps[1].key_path`).
    /// `apnsURL` and `fcmURL` are the server's hosts for APNs and FCM, for the apps that do not
    /// name their own.
    static func read(
        _ node: ConfigNode, readFile: (String) throws -> Data, apnsURL: String?, fcmURL: String?
    ) -> [PushApp] {
        var apps: [PushApp] = []
        var seen: Set<String> = []
        for entry in node.list() {
            guard let platform = entry["platform"].choice(DevicePlatform.self) else {
                if !entry["platform"].isPresent { entry["platform"].fail("is required") }
                continue
            }
            guard entry.object(keys: keys[platform] ?? []), let id = entry["id"].identifier() else { continue }
            guard seen.insert(id).inserted else {
                entry["id"].fail("another app already has the id \"\(id)\"")
                continue
            }
            if let credentials = credentials(of: entry, platform, readFile, apnsURL: apnsURL, fcmURL: fcmURL) {
                apps.append(PushApp(id: id, credentials: credentials))
            }
        }
        return apps
    }

    private static func credentials(
        of entry: ConfigNode, _ platform: DevicePlatform, _ readFile: (String) throws -> Data, apnsURL: String?,
        fcmURL: String?
    ) -> Credentials? {
        /// A required string read and checked by `parse`; a problem is recorded at its path.
        func field<Value>(_ key: String, _ parse: (String) -> Result<Value, ConfigurationProblem>) -> Value? {
            guard let text = entry[key].string(required: true) else { return nil }
            switch parse(text) {
            case .success(let value): return value
            case .failure(let problem):
                entry[key].fail(problem.message)
                return nil
            }
        }
        let url = entry["url"].string().flatMap { text in
            (try? HTTP2Client.Origin(text)) != nil ? text : nil
        }
        if entry["url"].isPresent, url == nil { entry["url"].fail("expected an https URL without a query") }
        switch platform {
        case .apns:
            let key = field("key_path") { ServerConfiguration.readAPNsKey($0, readFile: readFile) }
            let keyID = field("key_id") { ServerConfiguration.identifier($0, length: 10) }
            let teamID = field("team_id") { ServerConfiguration.identifier($0, length: 10) }
            let topic = field("topic") { .success($0) }
            let environment = entry["environment"].choice(APNsEnvironment.self)
            guard let key, let keyID, let teamID, let topic else { return nil }
            return .apns(
                .init(keyPEM: key, keyID: keyID, teamID: teamID, topic: topic, url: url ?? apnsURL),
                environment: environment)
        case .fcm:
            let account = field("service_account_path") {
                ServerConfiguration.readServiceAccount($0, readFile: readFile)
            }
            guard let account else { return nil }
            return .fcm(.init(serviceAccountJSON: account, url: url ?? fcmURL ?? ServerConfiguration.FCM.googleURL))
        case .webPush:
            let key = field("vapid_private_key_path") { ServerConfiguration.readVAPIDKey($0, readFile: readFile) }
            let subject = field("subject") { text -> Result<String, ConfigurationProblem> in
                VAPIDKey.isValidSubject(text)
                    ? .success(text) : .failure(.init("expected a mailto: address or an https: URL, got \"\(text)\""))
            }
            guard let key, let subject else { return nil }
            return .webPush(subject: subject, keyPEM: key)
        }
    }

    /// Records a problem for each app a tenant names that `apps` does not define.
    static func checkTenants(_ tenants: ConfigNode, apps: [PushApp]) {
        let ids = apps.map(\.id)
        for tenant in tenants.elements {
            for app in tenant["apps"].elements {
                guard case .some(.string(let name)) = app.value, !ids.contains(name) else { continue }
                app.fail(
                    "\"\(name)\" is not one of the apps"
                        + (ids.isEmpty ? " (the file defines none)" : " (\(ids.joined(separator: ", ")))"))
            }
        }
    }
}

extension ServerConfiguration {
    /// Whether the server settings configure the platform's implicit app (`BELFRY_APNS_*`,
    /// `BELFRY_FCM_*`, `BELFRY_VAPID_SUBJECT`).
    func hasImplicitApp(_ platform: DevicePlatform) -> Bool {
        switch platform {
        case .apns: apns != nil
        case .fcm: fcm != nil
        case .webPush: vapidSubject != nil
        }
    }
}
