/// Why APNs refused a request: the `reason` of its JSON answer, as Apple documents them
/// ("Handling notification responses from APNs"). A reason Apple adds later is `unknown`,
/// kept verbatim.
public enum APNsReason: Sendable, Hashable, CustomStringConvertible {
    case badCollapseID, badDeviceToken, badExpirationDate, badMessageID, badPriority, badTopic
    case deviceTokenNotForTopic, duplicateHeaders, idleTimeout, invalidPushType, missingDeviceToken
    case missingTopic, payloadEmpty, topicDisallowed, badCertificate, badCertificateEnvironment
    case expiredProviderToken, forbidden, invalidProviderToken, missingProviderToken
    case unrelatedKeyIDInToken, badEnvironmentKeyInToken, badPath, methodNotAllowed, expiredToken
    case unregistered, payloadTooLarge, tooManyProviderTokenUpdates, tooManyRequests
    case internalServerError, serviceUnavailable, shutdown
    case unknown(String)

    private static let known: [(APNsReason, String)] = [
        (.badCollapseID, "BadCollapseId"), (.badDeviceToken, "BadDeviceToken"),
        (.badExpirationDate, "BadExpirationDate"), (.badMessageID, "BadMessageId"), (.badPriority, "BadPriority"),
        (.badTopic, "BadTopic"), (.deviceTokenNotForTopic, "DeviceTokenNotForTopic"),
        (.duplicateHeaders, "DuplicateHeaders"), (.idleTimeout, "IdleTimeout"), (.invalidPushType, "InvalidPushType"),
        (.missingDeviceToken, "MissingDeviceToken"), (.missingTopic, "MissingTopic"), (.payloadEmpty, "PayloadEmpty"),
        (.topicDisallowed, "TopicDisallowed"), (.badCertificate, "BadCertificate"),
        (.badCertificateEnvironment, "BadCertificateEnvironment"), (.expiredProviderToken, "ExpiredProviderToken"),
        (.forbidden, "Forbidden"), (.invalidProviderToken, "InvalidProviderToken"),
        (.missingProviderToken, "MissingProviderToken"), (.unrelatedKeyIDInToken, "UnrelatedKeyIdInToken"),
        (.badEnvironmentKeyInToken, "BadEnvironmentKeyInToken"), (.badPath, "BadPath"),
        (.methodNotAllowed, "MethodNotAllowed"), (.expiredToken, "ExpiredToken"), (.unregistered, "Unregistered"),
        (.payloadTooLarge, "PayloadTooLarge"), (.tooManyProviderTokenUpdates, "TooManyProviderTokenUpdates"),
        (.tooManyRequests, "TooManyRequests"), (.internalServerError, "InternalServerError"),
        (.serviceUnavailable, "ServiceUnavailable"), (.shutdown, "Shutdown"),
    ]
    private static let byName = Dictionary(uniqueKeysWithValues: known.map { ($0.1, $0.0) })

    public init(_ text: String) {
        self = Self.byName[text] ?? .unknown(text)
    }

    /// Apple's spelling.
    public var description: String {
        if case .unknown(let text) = self { return text }
        return Self.known.first { $0.0 == self }?.1 ?? ""
    }

    /// The device token will never work again for this app: stop sending to it.
    public var retiresDevice: Bool {
        switch self {
        case .badDeviceToken, .deviceTokenNotForTopic, .unregistered, .expiredToken: true
        default: false
        }
    }

    /// The provider token was refused: a new one is signed and the request sent again.
    public var refusesProviderToken: Bool {
        switch self {
        case .expiredProviderToken, .invalidProviderToken, .missingProviderToken: true
        default: false
        }
    }
}
