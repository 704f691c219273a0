import Foundation

/// Where a Web Push subscription may send the server: a push service on the public internet.
/// A user chooses the endpoint, so an unchecked one would have the server connect to its own
/// loopback, the private network or a cloud's metadata address (server-side request forgery).
/// Registration checks the form; delivery checks every address the name resolves to and
/// connects only to a checked one (``PinnedClients``).
enum PushEndpoint {
    /// Why `text` is not an endpoint the server may connect to, or `nil` when it is: `https`
    /// (any case), no user name or password, and a host that is a DNS name or a public IP
    /// address. Loopback IP literals pass only with `allowingLoopback` (tests), also over http.
    static func problem(with text: String, allowingLoopback: Bool) -> String? {
        guard text.count <= 2048, let components = URLComponents(string: text),
            let scheme = components.scheme?.lowercased(), let rawHost = components.host, !rawHost.isEmpty
        else {
            return "must be an https URL of at most 2048 characters"
        }
        guard components.user == nil, components.password == nil else {
            return "must not carry a user name or password"
        }
        let host = unbracketed(rawHost).lowercased()
        if let address = IPAddress(host) {
            if address.isLoopback, allowingLoopback, ["http", "https"].contains(scheme) { return nil }
            guard scheme == "https" else { return "must be an https URL" }
            return address.isPublic ? nil : "must point to a public address, not \(host)"
        }
        guard scheme == "https" else {
            return "must be an https URL" + (allowingLoopback ? " (or http to a loopback IP address)" : "")
        }
        return isDNSName(host) ? nil : "must name a push service's host, not \"\(host.prefix(60))\""
    }

    /// A name under a real top-level domain: at least two labels of letters, digits and hyphens,
    /// the last of letters. That leaves out `localhost`, single labels, and the numeric forms
    /// some resolvers read as addresses (`2130706433`, `0x7f000001`, `127.1`).
    static func isDNSName(_ host: String) -> Bool {
        let labels = host.split(separator: ".", omittingEmptySubsequences: false)
        guard labels.count >= 2, host.count <= 253, let last = labels.last else { return false }
        let allowed = Set("abcdefghijklmnopqrstuvwxyz0123456789-")
        for label in labels {
            guard (1...63).contains(label.count), label.allSatisfy(allowed.contains), label.first != "-",
                label.last != "-"
            else { return false }
        }
        let topLevel = last.hasPrefix("xn--") || last.allSatisfy(\.isLetter)
        return topLevel && !["localhost", "local", "internal", "home", "lan"].contains(String(last))
    }

    static func unbracketed(_ host: String) -> String {
        host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
    }
}

/// An IPv4 or IPv6 address, read strictly: dotted-quad IPv4 only (no `127.1`, no octal or hex
/// parts), IPv6 as `inet_pton` reads it.
struct IPAddress: Hashable, Sendable {
    /// 4 bytes for IPv4, 16 for IPv6.
    let bytes: [UInt8]

    init(bytes: [UInt8]) {
        self.bytes = bytes
    }

    init?(_ text: String) {
        if let v4 = Self.ipv4(text) {
            bytes = v4
        } else if text.contains(":"), let v6 = Self.ipv6(text) {
            bytes = v6
        } else {
            return nil
        }
    }

    private static func ipv4(_ text: String) -> [UInt8]? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var bytes: [UInt8] = []
        for part in parts {
            guard (1...3).contains(part.count), part.allSatisfy(\.isASCII), part.allSatisfy(\.isNumber),
                part.count == 1 || part.first != "0", let value = UInt8(part)
            else { return nil }
            bytes.append(value)
        }
        return bytes
    }

    private static func ipv6(_ text: String) -> [UInt8]? {
        var address = in6_addr()
        guard inet_pton(AF_INET6, text, &address) == 1 else { return nil }
        return withUnsafeBytes(of: &address) { Array($0) }
    }

    /// The usual text form: `192.0.2.1`, `2001:db8::1`.
    var text: String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let family = bytes.count == 4 ? AF_INET : AF_INET6
        bytes.withUnsafeBytes { raw in
            _ = inet_ntop(family, raw.baseAddress, &buffer, socklen_t(buffer.count))
        }
        return String(cString: buffer)
    }

    var isLoopback: Bool {
        bytes.count == 4 ? bytes[0] == 127 : bytes == [UInt8](repeating: 0, count: 15) + [1]
    }

    /// Whether a push service could have it: not loopback, private, link-local, shared (CGNAT),
    /// documentation, benchmarking, multicast or reserved space (RFC 6890), nor an IPv6 form of
    /// one of those.
    var isPublic: Bool {
        if bytes.count == 4 { return Self.isPublicIPv4(bytes) }
        // IPv4-mapped (::ffff:a.b.c.d) and the NAT64 prefix (64:ff9b::/96) carry an IPv4 address.
        if bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xff && bytes[11] == 0xff
            || bytes[0..<12] == [0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0]
        {
            return Self.isPublicIPv4(Array(bytes[12...]))
        }
        // 6to4 (2002::/16) carries one in its next four bytes.
        if bytes[0] == 0x20 && bytes[1] == 0x02 { return Self.isPublicIPv4(Array(bytes[2..<6])) }
        // Global unicast is 2000::/3; 2001:db8::/32 is for documentation.
        guard bytes[0] & 0xe0 == 0x20 else { return false }
        return !(bytes[0] == 0x20 && bytes[1] == 0x01 && bytes[2] == 0x0d && bytes[3] == 0xb8)
    }

    private static func isPublicIPv4(_ b: [UInt8]) -> Bool {
        switch (b[0], b[1], b[2]) {
        case (0, _, _), (10, _, _), (127, _, _), (169, 254, _), (192, 168, _): false
        case (100, 64...127, _), (172, 16...31, _), (198, 18...19, _): false
        case (192, 0, 0), (192, 0, 2), (198, 51, 100), (203, 0, 113): false
        case (224...255, _, _): false
        default: true
        }
    }
}
