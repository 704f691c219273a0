import BelfryCore
import BelfryServer
import Foundation
import Logging
import NIOConcurrencyHelpers
import Vapor
import VaporTesting

/// The databases every storage and API test runs against.
public enum TestDatabase: String, CaseIterable, Sendable, CustomStringConvertible {
    case sqlite
    case postgres

    public var description: String { rawValue }
}

/// The API key test applications accept.
public let testAPIKey = "test-api-key-0123456789abcdef"

/// A clock tests move by hand.
public final class TestClock: Sendable {
    private let current: NIOLockedValueBox<Date>

    public init(_ start: Date = Date(timeIntervalSince1970: 1_800_000_000)) {
        current = NIOLockedValueBox(start)
    }

    public var now: Date { current.withLockedValue { $0 } }

    public func advance(by seconds: TimeInterval) {
        current.withLockedValue { $0.addTimeInterval(seconds) }
    }
}

private let loggingBootstrapped: Void = {
    let level =
        ProcessInfo.processInfo.environment["BELFRY_TEST_LOG_LEVEL"].flatMap { Logger.Level(rawValue: $0) } ?? .error
    LoggingSystem.bootstrap { label in
        var handler = StreamLogHandler.standardError(label: label)
        handler.logLevel = level
        return handler
    }
}()

/// Runs `body` with a fresh, empty database of `kind`, removed afterwards.
public func withTestStorage<T>(
    _ kind: TestDatabase, _ body: (DatabaseLocation) async throws -> T
) async throws -> T {
    switch kind {
    case .sqlite:
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "belfry-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        return try await body(.sqlite(path: directory.appendingPathComponent("belfry.sqlite").path))
    case .postgres:
        let database = try await PostgresTestServer.shared.createDatabase()
        do {
            let result = try await body(.postgres(url: database.url))
            try await PostgresTestServer.shared.dropDatabase(database.name)
            return result
        } catch {
            try? await PostgresTestServer.shared.dropDatabase(database.name)
            throw error
        }
    }
}

/// Runs `body` with a configured, migrated application on `location`, shut down afterwards.
public func withBelfryApp<T>(
    location: DatabaseLocation,
    workspace: WorkspaceConfig = .demo,
    apiKeys: [String] = [testAPIKey],
    clock: TestClock? = nil,
    jitter: Double? = nil,
    webhook: ServerConfiguration.Webhook? = nil,
    settings adjust: (inout ServerConfiguration) -> Void = { _ in },
    _ body: (Application, StartupReport) async throws -> T
) async throws -> T {
    _ = loggingBootstrapped
    var settings = ServerConfiguration(
        port: 0, database: location, workspace: workspace, apiKeys: apiKeys, logLevel: .error, webhook: webhook)
    adjust(&settings)
    let now: @Sendable () -> Date = if let clock { { clock.now } } else { { Date() } }
    var options = ConfigureOptions(now: now)
    if let jitter { options.jitter = { jitter } }
    return try await withBelfryApplication(.testing, settings: settings, options: options, body)
}

/// Runs `body` with a Belfry application on a fresh database of `kind`.
public func withBelfry<T>(
    _ kind: TestDatabase,
    workspace: WorkspaceConfig = .demo,
    clock: TestClock? = nil,
    jitter: Double? = nil,
    webhook: ServerConfiguration.Webhook? = nil,
    settings adjust: (inout ServerConfiguration) -> Void = { _ in },
    _ body: (Application) async throws -> T
) async throws -> T {
    try await withTestStorage(kind) { location in
        try await withBelfryApp(
            location: location, workspace: workspace, clock: clock, jitter: jitter, webhook: webhook, settings: adjust
        ) {
            app, _ in
            try await body(app)
        }
    }
}
