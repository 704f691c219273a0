import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Cryptographically secure random bytes for Web Push's per-message keys and salts.
///
/// swift-crypto fills a new key or salt 8 bytes per `getrandom` system call: six calls for a
/// message's scalar and salt, 8 % of an encryption's samples in a profile. On Linux this reads
/// the kernel's bytes 4 KiB at a time, hands each out once and zeroes it; elsewhere
/// `arc4random_buf` already runs in the process.
enum RandomBytes {
    /// Fills `buffer` with random bytes.
    static func fill(_ buffer: UnsafeMutableRawBufferPointer) {
        #if canImport(Glibc)
            pool.fill(buffer)
        #else
            if let base = buffer.baseAddress { arc4random_buf(base, buffer.count) }
        #endif
    }

    #if canImport(Glibc)
        private static let pool = Pool()

        private final class Pool: @unchecked Sendable {
            private let lock = NSLock()
            private let bytes = UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 16)
            /// Bytes before this offset were handed out (and zeroed) or never filled.
            private var offset = 4096

            func fill(_ buffer: UnsafeMutableRawBufferPointer) {
                precondition(buffer.count <= bytes.count)
                lock.lock()
                defer { lock.unlock() }
                if bytes.count - offset < buffer.count {
                    refill()
                }
                let taken = UnsafeMutableRawBufferPointer(rebasing: bytes[offset..<offset + buffer.count])
                buffer.copyMemory(from: UnsafeRawBufferPointer(taken))
                taken.initializeMemory(as: UInt8.self, repeating: 0)
                offset += buffer.count
            }

            /// Reads 4 KiB from `/dev/urandom` (the kernel's generator, as `getrandom` is, which
            /// Swift's Glibc module does not declare); where it cannot be read, the standard
            /// library's generator fills the pool.
            private func refill() {
                var filled = 0
                if urandom >= 0 {
                    while filled < bytes.count {
                        let result = read(urandom, bytes.baseAddress! + filled, bytes.count - filled)
                        if result > 0 {
                            filled += result
                        } else if result == 0 || errno != EINTR {
                            break
                        }
                    }
                }
                if filled < bytes.count {
                    var generator = SystemRandomNumberGenerator()
                    for index in bytes.indices { bytes[index] = generator.next() }
                }
                offset = 0
            }

            private let urandom = open("/dev/urandom", O_RDONLY | O_CLOEXEC)
        }
    #endif
}
