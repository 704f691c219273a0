import Foundation

/// How Belfry writes JSON: ISO 8601 dates, stable key order. Every answer, stream event and
/// stored report uses it.
enum JSONCoding {
    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()
}
