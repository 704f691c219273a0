import Foundation
import NIOConcurrencyHelpers
import Vapor

/// How many requests each kind of caller may make: a quota per window, per API key (`api`),
/// per user (`user`: user and page tokens), and per client address for what needs no
/// credential: console sign-ins (`signin`) and the pages links open, the sign-in form and
/// one-click unsubscribes (`public`). Requests with a bearer that is not valid count as `public`.
public struct RateLimits: Sendable, Hashable, CustomStringConvertible {
    public enum Class: String, CaseIterable, Sendable {
        case api, user, signin, `public`
    }

    /// `quota` requests, refilled evenly over `window` seconds (a token bucket: bursts of up to `quota`).
    public struct Rule: Sendable, Hashable {
        public var quota: Int
        public var window: Int

        public init(quota: Int, window: Int) {
            self.quota = quota
            self.window = window
        }
    }

    /// A class without a rule is not limited.
    public var rules: [Class: Rule]

    public init(rules: [Class: Rule]) {
        self.rules = rules
    }

    public static let defaults = RateLimits(rules: [
        .api: Rule(quota: 10_000, window: 1), .user: Rule(quota: 600, window: 60),
        .signin: Rule(quota: 10, window: 60), .public: Rule(quota: 120, window: 60),
    ])

    /// `api=10000/s,user=600/min,signin=10/min,public=120/min`: the classes given replace the
    /// defaults, `off` lifts a limit.
    static func parse(_ text: String) -> Result<RateLimits, ConfigurationProblem> {
        var limits = defaults
        for part in text.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !part.isEmpty {
            let pieces = part.split(separator: "=", maxSplits: 1).map(String.init)
            guard pieces.count == 2, let kind = Class(rawValue: pieces[0]) else {
                return .failure(
                    .init(
                        "expected CLASS=N/UNIT or CLASS=off, CLASS one of "
                            + Class.allCases.map(\.rawValue).joined(separator: ", ") + ", got \"\(part)\""))
            }
            if pieces[1] == "off" {
                limits.rules[kind] = nil
                continue
            }
            let rate = pieces[1].split(separator: "/").map(String.init)
            let windows = ["s": 1, "min": 60, "h": 3600]
            guard rate.count == 2, let quota = Int(rate[0]), (1...1_000_000).contains(quota),
                let window = windows[rate[1]]
            else {
                return .failure(
                    .init("expected \(kind.rawValue)=N/s, N/min or N/h (N from 1 to 1000000), got \"\(part)\""))
            }
            limits.rules[kind] = Rule(quota: quota, window: window)
        }
        return .success(limits)
    }

    public var description: String {
        Class.allCases.map { kind in
            let rule = rules[kind].map { rule in
                "\(rule.quota)/" + (rule.window == 1 ? "s" : rule.window == 60 ? "min" : "h")
            }
            return "\(kind.rawValue)=\(rule ?? "off")"
        }.joined(separator: ",")
    }
}

/// Token buckets in this instance's memory, one per caller and class. Several instances each
/// allow the quota: behind a load balancer, a caller gets up to the quota times the instances.
final class RateLimiter: Sendable {
    struct Decision: Sendable {
        var allowed: Bool
        var kind: RateLimits.Class
        var rule: RateLimits.Rule
        /// Requests left now.
        var remaining: Int
        /// Seconds until one more request is allowed (when none is left) or the bucket is full again.
        var reset: Int
    }

    private struct Bucket {
        var tokens: Double
        var updated: Date
    }

    /// Buckets kept at most; beyond it, full ones are dropped (they are as good as new).
    private static let bucketsKept = 100_000

    private let limits: RateLimits
    private let now: @Sendable () -> Date
    private let buckets = NIOLockedValueBox<[String: Bucket]>([:])

    init(limits: RateLimits, now: @escaping @Sendable () -> Date) {
        self.limits = limits
        self.now = now
    }

