import Foundation

/// `belfry serve` of this build, on a free loopback port, in a process of its own.
public struct BelfryServeProcess: Sendable {
    public let process: BackgroundProcess
    public let port: Int
    /// `http://127.0.0.1:PORT`.
    public var base: String { "http://127.0.0.1:\(port)" }
    /// What it printed by the time it listened.
    public let startup: String

    /// The `belfry` executable built beside the running tests.
    public static let executable = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        .appendingPathComponent("belfry").path

    /// Starts the server on `database` (a SQLite path or a PostgreSQL URL) and waits until it
    /// listens, or until it prints `readyLine`; a server that does not is stopped, and the error
    /// names what it printed.
    /// - Parameter arguments: more arguments for `belfry serve`.
    public static func start(
        database: String, environment: [String: String], arguments: [String] = [],
        readyLine: String = "Belfry listening on "
    ) async throws -> Self {
        let process = try BackgroundProcess(
            executable, ["serve", "--port", "0", "--database", database] + arguments, environment: environment)
        do {
            var output = try await process.waitForOutput(containing: readyLine)
            // The ready line may be a log line (standard error) that comes before the banner's
            // "listening on" (standard output): then wait for that too.
            if output.firstMatch(of: /listening on http:\/\/127\.0\.0\.1:(\d+)/) == nil {
                output = try await process.waitForOutput(containing: "Belfry listening on ")
            }
            guard let text = output.firstMatch(of: /listening on http:\/\/127\.0\.0\.1:(\d+)/)?.output.1,
                let port = Int(text)
            else {
                throw TestFailure("no port in:\n\(output)")
            }
            return Self(process: process, port: port, startup: output)
        } catch {
            process.terminate()
            throw error
        }
    }
}
