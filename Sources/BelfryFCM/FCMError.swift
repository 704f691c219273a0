import Foundation

/// FCM's own reason for refusing a send: the `errorCode` of the `FcmError` in the answer's
/// `details` (FCM HTTP v1's `ErrorCode`). A code FCM adds later is `unknown`, kept verbatim.
public enum FCMErrorCode: Sendable, Hashable, CustomStringConvertible {
    case unspecified
    /// 400: the request was invalid (a malformed token, a message too big, a reserved data key).
    case invalidArgument
    /// 404: the token is no longer valid: the app was uninstalled, or its token rotated.
    case unregistered
    /// 403: the token belongs to another project's sender.
    case senderIDMismatch
    /// 429: the project's, the device's or the topic's quota is spent.
    case quotaExceeded
    /// 503: FCM is overloaded.
    case unavailable
    /// 500: FCM failed.
    case `internal`
    /// 401: FCM could not reach APNs or Web Push for the device with the project's credentials.
    case thirdPartyAuthError
    case unknown(String)

    private static let known: [(FCMErrorCode, String)] = [
        (.unspecified, "UNSPECIFIED_ERROR"), (.invalidArgument, "INVALID_ARGUMENT"), (.unregistered, "UNREGISTERED"),
        (.senderIDMismatch, "SENDER_ID_MISMATCH"), (.quotaExceeded, "QUOTA_EXCEEDED"), (.unavailable, "UNAVAILABLE"),
        (.internal, "INTERNAL"), (.thirdPartyAuthError, "THIRD_PARTY_AUTH_ERROR"),
    ]

    public init(_ text: String) {
        self = Self.known.first { $0.1 == text }?.0 ?? .unknown(text)
    }

    /// FCM's spelling.
    public var description: String {
        if case .unknown(let text) = self { return text }
        return Self.known.first { $0.0 == self }?.1 ?? ""
    }

    /// The token will never work again for this project: stop sending to it.
    public var retiresDevice: Bool {
        self == .unregistered || self == .senderIDMismatch
    }
}

/// FCM's answer to a send that failed: the HTTP status, Google's `status` (`NOT_FOUND`,
/// `UNAUTHENTICATED`, …), FCM's error code when it gave one, and its message.
public struct FCMFailure: Sendable, Hashable, CustomStringConvertible {
    public var status: Int
    public var googleStatus: String?
    public var code: FCMErrorCode?
    public var message: String?

    /// Reads a failed send's body; a body that is not Google's error JSON still gives its status.
    public init(status: Int, body: Data) {
        self.status = status
        let error = ((try? JSONSerialization.jsonObject(with: body)) as? [String: Any])?["error"] as? [String: Any]
        googleStatus = error?["status"] as? String
        message = error?["message"] as? String
        let details = error?["details"] as? [[String: Any]] ?? []
        code =
            details.first { ($0["@type"] as? String)?.hasSuffix("google.firebase.fcm.v1.FcmError") == true }
            .flatMap { $0["errorCode"] as? String }.map(FCMErrorCode.init)
    }

    /// The access token was refused (expired or revoked), as opposed to FCM's own
    /// `THIRD_PARTY_AUTH_ERROR`: a new token and one more try fix it.
    public var refusesAccessToken: Bool {
        status == 401 && code != .thirdPartyAuthError
    }

    public var description: String {
        let name = code?.description ?? googleStatus ?? "HTTP \(status)"
        return message.map { "\(name): \($0)" } ?? name
    }
}
