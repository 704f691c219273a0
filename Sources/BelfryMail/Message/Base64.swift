/// Base64 (RFC 4648 §4) without Foundation, for encoded words, AUTH and MIME bodies.
enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    static func encode(_ octets: some Collection<UInt8>) -> String {
        let bytes = Array(octets)
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var index = 0
        while index + 3 <= bytes.count {
            let value = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
            out += [18, 12, 6, 0].map { alphabet[Int(value >> $0 & 63)] }
            index += 3
        }
        switch bytes.count - index {
        case 1:
            let value = UInt32(bytes[index]) << 16
            out += [alphabet[Int(value >> 18 & 63)], alphabet[Int(value >> 12 & 63)], 61, 61]
        case 2:
            let value = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8
            out += [
                alphabet[Int(value >> 18 & 63)], alphabet[Int(value >> 12 & 63)], alphabet[Int(value >> 6 & 63)], 61,
            ]
        default:
            break
        }
        return String(decoding: out, as: UTF8.self)
    }
}
