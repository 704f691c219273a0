import Foundation

extension UUID {
    /// `uuidString` (upper-case hex with dashes), without the C formatting Foundation uses:
    /// fan-out binds a few UUIDs per recipient, and formatting them was a tenth of its time.
    public var upperCaseText: String { text(digits: "0123456789ABCDEF") }

    /// `uuidString.lowercased()`, as the API and status events write ids, the same way.
    public var lowerCaseText: String { text(digits: "0123456789abcdef") }

    private func text(digits: StaticString) -> String {
        withUnsafeBytes(of: uuid) { bytes in
            String(unsafeUninitializedCapacity: 36) { buffer in
                var position = 0
                for (index, byte) in bytes.enumerated() {
                    if index == 4 || index == 6 || index == 8 || index == 10 {
                        buffer[position] = UInt8(ascii: "-")
                        position += 1
                    }
                    buffer[position] = digits.utf8Start[Int(byte >> 4)]
                    buffer[position + 1] = digits.utf8Start[Int(byte & 0x0F)]
                    position += 2
                }
                return position
            }
        }
    }
}
