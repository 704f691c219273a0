import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The PostgreSQL server the tests use: the one named by `BELFRY_TEST_POSTGRES_URL`
/// (as `.ci/run` starts it), or else one this process starts on loopback with
/// `scripts/test-postgres` and stops when it exits. Each test gets a database of its own.
public actor PostgresTestServer {
    public static let shared = PostgresTestServer()

    private var adminURL: String?

    /// The admin URL (database `postgres`), starting a server first if needed.
    public func url() throws -> String {
        if let adminURL { return adminURL }
        let url: String
        if let given = ProcessInfo.processInfo.environment["BELFRY_TEST_POSTGRES_URL"], !given.isEmpty {
            url = given
        } else {
            let directory = FileManager.default.temporaryDirectory
                .appendingPathComponent("belfry-test-postgres-\(UUID().uuidString.prefix(8))").path
            url = try runScript("start", directory).trimmingCharacters(in: .whitespacesAndNewlines)
            StartedServer.register(directory: directory)
        }
        adminURL = url
        return url
    }

    /// Creates an empty database and returns its URL.
    public func createDatabase() throws -> (name: String, url: String) {
        let admin = try url()
        let name = "belfry_test_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(16).lowercased())"
        try psql(admin, "CREATE DATABASE \(name)")
        return (name, Self.replacingDatabase(in: admin, with: name))
    }

    public func dropDatabase(_ name: String) throws {
        try psql(try url(), "DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
    }

    /// Runs one SQL statement with `psql`; returns what it printed (rows unaligned, values only).
    @discardableResult
    public func psql(_ url: String, _ statement: String) throws -> String {
        try TestProcess.run(Self.psqlPath, [url, "-v", "ON_ERROR_STOP=1", "-qAtc", statement])
    }

    private static let psqlPath: String = {
        let candidates = ["/usr/bin/psql", "/usr/local/bin/psql", "/opt/homebrew/bin/psql"]
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) } ?? "/usr/bin/psql"
    }()

    static func replacingDatabase(in url: String, with name: String) -> String {
        guard var components = URLComponents(string: url) else { return url }
        components.path = "/\(name)"
        return components.string ?? url
    }

    private func runScript(_ arguments: String...) throws -> String {
        try TestProcess.run(PackagePaths.root.appendingPathComponent("scripts/test-postgres").path, arguments)
    }
}

/// Stops a server this process started when the process exits.
private enum StartedServer {
    // Written once, before the exit handler that reads it is registered; a C exit handler cannot capture context.
    nonisolated(unsafe) static var directory: String?

    static func register(directory: String) {
        Self.directory = directory
        atexit {
            guard let directory = StartedServer.directory else { return }
            _ = try? TestProcess.run(
                PackagePaths.root.appendingPathComponent("scripts/test-postgres").path, ["stop", directory])
            try? FileManager.default.removeItem(atPath: directory)
        }
    }
}

/// Paths inside this package, found from this source file's location.
public enum PackagePaths {
    public static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
}

/// Starts `executable` with standard input from /dev/null, standard output to `outputPath`
/// and standard error to `errorPath` (or to the output file when `nil`).
///
/// Tests spawn and reap children themselves: Foundation's `Process` on Linux was seen to
/// miss the exit of `scripts/test-postgres` (the child left a zombie, `waitUntilExit` never returned).
private func spawn(
    _ executable: String, _ arguments: [String], environment: [String: String]? = nil, outputPath: String,
    errorPath: String?
) throws -> pid_t {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    if let errorPath {
        posix_spawn_file_actions_addopen(&actions, 2, errorPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    } else {
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
    }
    #if canImport(Glibc)
        // Nothing else of the test process's: a child holding a copy of a server's accepted
        // socket keeps that connection open after the server closes it (a connection-limit test
        // beside a command-line test saw its idle connections never close). glibc 2.34+ has the
        // action; Swift does not see its declaration, so it is looked up (RTLD_DEFAULT is nil).
        typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
        if let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") {
            _ = unsafeBitCast(symbol, to: CloseFrom.self)(&actions, 3)
        }
    #endif
    let variables = ProcessInfo.processInfo.environment.merging(environment ?? [:]) { _, given in given }
    let argv = ([executable] + arguments).map { strdup($0) } + [nil]
    let envp = variables.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer {
        argv.forEach { free($0) }
        envp.forEach { free($0) }
    }
    // A child inherits ignored signals and the signal mask; the test process may ignore SIGTERM
    // (servers handle it themselves), so reset both for the child to be stoppable.
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var defaults = sigset_t()
    sigfillset(&defaults)
    posix_spawnattr_setsigdefault(&attributes, &defaults)
    var mask = sigset_t()
    sigemptyset(&mask)
    posix_spawnattr_setsigmask(&attributes, &mask)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))
    var pid = pid_t()
    let spawned = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
    guard spawned == 0 else {
        throw TestProcess.Failure(command: executable, status: spawned, output: String(cString: strerror(spawned)))
    }
    return pid
}

