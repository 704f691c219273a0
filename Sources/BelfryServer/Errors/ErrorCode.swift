import Vapor

/// Every code Belfry's errors carry, each spelled once, with the HTTP status it answers with.
/// Stores and services throw `BelfryError`s with a code; only the edge (the error middleware
/// and the web pages) turns the code into a status.
enum ErrorCode: String, Sendable, CaseIterable {
    case badRequest = "bad_request"
    case unauthorized
    case invalidToken = "invalid_token"
    case tokenExpired = "token_expired"
    case notSignedIn = "not_signed_in"
    case invalidLink = "invalid_link"
    case linkExpired = "link_expired"
    case forbidden
    case csrfFailed = "csrf_failed"
    case topicNotFollowable = "topic_not_followable"
    case notFound = "not_found"
    case tenantNotFound = "tenant_not_found"
    case categoryNotFound = "category_not_found"
    case channelNotFound = "channel_not_found"
    case channelNotInCategory = "channel_not_in_category"
    case eventNotFound = "event_not_found"
    case userNotFound = "user_not_found"
    case deviceNotFound = "device_not_found"
    case notificationNotFound = "notification_not_found"
    case actionNotFound = "action_not_found"
    case quietHoursNotSet = "quiet_hours_not_set"
    case webPushOff = "web_push_off"
    case methodNotAllowed = "method_not_allowed"
    case notEditable = "not_editable"
    case preconditionFailed = "precondition_failed"
    case payloadTooLarge = "payload_too_large"
    case requestTimeout = "request_timeout"
    case unsupportedMediaType = "unsupported_media_type"
    case invalidRequest = "invalid_request"
    case deviceLimitReached = "device_limit_reached"
    case rateLimited = "rate_limited"
    case idempotencyKeyReused = "idempotency_key_reused"
    case internalError = "internal_error"
    case notReady = "not_ready"
    case databaseUnavailable = "database_unavailable"
    case storageUnavailable = "storage_unavailable"

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
