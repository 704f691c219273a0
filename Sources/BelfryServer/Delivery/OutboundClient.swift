import AsyncHTTPClient
import Foundation
import NIOCore
import NIOSSL

extension HTTPClient {
    /// The client every provider uses (webhook, APNs, Web Push), and the benchmarks too: it
    /// keeps connections open (HTTP/2 where the server offers it, so one connection carries
    /// many requests at once), trusts the extra certificates, and never follows redirects: a
    /// 301 would turn a signed POST into a GET elsewhere and its 2xx would count as delivered.
    static func outbound(eventLoopGroup: any EventLoopGroup, extraCertificatesPEM: String?) throws -> HTTPClient {
        var tls = TLSConfiguration.makeClientConfiguration()
        if let pem = extraCertificatesPEM {
            tls.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMBytes(Array(pem.utf8)))]
        }
        var configuration = HTTPClient.Configuration(tlsConfiguration: tls, redirectConfiguration: .disallow)
        configuration.timeout = .init(connect: .seconds(5), read: .seconds(30))
        configuration.httpVersion = .automatic
        return HTTPClient(eventLoopGroup: eventLoopGroup, configuration: configuration)
    }
}
