import BelfryWebPush
import Foundation
import Testing

@Suite struct Base64URLTests {
    @Test(arguments: 0...6)
    func roundTripsEveryLength(length: Int) throws {
        let bytes = Data((0..<length).map { UInt8(truncatingIfNeeded: $0 &* 97 &+ 250) })
        let encoded = Base64URL.encode(bytes)
        #expect(!encoded.contains("="))
        #expect(Base64URL.decode(encoded) == bytes)
    }

    @Test func usesURLSafeAlphabet() {
        #expect(Base64URL.encode(Data([0xFB, 0xFF, 0xBF])) == "-_-_")
        #expect(Base64URL.decode("-_-_") == Data([0xFB, 0xFF, 0xBF]))
    }

    @Test func acceptsPadding() {
        #expect(Base64URL.decode("YQ==") == Data("a".utf8))
        #expect(Base64URL.decode("YWI=") == Data("ab".utf8))
        #expect(Base64URL.decode("YQ") == Data("a".utf8))
    }

    @Test(arguments: ["YQ=", "YQ===", "Y", "YQ=a", "a+b/", "YW I", "YQ\n", "é"])
    func rejectsInvalidInput(input: String) {
        #expect(Base64URL.decode(input) == nil)
    }
}
