import BelfryCore
import Foundation
import Testing

@Suite("ISO 8601 dates in request and answer bodies")
struct ISO8601DatesTests {
    @Test(
        "reads whole and fractional seconds, in UTC or with an offset",
        arguments: [
            ("2026-12-01T08:00:00Z", 1_796_112_000.0),
            ("2026-12-01T08:00:00.250Z", 1_796_112_000.25),
            ("2026-12-01T09:00:00+01:00", 1_796_112_000.0),
            ("2026-12-01T09:00:00+0100", 1_796_112_000.0),
            ("2026-12-01T03:30:00.5-04:30", 1_796_112_000.5),
        ])
    func reads(text: String, seconds: Double) throws {
        let date = try #require(Date(iso8601: text))
        #expect(abs(date.timeIntervalSince1970 - seconds) < 0.001)
    }

    @Test(
        "refuses a date without a time or a time zone, or with text after it",
        arguments: [
            "2026-12-01", "2026-12-01T08:00:00", "2026-12-01T08:00Z", "2026-12-01 08:00:00Z",
            "2026-12-01T08:00:00Zjunk",
            "2026-12-01T08:00:00.5+01:00 ", "tomorrow", "",
        ])
    func refuses(text: String) {
        #expect(Date(iso8601: text) == nil)
    }

    @Test("a decoder with the strategy names the text it could not read")
    func decoderError() throws {
        struct Body: Decodable { var at: Date }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .belfryISO8601
        let body = try decoder.decode(Body.self, from: Data(#"{"at": "2026-12-01T08:00:00.125Z"}"#.utf8))
        #expect(abs(body.at.timeIntervalSince1970 - 1_796_112_000.125) < 0.001)
        do {
            _ = try decoder.decode(Body.self, from: Data(#"{"at": "next week"}"#.utf8))
            Issue.record("a date that is not ISO 8601 was read")
        } catch DecodingError.dataCorrupted(let context) {
            #expect(context.debugDescription.contains(#"got "next week""#))
        }
    }
}
