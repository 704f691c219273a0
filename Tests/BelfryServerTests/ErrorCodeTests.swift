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

    @Test("codes are snake case")
    func spelling() {
        for code in ErrorCode.allCases {
            #expect(code.rawValue.allSatisfy { $0.isLowercase || $0 == "_" }, "\(code.rawValue)")
        }
    }
}
