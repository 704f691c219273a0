import AsyncHTTPClient
import Foundation
import NIOCore
import NIOSSL

extension TLSConfiguration {
    /// TLS for every outbound connection (webhook, Web Push, APNs, the SMTP relay): the system's
    /// trust roots and the extra certificates (`BELFRY_EXTRA_CA_FILE`).
    static func outbound(extraCertificatesPEM: String?) throws -> TLSConfiguration {
        var tls = TLSConfiguration.makeClientConfiguration()
        if let pem = extraCertificatesPEM {
            tls.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMBytes(Array(pem.utf8)))]
        }
        return tls
    }
}

extension HTTPClient {
    /// HTTP/1.1 connections the outbound client keeps to one host; the webhook's and each push
    /// service's share of the delivery queue's slots follows it.
    static let outboundConnectionsPerHost = 128

    /// The client the webhook and Web Push use, and the benchmarks too: it keeps connections
    /// open (HTTP/2 where the server offers it, so one connection carries many requests at
    /// once), trusts the extra certificates, and never follows redirects: a 301 would turn a
    /// signed POST into a GET elsewhere and its 2xx would count as delivered.
    /// `dnsOverride` maps host names to the addresses to connect to instead of resolving them.
    static func outbound(
        eventLoopGroup: any EventLoopGroup, extraCertificatesPEM: String?, dnsOverride: [String: String] = [:]
    ) throws -> HTTPClient {
        var configuration = HTTPClient.Configuration(
            tlsConfiguration: try .outbound(extraCertificatesPEM: extraCertificatesPEM),
            redirectConfiguration: .disallow)
        configuration.dnsOverride = dnsOverride
        configuration.timeout = .init(connect: .seconds(5), read: .seconds(30))
        configuration.httpVersion = .automatic
        configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = outboundConnectionsPerHost
        // Belfry bootstraps no tracer: without one the client skips building each request's
        // span attributes (2 % of the CPU while webhooks are sent).
        configuration.tracing.tracer = nil
        return HTTPClient(eventLoopGroup: eventLoopGroup, configuration: configuration)
    }
}
