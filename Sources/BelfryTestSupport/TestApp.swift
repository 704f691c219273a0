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

/// A clock tests move by hand: the `now` of a test application, and the waits of its
/// background services, which return when `advance` passes their deadline.
public final class TestClock: ServiceClock {
    private struct Sleeper {
        var id: UUID
        var deadline: Date
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var now: Date
        var sleepers: [Sleeper] = []
    }

    private let state: NIOLockedValueBox<State>

    public init(_ start: Date = Date(timeIntervalSince1970: 1_800_000_000)) {
        state = NIOLockedValueBox(State(now: start))
    }

    public var now: Date { state.withLockedValue { $0.now } }

    /// How many waits are pending.
    public var sleeping: Int { state.withLockedValue { $0.sleepers.count } }

    public func advance(by seconds: TimeInterval) {
        let due = state.withLockedValue { state -> [Sleeper] in
            state.now.addTimeInterval(seconds)
            let now = state.now
            let due = state.sleepers.filter { $0.deadline <= now }
            state.sleepers.removeAll { $0.deadline <= now }
            return due
        }
        due.forEach { $0.continuation.resume() }
    }

    package func sleep(for seconds: TimeInterval) async throws {
        let id = UUID()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let cancelled = state.withLockedValue { state -> Bool in
                    if Task.isCancelled { return true }
                    state.sleepers.append(
                        Sleeper(id: id, deadline: state.now.addingTimeInterval(seconds), continuation: continuation))
                    return false
                }
                if cancelled { continuation.resume(throwing: CancellationError()) }
            }
        } onCancel: {
            let cancelled = state.withLockedValue { state -> Sleeper? in
                guard let index = state.sleepers.firstIndex(where: { $0.id == id }) else { return nil }
                return state.sleepers.remove(at: index)
            }
            cancelled?.continuation.resume(throwing: CancellationError())
        }
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
            location: location, workspace: workspace, clock: clock, jitter: jitter, webhook: webhook,
            settings: adjust
        ) {
            app, _ in
            try await body(app)
        }
    }
}
