import Foundation

/// Where the SDK keeps what must survive the app being killed (pending preference writes,
/// the per-site sync queue). `UserDefaultsStore` on Apple platforms, `FileKeyValueStore` on Linux.
public protocol KeyValueStore: Sendable {
    func data(forKey key: String) -> Data?
    /// Stores `data`, or removes the key when `nil`.
    func set(_ data: Data?, forKey key: String)
}

/// A store in `UserDefaults`.
public struct UserDefaultsStore: KeyValueStore, @unchecked Sendable {
    // @unchecked: UserDefaults is documented as thread-safe but not marked Sendable everywhere.
    private let defaults: UserDefaults

    /// - Parameter defaults: the defaults to keep values in.
    public init(defaults: UserDefaults = .standard) {
        self.defaults = defaults
    }

    public func data(forKey key: String) -> Data? { defaults.data(forKey: key) }

    public func set(_ data: Data?, forKey key: String) { defaults.set(data, forKey: key) }
}

/// A store of one file per key in a directory; each write replaces its file atomically.
public struct FileKeyValueStore: KeyValueStore {
    /// Where the files are.
    public let directory: URL

    /// - Parameter directory: where to keep the files; created when first written.
    public init(directory: URL) {
        self.directory = directory
    }

    private func url(for key: String) -> URL {
        let safe = key.map { $0.isLetter || $0.isNumber || $0 == "." || $0 == "-" ? String($0) : "_" }.joined()
        return directory.appendingPathComponent(safe + ".json")
    }

    public func data(forKey key: String) -> Data? {
        try? Data(contentsOf: url(for: key))
    }

    public func set(_ data: Data?, forKey key: String) {
        if let data {
            try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            try? data.write(to: url(for: key), options: .atomic)
        } else {
            try? FileManager.default.removeItem(at: url(for: key))
        }
    }
}

/// A store in memory, for tests and previews.
public final class InMemoryKeyValueStore: KeyValueStore, @unchecked Sendable {
    // @unchecked: `values` is only touched under `lock`.
    private let lock = NSLock()
    private var values: [String: Data] = [:]

    /// An empty store.
    public init() {}

    public func data(forKey key: String) -> Data? {
        lock.lock()
        defer { lock.unlock() }
        return values[key]
    }

    public func set(_ data: Data?, forKey key: String) {
        lock.lock()
        defer { lock.unlock() }
        values[key] = data
    }
}
