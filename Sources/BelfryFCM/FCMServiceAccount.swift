import CryptoExtras
import Foundation

/// A Google service account's key file, the JSON a Firebase project's console downloads: the
/// project FCM sends for, and the RSA key that signs the OAuth assertion for its access tokens.
public struct FCMServiceAccount: @unchecked Sendable {
    /// Why a key file cannot be used, naming the field.
    public struct Problem: Error, CustomStringConvertible, Equatable {
        public var description: String
    }

    public var projectID: String
    /// The key's id, the assertion's `kid`.
    public var privateKeyID: String
    /// The account's address, the assertion's `iss`.
    public var clientEmail: String
    /// Where access tokens are granted, the assertion's `aud`.
    public var tokenURI: String
    // Immutable once read; some swift-crypto versions do not mark RSA keys `Sendable`.
    let key: _RSA.Signing.PrivateKey

    /// Reads a key file's JSON.
    /// - Throws: `Problem` saying what is missing or wrong: not JSON, another kind of credential
    ///   (`authorized_user`), a field missing, a key that is not an RSA private key in PEM.
    public init(json: Data) throws(Problem) {
        guard let object = (try? JSONSerialization.jsonObject(with: json)) as? [String: Any] else {
            throw Problem(description: "not a service account key file: the file is not a JSON object")
        }
        func field(_ name: String) throws(Problem) -> String {
            guard let value = object[name] as? String, !value.isEmpty else {
                throw Problem(description: "the service account has no \"\(name)\"")
            }
            return value
        }
        let type = try field("type")
        guard type == "service_account" else {
            throw Problem(
                description: "\"type\" is \"\(type)\": FCM needs a service account key (\"service_account\")")
        }
        projectID = try field("project_id")
        privateKeyID = try field("private_key_id")
        clientEmail = try field("client_email")
        tokenURI = try field("token_uri")
        guard let url = URL(string: tokenURI), url.scheme == "https", url.host != nil else {
            throw Problem(description: "\"token_uri\" is not an https URL: \(tokenURI)")
        }
        let pem = try field("private_key")
        do {
            key = try _RSA.Signing.PrivateKey(pemRepresentation: pem)
        } catch {
            throw Problem(
                description: "\"private_key\" is not an RSA private key of 2048 bits or more in PEM (\(error))")
        }
    }
}
