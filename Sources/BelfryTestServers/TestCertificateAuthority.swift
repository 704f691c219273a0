import Crypto
import Foundation
import NIOSSL
import SwiftASN1
import X509

/// A certificate authority made at run time, and a server certificate it signed for
/// `localhost` and `127.0.0.1`: local TLS servers use the certificate, and Belfry trusts the
/// authority through `BELFRY_EXTRA_CA_FILE`.
public struct TestCertificateAuthority: Sendable {
    /// The authority's certificate, PEM.
    public let certificatePEM: String
    /// Where `certificatePEM` was written, for `BELFRY_EXTRA_CA_FILE`.
    public let certificatePath: String
    let serverCertificate: NIOSSLCertificate
    let serverKey: NIOSSLPrivateKey
    /// The server certificate and its key, PEM, for servers that read them from files.
    public let serverCertificatePEM: String
    public let serverKeyPEM: String

    public init() throws {
        let now = Date()
        let authorityKey = P256.Signing.PrivateKey()
        // A name of its own: a client trusting two test servers' authorities finds each by name.
        let authorityName = try DistinguishedName { CommonName("Belfry Test CA \(UUID().uuidString.prefix(8))") }
        let authority = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(authorityKey.publicKey),
            notValidBefore: now.addingTimeInterval(-3600), notValidAfter: now.addingTimeInterval(30 * 86_400),
            issuer: authorityName, subject: authorityName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true))
            },
            issuerPrivateKey: .init(authorityKey))
        let serverKey = P256.Signing.PrivateKey()
        let server = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(serverKey.publicKey),
            notValidBefore: now.addingTimeInterval(-3600), notValidAfter: now.addingTimeInterval(30 * 86_400),
            issuer: authorityName, subject: try DistinguishedName { CommonName("localhost") },
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([.serverAuth])
                SubjectAlternativeNames([
                    .dnsName("localhost"), .ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1])),
                ])
            },
            issuerPrivateKey: .init(authorityKey))

        certificatePEM = try authority.serializeAsPEM().pemString
        certificatePath =
            FileManager.default.temporaryDirectory
            .appendingPathComponent("belfry-test-ca-\(UUID().uuidString.prefix(8)).pem").path
        try certificatePEM.write(toFile: certificatePath, atomically: true, encoding: .utf8)
        serverCertificatePEM = try server.serializeAsPEM().pemString
        serverKeyPEM = serverKey.pemRepresentation
        serverCertificate = try NIOSSLCertificate(bytes: Array(serverCertificatePEM.utf8), format: .pem)
        self.serverKey = try NIOSSLPrivateKey(bytes: Array(serverKeyPEM.utf8), format: .pem)
    }

    /// A server TLS configuration with the signed certificate, offering `protocols` by ALPN.
    public func serverConfiguration(protocols: [String]) -> TLSConfiguration {
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(serverCertificate)], privateKey: .privateKey(serverKey))
        configuration.applicationProtocols = protocols
        return configuration
    }
}
