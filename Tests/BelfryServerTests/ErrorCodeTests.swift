import BelfryCore
import Testing
import Vapor

@testable import BelfryServer

@Suite("Error codes")
struct ErrorCodeTests {
    @Test("framework errors pass through with their own status and a code of Belfry's")
    func frameworkErrors() {
        let tooLong = BelfryErrorMiddleware.classify(Abort(.uriTooLong))
        #expect(tooLong.status == .uriTooLong)
        #expect(tooLong.code == .badRequest)
        let missing = BelfryErrorMiddleware.classify(Abort(.notFound))
        #expect(missing.status == .notFound)
        #expect(missing.message == "no such route")
        let failure = BelfryErrorMiddleware.classify(Abort(.badGateway))
        #expect(failure.code == .internalError)
        #expect(failure.status == .badGateway)
    }

    @Test("a store's error carries no HTTP: the edge turns its code into the status and its detail into headers")
    func edgeMapping() {
        let conflict = ErrorAnswer(BelfryError(.preconditionFailed, "changed", .current(version: "\"v7\"")))
        #expect(conflict.status == .preconditionFailed && conflict.headers.first(name: .eTag) == "\"v7\"")
        let down = ErrorAnswer(BelfryError(.databaseUnavailable, "down", .retryAfter(seconds: 5)))
        #expect(down.status == .serviceUnavailable && down.headers.first(name: .retryAfter) == "5")
        let limited = ErrorAnswer(
            BelfryError(
                .rateLimited, "slow down", .rateLimited(retryAfter: 2, fields: [("RateLimit", "\"api\";r=0;t=2")])))
        #expect(limited.status == .tooManyRequests && limited.headers.first(name: .retryAfter) == "2")
        #expect(limited.headers.first(name: "RateLimit") == "\"api\";r=0;t=2")
        let anonymous = ErrorAnswer(BelfryError(.unauthorized, "who?", .challenge("Bearer")))
        #expect(anonymous.status == .unauthorized && anonymous.headers.first(name: .wwwAuthenticate) == "Bearer")
        let plain = ErrorAnswer(BelfryError(.userNotFound, "no user"))
        #expect(plain.status == .notFound && plain.headers.isEmpty)
        // A preference change refused in BelfryCore answers with the code the SDK knows.
        var selections = PreferenceSelections()
        #expect {
            try selections.apply(.category("no-such-category", .optIn), in: WorkspaceConfig.demo)
        } throws: { error in
            guard let refused = error as? PreferenceChangeError else { return false }
            return ErrorAnswer(BelfryError(refused)).code == .categoryNotFound
                && refused.code.rawValue == "category_not_found"
        }
    }

    @Test("codes are snake case")
    func spelling() {
        for code in ErrorCode.allCases {
            #expect(code.rawValue.allSatisfy { $0.isLowercase || $0 == "_" }, "\(code.rawValue)")
        }
    }
}
