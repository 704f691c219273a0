import Foundation

/// `application/x-www-form-urlencoded` text (query strings and web forms), read strictly: a
/// name or value whose percent-encoding is broken or not UTF-8 is an error naming it, never a
/// value silently dropped (which would, say, turn `?tenant=%FF` into the default tenant).
enum URLEncoded {
    struct Undecodable: Error, Equatable {
        /// The part as sent, shortened.
        var part: String
    }

    /// The name and value pairs in order; a name without `=` has an empty value.
    static func pairs(_ text: Substring) throws(Undecodable) -> [(name: String, value: String)] {
        var pairs: [(String, String)] = []
        for pair in text.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = try decode(parts[0])
            pairs.append((name, parts.count > 1 ? try decode(parts[1]) : ""))
        }
        return pairs
    }

    /// `+` is a space and `%XX` a byte; the bytes must be UTF-8.
    private static func decode(_ part: Substring) throws(Undecodable) -> String {
        let failure = Undecodable(part: String(part.prefix(60)))
        var bytes: [UInt8] = []
        bytes.reserveCapacity(part.utf8.count)
        var iterator = part.utf8.makeIterator()
        while let byte = iterator.next() {
            switch byte {
            case UInt8(ascii: "+"):
                bytes.append(UInt8(ascii: " "))
            case UInt8(ascii: "%"):
                guard let high = iterator.next()?.hexDigitValue, let low = iterator.next()?.hexDigitValue else {
                    throw failure
                }
                bytes.append(high << 4 | low)
            default:
                bytes.append(byte)
            }
        }
        guard let text = String(validating: bytes, as: UTF8.self) else { throw failure }
        return text
    }
}

extension UInt8 {
    /// The value of this byte as an ASCII hex digit (either case), or nil.
    var hexDigitValue: UInt8? {
        switch self {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): self - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): self - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): self - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
