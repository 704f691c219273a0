import BelfryJSON
import CryptoExtras
import Foundation

/// OAuth access tokens for FCM, from the service account (RFC 7523): an RS256 assertion, traded at
/// the account's `token_uri` for a bearer token, kept until five minutes before it expires and
/// replaced once when FCM refuses it. Concurrent sends wait on one grant, not one each.
public final class FCMAccessTokens: @unchecked Sendable {
    /// The scope FCM's send API asks for.
    public static let scope = "https://www.googleapis.com/auth/firebase.messaging"
    /// How long an assertion is valid: the most Google accepts.
    public static let assertionLifetime: TimeInterval = 3600
    /// A token is replaced this long before it expires.
    public static let renewalMargin: TimeInterval = 300
    /// A refused or failed grant is answered from memory for this long, so that a queue of
    /// sends does not become a queue of grant requests.
    public static let failureMemory: TimeInterval = 10

    /// A token request: the form body to POST to the account's `token_uri`.
    public struct GrantRequest: Sendable {
        public var url: String
        /// `application/x-www-form-urlencoded`.
        public var form: String
    }

    /// What the token endpoint answered.
    public struct GrantAnswer: Sendable {
        public var status: Int
        public var body: Data

        public init(status: Int, body: Data) {
            self.status = status
            self.body = body
        }
    }

    /// Why no access token could be had.
    public enum Failure: Error, CustomStringConvertible {
        /// The key could not sign the assertion.
        case signing(String)
        /// The token endpoint refused the grant (a revoked key, a wrong clock, a deleted account):
        /// trying again will not help until the operator acts.
        case refused(status: Int, error: String, description: String?)
        /// The endpoint could not be reached, or answered with a server error: try again later.
        case unavailable(String)

        public var description: String {
            switch self {
            case .signing(let reason): "could not sign the OAuth assertion: \(reason)"
            case .refused(let status, let error, let description):
                "the token endpoint refused the service account's grant (HTTP \(status), \(error)"
                    + (description.map { ": \($0)" } ?? "") + ")"
            case .unavailable(let reason): "could not get an FCM access token: \(reason)"
            }
        }

        /// Whether a later attempt may succeed without the operator's help.
        public var isTransient: Bool {
            if case .refused = self { return false }
            return true
        }
    }

    private struct Grant {
        var token: String
        var expiresAt: Date
    }

    private let account: FCMServiceAccount
    private let now: @Sendable () -> Date
    private let exchange: @Sendable (GrantRequest) async throws -> GrantAnswer
    // Guarded by `lock`.
    private var cached: Grant?
    private var pending: Task<Grant, any Error>?
    private var lastFailure: (failure: Failure, at: Date)?
    private let lock = NSLock()

    /// - Parameter exchange: POSTs the form to the token endpoint and returns its answer; the
    ///   server gives its HTTP client here.
    public init(
        account: FCMServiceAccount, now: @escaping @Sendable () -> Date,
        exchange: @escaping @Sendable (GrantRequest) async throws -> GrantAnswer
    ) {
        self.account = account
        self.now = now
        self.exchange = exchange
    }

    /// The token sends carry now, granted anew when it is close to expiring.
    /// - Throws: `Failure`.
    public func current() async throws -> String {
        try await token(replacing: nil)
    }

    /// A new token in place of `refused`, unless another send already replaced it.
    public func replace(_ refused: String) async throws -> String {
        try await token(replacing: refused)
    }

    private enum Next {
        case ready(String)
        case wait(Task<Grant, any Error>)
    }

    private func token(replacing refused: String?) async throws -> String {
        let now = self.now()
        let next: Next = try lock.withLock {
            if let cached, cached.token != refused, now < cached.expiresAt.addingTimeInterval(-Self.renewalMargin) {
                return .ready(cached.token)
            }
            if let pending { return .wait(pending) }
            if let lastFailure, now.timeIntervalSince(lastFailure.at) < Self.failureMemory, now >= lastFailure.at {
                throw lastFailure.failure
            }
            let task = Task { try await self.grant() }
            pending = task
            return .wait(task)
        }
        switch next {
        case .ready(let token):
            return token
        case .wait(let task):
            do {
                return try await task.value.token
            } catch let failure as Failure {
                throw failure
            } catch {
                throw Failure.unavailable("\(error)")
            }
        }
    }

    private func grant() async throws -> Grant {
        let result: Result<Grant, Failure>
        do {
            result = .success(try await requestGrant())
        } catch let failure as Failure {
            result = .failure(failure)
        } catch {
            result = .failure(.unavailable("\(error)"))
        }
        let now = self.now()
        lock.withLock {
            pending = nil
            switch result {
            case .success(let grant):
                cached = grant
                lastFailure = nil
            case .failure(let failure):
                lastFailure = (failure, now)
            }
        }
        return try result.get()
    }

    private func requestGrant() async throws -> Grant {
        let issuedAt = now()
        let assertion: String
        do {
            assertion = try self.assertion(issuedAt: issuedAt)
        } catch {
            throw Failure.signing("\(error)")
        }
        let form =
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=" + assertion
        let answer: GrantAnswer
        do {
            answer = try await exchange(GrantRequest(url: account.tokenURI, form: form))
        } catch {
            throw Failure.unavailable("the token endpoint could not be reached: \(error)")
        }
        let object = (try? JSONSerialization.jsonObject(with: answer.body)) as? [String: Any] ?? [:]
        guard answer.status == 200 else {
            if answer.status == 429 || answer.status >= 500 {
                throw Failure.unavailable("the token endpoint answered HTTP \(answer.status)")
            }
            throw Failure.refused(
                status: answer.status, error: object["error"] as? String ?? "no error code",
                description: object["error_description"] as? String)
        }
        guard let token = object["access_token"] as? String, !token.isEmpty else {
            throw Failure.unavailable("the token endpoint's answer has no access_token")
        }
        let lifetime = (object["expires_in"] as? NSNumber)?.doubleValue ?? 3600
        return Grant(token: token, expiresAt: issuedAt.addingTimeInterval(lifetime))
    }

    /// The signed assertion (RFC 7523 §2.1) for a grant made at `issuedAt`.
    public func assertion(issuedAt: Date) throws -> String {
        let iat = Int(issuedAt.timeIntervalSince1970)
        var header = JSONBytes()
        header.field("alg", "RS256")
        header.field("kid", account.privateKeyID)
        header.field("typ", "JWT")
        var claims = JSONBytes()
        claims.field("aud", account.tokenURI)
        claims.field("exp", iat + Int(Self.assertionLifetime))
        claims.field("iat", iat)
        claims.field("iss", account.clientEmail)
        claims.field("scope", Self.scope)
        let input = "\(JOSE.base64URL(header.finish())).\(JOSE.base64URL(claims.finish()))"
        let signature = try account.key.signature(for: Data(input.utf8), padding: .insecurePKCS1v1_5)
        return "\(input).\(JOSE.base64URL(signature.rawRepresentation))"
    }
}