    /// Takes one request from `caller`'s bucket of `kind`; `nil` when the class is not limited.
    func take(_ kind: RateLimits.Class, caller: String) -> Decision? {
        guard let rule = limits.rules[kind] else { return nil }
        let time = now()
        let capacity = Double(rule.quota)
        let rate = capacity / Double(rule.window)
        return buckets.withLockedValue { buckets in
            let key = "\(kind.rawValue):\(caller)"
            var bucket = buckets[key] ?? Bucket(tokens: capacity, updated: time)
            bucket.tokens = min(capacity, bucket.tokens + max(0, time.timeIntervalSince(bucket.updated)) * rate)
            bucket.updated = time
            let allowed = bucket.tokens >= 1
            if allowed { bucket.tokens -= 1 }
            if buckets.count >= Self.bucketsKept {
                buckets = buckets.filter {
                    $0.value.tokens + time.timeIntervalSince($0.value.updated) * rate < capacity
                }
            }
            buckets[key] = bucket
            let reset = allowed ? (capacity - bucket.tokens) / rate : (1 - bucket.tokens) / rate
            return Decision(
                allowed: allowed, kind: kind, rule: rule, remaining: Int(bucket.tokens.rounded(.down)),
                reset: Int(reset.rounded(.up)))
        }
    }
}

extension RateLimiter.Decision {
    /// The IETF RateLimit fields (draft-ietf-httpapi-ratelimit-headers-10): the policy, and
    /// what is left of it.
    var headers: [(String, String)] {
        [
            ("RateLimit-Policy", "\"\(kind.rawValue)\";q=\(rule.quota);w=\(rule.window)"),
            ("RateLimit", "\"\(kind.rawValue)\";r=\(remaining);t=\(reset)"),
        ]
    }

    /// The 429 for a refused request, with `Retry-After` and the RateLimit fields.
    var refusal: BelfryError {
        let per = rule.window == 1 ? "second" : rule.window == 60 ? "minute" : "\(rule.window) seconds"
        return BelfryError(
            .rateLimited,
            "too many requests: the \(kind.rawValue) limit is \(rule.quota) a \(per); try again in \(max(reset, 1)) s",
            .rateLimited(retryAfter: max(reset, 1), fields: headers.map { (name: $0.0, value: $0.1) }))
    }
}

/// Applies the `api` and `user` limits by the request's bearer (a bearer that is not valid
/// counts against its address's `public` limit), and `kind` by address for the routes it is
/// added to. Answers 429 with `Retry-After` and the RateLimit fields; every limited answer
/// carries the RateLimit fields. A future-based middleware, not an async one: most requests
/// (no bearer, or a key of the configuration) are classified without leaving the event loop,
/// and an async middleware costs every request a task (a third of `/healthz`'s rate).
struct RateLimitMiddleware: Middleware {
    let limiter: RateLimiter
    /// Tells a request's caller: an API key or a user (a route reads what it found).
    let auth: Authenticator
    /// For page routes: limit by address in this class. Nil: by credential (global).
    var byAddress: RateLimits.Class? = nil

    func respond(to request: Request, chainingTo next: any Responder) -> EventLoopFuture<Response> {
        if let byAddress { return limit(request, byAddress, request.clientAddress, next) }
        let bearer =
            request.headers.bearerAuthorization?.token
            ?? (request.url.path == "/v1/me/stream" ? request.queryValue(named: "token") : nil)
        guard let bearer else { return next.respond(to: request) }
        if case .server(let grant) = request.configuredKeyPrincipal(auth, for: bearer) {
            return limit(request, .api, "\(grant.name):\(grant.fingerprint)", next)
        }
        let promise = request.eventLoop.makePromise(of: (RateLimits.Class, String).self)
        promise.completeWithTask {
            switch try? await request.principal(auth, for: bearer) {
            case .server(let grant): (.api, "\(grant.name):\(grant.fingerprint)")
            case .user(let subject): (.user, subject.userID.uuidString)
            case nil: (.public, request.clientAddress)
            }
        }
        return promise.futureResult.flatMap { kind, caller in limit(request, kind, caller, next) }
    }

    private func limit(
        _ request: Request, _ kind: RateLimits.Class, _ caller: String, _ next: any Responder
    ) -> EventLoopFuture<Response> {
        guard let decision = limiter.take(kind, caller: caller) else {
            return next.respond(to: request)
        }
        guard decision.allowed else {
            request.logger.notice(
                "rate limited", metadata: ["belfry.limit": "\(kind.rawValue)", "belfry.path": "\(request.url.path)"])
            return request.eventLoop.makeFailedFuture(decision.refusal)
        }
        return next.respond(to: request).map { response in
            for (name, value) in decision.headers { response.headers.replaceOrAdd(name: name, value: value) }
            return response
        }
    }
}