/// Waits for `pid` to end and returns its exit code (128 + the signal for a process killed by one).
private func reap(_ pid: pid_t) -> Int32 {
    var status: Int32 = 0
    while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
    // A normal exit has the low seven bits clear and the exit code in the next eight.
    return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
}

private func temporaryPath(_ suffix: String) -> String {
    FileManager.default.temporaryDirectory.appendingPathComponent("belfry-process-\(UUID().uuidString).\(suffix)").path
}

/// Runs a program to completion.
public enum TestProcess {
    public struct Failure: Error, CustomStringConvertible {
        public var command: String
        public var status: Int32
        public var output: String
        public var description: String { "\(command) exited with \(status): \(output)" }
    }

    /// Runs `executable` with `arguments`; returns its standard output, or throws with everything it printed.
    @discardableResult
    public static func run(_ executable: String, _ arguments: [String]) throws -> String {
        let outputPath = temporaryPath("out")
        let errorPath = temporaryPath("err")
        defer {
            try? FileManager.default.removeItem(atPath: outputPath)
            try? FileManager.default.removeItem(atPath: errorPath)
        }
        let exitCode = reap(try spawn(executable, arguments, outputPath: outputPath, errorPath: errorPath))
        let output = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        guard exitCode == 0 else {
            let errors = (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? ""
            throw Failure(
                command: ([executable] + arguments).joined(separator: " "), status: exitCode, output: errors + output)
        }
        return output
    }
}

/// A program running in the background, its output going to a file the test can read.
public final class BackgroundProcess: Sendable {
    public let pid: pid_t
    private let outputPath: String

    /// Starts `executable`; standard output and standard error both go to one file.
    public init(_ executable: String, _ arguments: [String], environment: [String: String] = [:]) throws {
        outputPath = temporaryPath("log")
        pid = try spawn(executable, arguments, environment: environment, outputPath: outputPath, errorPath: nil)
    }

    public var output: String {
        (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
    }

    /// Waits until the output contains `text`, for at most `seconds`; returns the output.
    public func waitForOutput(containing text: String, seconds: Double = 30) async throws -> String {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            let current = output
            if current.contains(text) { return current }
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid {
                throw TestFailure("the process ended before printing \"\(text)\":\n\(current)")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw TestFailure("no \"\(text)\" within \(seconds) s:\n\(output)")
    }

    /// Sends `signal` (SIGTERM unless told otherwise) and returns the exit code once the process has ended.
    @discardableResult
    public func terminate(signal: Int32 = SIGTERM) -> Int32 {
        kill(pid, signal)
        let exitCode = reap(pid)
        try? FileManager.default.removeItem(atPath: outputPath)
        return exitCode
    }
}

/// A PostgreSQL server of one test's own, on loopback, that the test may crash and start again
/// (the shared server stays up for the others). Its commands wait for `pg_ctl` on a thread of
/// their own, not on one of the few that run every test's tasks.
public struct DisposablePostgresServer: Sendable {
    public let directory: String
    /// The admin URL (database `postgres`).
    public let url: String

    public static func start() async throws -> Self {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("belfry-own-postgres-\(UUID().uuidString.prefix(8))").path
        let url = try await offThePool { try run("start", directory) }.trimmingCharacters(in: .whitespacesAndNewlines)
        return Self(directory: directory, url: url)
    }

    /// Stops the server at once, as a crash does: its connections are cut, nothing is flushed.
    public func crash() async throws { try await Self.offThePool { try Self.run("crash", directory) } }

    /// Starts the server again on its port.
    public func restart() async throws { try await Self.offThePool { try Self.run("restart", directory) } }

    /// Runs `body` on a dispatch thread and waits for it without holding a task thread.
    @discardableResult
    public static func offThePool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(with: Result { try body() }) }
        }
    }

    /// Stops the server and removes its files.
    public func remove() {
        _ = try? Self.run("stop", directory)
        try? FileManager.default.removeItem(atPath: directory)
    }

    @discardableResult
    private static func run(_ command: String, _ directory: String) throws -> String {
        try TestProcess.run(
            PackagePaths.root.appendingPathComponent("scripts/test-postgres").path, [command, directory])
    }
}
