import BelfryMail
import Foundation

/// The relay email goes through, from `BELFRY_SMTP_URL`: `smtp://user:password@host:port`
/// (STARTTLS, port 587 unless given), `smtps://…` (TLS from the first byte, port 465), or
/// `smtp://host:port?tls=none` for a relay on loopback only.
public struct SMTPLocation: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var security: SMTPSecurity
    public var credentials: SMTPCredentials?

    public init(host: String, port: Int, security: SMTPSecurity, credentials: SMTPCredentials? = nil) {
        self.host = host
        self.port = port
        self.security = security
        self.credentials = credentials
    }

    public static func parse(_ text: String) -> Result<SMTPLocation, ConfigurationProblem> {
        let shown = DatabaseLocation.redact(text)
        guard let url = URLComponents(string: text), let scheme = url.scheme?.lowercased(),
            scheme == "smtp" || scheme == "smtps", let host = url.host, !host.isEmpty, url.path.isEmpty,
            // A `#` in an unencoded password would cut the URL short: refuse rather than misread it.
            url.fragment == nil
        else {
            return .failure(
                .init(
                    "expected smtp://user:password@host:port or smtps://… (percent-encode @, :, / and # in the "
                        + "user name and password), got \(shown)"))
        }
        var security: SMTPSecurity = scheme == "smtps" ? .implicitTLS : .startTLS
        for item in url.queryItems ?? [] {
            guard item.name == "tls", item.value == "none", scheme == "smtp" else {
                return .failure(.init("the only query an SMTP URL takes is ?tls=none (with smtp://), got \(shown)"))
            }
            guard isLoopback(host) else {
                return .failure(
                    .init("?tls=none is accepted only for a relay on loopback; \(host) needs STARTTLS or smtps://"))
            }
            security = .none
        }
        var credentials: SMTPCredentials?
        switch (url.user, url.password) {
        case (let user?, let password?) where !user.isEmpty:
            // URLComponents gives the percent-decoded forms.
            credentials = SMTPCredentials(user: user, password: password)
        case (nil, nil):
            break
        default:
            return .failure(.init("an SMTP URL gives both a user name and a password, or neither: \(shown)"))
        }
        let port = url.port ?? (security == .implicitTLS ? 465 : 587)
        guard (1...65_535).contains(port) else { return .failure(.init("the SMTP port must be 1 to 65535")) }
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        return .success(SMTPLocation(host: bare, port: port, security: security, credentials: credentials))
    }

    /// `localhost`, 127.0.0.0/8 or ::1.
    static func isLoopback(_ host: String) -> Bool {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        if bare.lowercased() == "localhost" || bare == "::1" { return true }
        let octets = bare.split(separator: ".", omittingEmptySubsequences: false)
        return octets.count == 4 && octets[0] == "127" && octets.allSatisfy { UInt8($0) != nil }
    }

    /// Without the password.
    public var description: String {
        let scheme = security == .implicitTLS ? "smtps" : "smtp"
        let user = credentials.map { "\($0.user)@" } ?? ""
        return "\(scheme)://\(user)\(host):\(port)\(security == .none ? "?tls=none" : "")"
    }
}
