import Crypto
import Foundation

/// Errors from building a VAPID `Authorization` header.
public enum VAPIDError: Error, Sendable, Equatable, CustomStringConvertible {
    case invalidAudience(String)
    case invalidSubject(String)

    public var description: String {
        switch self {
        case .invalidAudience(let audience):
            "VAPID audience must be the push endpoint's origin, e.g. https://push.example.net, got \"\(audience)\""
        case .invalidSubject(let subject):
            "VAPID subject must be a mailto: or https: URI, got \"\(subject)\""
        }
    }
}

/// An application server's VAPID key pair (RFC 8292).
///
/// `@unchecked` only because some swift-crypto versions do not mark their immutable key types `Sendable`.
public struct VAPIDKey: @unchecked Sendable {
    public let privateKey: P256.Signing.PrivateKey

    /// Wraps `privateKey`, or generates a new key.
    public init(privateKey: P256.Signing.PrivateKey = .init()) {
        self.privateKey = privateKey
    }

    /// Loads a PEM-encoded P-256 private key (SEC 1 or PKCS #8).
    public init(pemRepresentation: String) throws {
        privateKey = try P256.Signing.PrivateKey(pemRepresentation: pemRepresentation)
    }

    /// The private key as PKCS #8 PEM, for storage.
    public var pemRepresentation: String { privateKey.pemRepresentation }

    /// The public key as a base64url uncompressed point: the `k` parameter and the browser's `applicationServerKey`.
    public var publicKeyBase64URL: String {
        Base64URL.encode(privateKey.publicKey.x963Representation)
    }

    /// Returns the `Authorization` header value `vapid t=<JWT>, k=<public key>` (RFC 8292 §3).
    ///
    /// - Parameters:
    ///   - audience: The push endpoint's origin; see ``origin(of:)``.
    ///   - subject: Contact URI for the push service operator (`mailto:` or `https:`).
    ///   - expiration: The JWT `exp`; push services reject values more than 24 hours ahead.
    public func authorization(audience: String, subject: String, expiration: Date) throws -> String {
        guard URL(string: audience).flatMap(Self.origin(of:)) == audience else {
            throw VAPIDError.invalidAudience(audience)
        }
        guard Self.isValidSubject(subject) else { throw VAPIDError.invalidSubject(subject) }

        let header = Base64URL.encode(Data(#"{"typ":"JWT","alg":"ES256"}"#.utf8))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let claims = Claims(aud: audience, exp: Int(expiration.timeIntervalSince1970), sub: subject)
        let signingInput = "\(header).\(Base64URL.encode(try encoder.encode(claims)))"
        let signature = try privateKey.signature(for: Data(signingInput.utf8))
        let token = "\(signingInput).\(Base64URL.encode(signature.rawRepresentation))"
        return "vapid t=\(token), k=\(publicKeyBase64URL)"
    }

    /// The ASCII origin (`scheme://host[:port]`, default port omitted) of an http(s) push endpoint.
    public static func origin(of endpoint: URL) -> String? {
        guard let scheme = endpoint.scheme?.lowercased(), let host = endpoint.host?.lowercased(),
            !host.isEmpty
        else { return nil }
        let defaultPort: Int
        switch scheme {
        case "https": defaultPort = 443
        case "http": defaultPort = 80
        default: return nil
        }
        let authority = host.contains(":") ? "[\(host)]" : host
        guard let port = endpoint.port, port != defaultPort else { return "\(scheme)://\(authority)" }
        return "\(scheme)://\(authority):\(port)"
    }

    /// Whether `subject` is a contact RFC 8292 accepts: a `mailto:` address or an `https:` URL.
    public static func isValidSubject(_ subject: String) -> Bool {
        let lowercased = subject.lowercased()
        if lowercased.hasPrefix("mailto:") {
            return subject.dropFirst("mailto:".count).contains("@")
        }
        return lowercased.hasPrefix("https:") && URL(string: subject)?.host?.isEmpty == false
    }

    private struct Claims: Encodable {
        let aud: String
        let exp: Int
        let sub: String
    }
}
