import Foundation

/// `belfry serve` of this build, on a free loopback port, in a process of its own.
public struct BelfryServeProcess: Sendable {
    public let process: BackgroundProcess
    /// `http://127.0.0.1:PORT`.
    public let base: String
    /// What it printed by the time it listened.
    public let startup: String

    /// The `belfry` executable built beside the running tests.
    public static let executable = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        .appendingPathComponent("belfry").path

    /// Starts the server on `database` (a SQLite path or a PostgreSQL URL) and waits until it
    /// listens; a server that does not is stopped, and the error names what it printed.
    public static func start(database: String, environment: [String: String]) async throws -> Self {
        let process = try BackgroundProcess(
            executable, ["serve", "--port", "0", "--database", database], environment: environment)
        do {
            let output = try await process.waitForOutput(containing: "Belfry listening on ")
            guard let port = output.firstMatch(of: /listening on http:\/\/127\.0\.0\.1:(\d+)/)?.output.1 else {
                throw TestFailure("no port in:\n\(output)")
            }
            return Self(process: process, base: "http://127.0.0.1:\(port)", startup: output)
        } catch {
            process.terminate()
            throw error
        }
    }
}
