import AsyncHTTPClient
import Foundation
import NIOConcurrencyHelpers

/// Looks a host name up: the system's resolver in production, a table in tests.
struct HostResolver: Sendable {
    var resolve: @Sendable (String) async throws -> [IPAddress]

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// `getaddrinfo`, which blocks, on a thread of its own.
    static let system = HostResolver { host in
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(with: Result { try lookUp(host) })
            }
        }
    }

    private static func lookUp(_ host: String) throws -> [IPAddress] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        #if canImport(Glibc)
            hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        #else
            hints.ai_socktype = SOCK_STREAM
        #endif
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, nil, &hints, &list)
        guard status == 0 else {
            throw Failure(description: "\(host) does not resolve: \(String(cString: gai_strerror(status)))")
        }
        defer { freeaddrinfo(list) }
        var addresses: [IPAddress] = []
        var cursor = list
        while let info = cursor {
            if let socketAddress = info.pointee.ai_addr {
                switch info.pointee.ai_family {
                case AF_INET:
                    let v4 = socketAddress.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr }
                    addresses.append(IPAddress(bytes: withUnsafeBytes(of: v4) { Array($0) }))
                case AF_INET6:
                    let v6 = socketAddress.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) {
                        $0.pointee.sin6_addr
                    }
                    addresses.append(IPAddress(bytes: withUnsafeBytes(of: v6) { Array($0) }))
                default:
                    break
                }
            }
            cursor = info.pointee.ai_next
        }
        return Array(Set(addresses)).sorted { $0.text < $1.text }
    }
}

/// Web Push clients that connect to a push service only at an address that was checked: the
/// endpoint's host is resolved here, every address it has must be public, and the connection
/// goes to the checked one (the client's DNS override), while TLS still checks the certificate
/// against the name. A name that later resolves to a private address (DNS rebinding) reaches
/// nothing. One client per host, so connections stay pooled; a host is resolved again after
/// `recheck` seconds, and a new client replaces the old when its address moved.
final class PinnedClients: Sendable {
    enum Refusal: Error, CustomStringConvertible {
        case unresolved(String)
        case notPublic(host: String, address: String)

        var description: String {
            switch self {
            case .unresolved(let why): why
            case .notPublic(let host, let address): "\(host) resolves to \(address), which is not a public address"
            }
        }
    }

    private struct Entry {
        var address: IPAddress
        var client: HTTPClient
        var checkedAt: Date
    }

    static let recheck: TimeInterval = 300
    /// How long a replaced client lives on for the requests still under way on it.
    static let retireAfter: Duration = .seconds(60)

    /// For endpoints whose host is an IP address: checked as it is, nothing to resolve.
    private let shared: HTTPClient
    private let makeClient: @Sendable (_ dnsOverride: [String: String]) throws -> HTTPClient
    private let resolver: HostResolver
    private let allowingLoopback: Bool
    private let now: @Sendable () -> Date
    private let entries = NIOLockedValueBox<[String: Entry]>([:])

    init(
        shared: HTTPClient, allowingLoopback: Bool, resolver: HostResolver, now: @escaping @Sendable () -> Date,
        makeClient: @escaping @Sendable (_ dnsOverride: [String: String]) throws -> HTTPClient
    ) {
        self.shared = shared
        self.allowingLoopback = allowingLoopback
        self.resolver = resolver
        self.now = now
        self.makeClient = makeClient
    }

    /// The client to send `url`'s request with.
    func client(for url: URL) async throws(Refusal) -> HTTPClient {
        guard let rawHost = url.host, !rawHost.isEmpty else { throw .unresolved("the endpoint names no host") }
        let host = PushEndpoint.unbracketed(rawHost).lowercased()
        if let literal = IPAddress(host) {
            try check(literal, of: host, isLiteral: true)
            return shared
        }
        let time = now()
        if let entry = entries.withLockedValue({ $0[host] }), time.timeIntervalSince(entry.checkedAt) < Self.recheck {
            return entry.client
        }
        let addresses: [IPAddress]
        do {
            addresses = try await resolver.resolve(host)
        } catch {
            throw .unresolved("\(error)")
        }
        guard let chosen = addresses.first else { throw .unresolved("\(host) has no address") }
        for address in addresses { try check(address, of: host, isLiteral: false) }
        let fresh: HTTPClient
        do {
            fresh = try makeClient([host: chosen.text])
        } catch {
            throw .unresolved("no client for \(host): \(error)")
        }
        let (client, unused) = entries.withLockedValue { entries -> (HTTPClient, [HTTPClient]) in
            if var entry = entries[host], entry.address == chosen {
                entry.checkedAt = time
                entries[host] = entry
                return (entry.client, [fresh])
            }
            let replaced = entries[host].map { [$0.client] } ?? []
            entries[host] = Entry(address: chosen, client: fresh, checkedAt: time)
            return (fresh, replaced)
        }
        for old in unused {
            Task {
                try? await Task.sleep(for: Self.retireAfter)
                try? await old.shutdown()
            }
        }
        return client
    }

    /// The address `host`'s client connects to, if it has one (for tests and logs).
    func pinnedAddress(of host: String) -> IPAddress? {
        entries.withLockedValue { $0[host]?.address }
    }

    /// Loopback passes only where tests allow it, and only as an IP address in the endpoint:
    /// never because a name resolved there.
    private func check(_ address: IPAddress, of host: String, isLiteral: Bool) throws(Refusal) {
        guard address.isPublic || (allowingLoopback && isLiteral && address.isLoopback) else {
            throw .notPublic(host: host, address: address.text)
        }
    }

    func shutdown() async {
        let clients = entries.withLockedValue { entries in
            defer { entries = [:] }
            return entries.values.map(\.client)
        }
        for client in clients { try? await client.shutdown() }
    }
}
