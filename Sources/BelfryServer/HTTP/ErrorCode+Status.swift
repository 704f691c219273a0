import BelfryCore
import Vapor

/// The HTTP status each error code answers with: decided here, at the edge, once.
extension ErrorCode {
    var status: HTTPResponseStatus {
        switch self {
        case .badRequest: .badRequest
        case .unauthorized, .invalidToken, .tokenExpired, .notSignedIn, .invalidLink, .linkExpired: .unauthorized
        case .forbidden, .csrfFailed, .topicNotFollowable: .forbidden
        case .notFound, .tenantNotFound, .categoryNotFound, .channelNotFound, .channelNotInCategory, .eventNotFound,
            .userNotFound, .deviceNotFound, .notificationNotFound, .actionNotFound, .quietHoursNotSet, .webPushOff:
            .notFound
        case .methodNotAllowed: .methodNotAllowed
        case .notEditable: .conflict
        case .preconditionFailed: .preconditionFailed
        case .payloadTooLarge: .payloadTooLarge
        case .requestTimeout: .requestTimeout
        case .unsupportedMediaType: .unsupportedMediaType
        case .invalidRequest, .idempotencyKeyReused, .deviceLimitReached: .unprocessableEntity
        case .rateLimited: .tooManyRequests
        case .internalError: .internalServerError
        case .notReady, .databaseUnavailable, .storageUnavailable: .serviceUnavailable
        }
    }
}
