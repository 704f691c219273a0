import BelfryCore
import BelfryTestSupport
import Foundation

@testable import BelfryClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The OS permission, scripted: what the user answers when asked, and what Settings says.
final class FakeAuthorizer: NotificationAuthorizing, @unchecked Sendable {
    // @unchecked: state under `lock`.
    private let lock = NSLock()
    private var current: NotificationSettings
    private var asked: [AuthorizationOptions] = []
    /// What the user picks at the prompt.
    var answer: PushAuthorization = .authorized

    init(_ status: PushAuthorization = .notDetermined) {
        current = NotificationSettings(authorizationStatus: status)
    }

    var requests: [AuthorizationOptions] { lock.withLock { asked } }

    /// The user changed something in the system's Settings.
    func set(_ settings: NotificationSettings) {
        lock.withLock { current = settings }
    }

    func set(_ status: PushAuthorization) {
        lock.withLock { current.authorizationStatus = status }
    }

    func requestAuthorization(options: AuthorizationOptions) async throws -> Bool {
        lock.withLock {
            asked.append(options)
            if current.authorizationStatus == .notDetermined {
                current.authorizationStatus =
                    options.contains(.provisional) && answer == .authorized ? .provisional : answer
            } else if current.authorizationStatus == .provisional, !options.contains(.provisional) {
                // Asking for more than quiet delivery prompts; `.provisional` stands for a
                // prompt the user let pass.
                current.authorizationStatus = answer
            }
            return current.authorizationStatus.allowsDelivery
        }
    }

    func notificationSettings() async -> NotificationSettings {
        lock.withLock { current }
    }
}

/// Device tokens, scripted: given on `register()`, later, or never.
final class FakeTokenSource: DeviceTokenSource, @unchecked Sendable {
    // @unchecked: state under `lock`; the stream is made once.
    private let lock = NSLock()
    private let stream: AsyncStream<Data>
    private let continuation: AsyncStream<Data>.Continuation
    private var registrations = 0
    /// The token the OS gives when asked; nil: it gives none (yet).
    var tokenOnRegister: Data?

    init(tokenOnRegister: Data? = FakeTokenSource.token(1)) {
        (stream, continuation) = AsyncStream.makeStream()
        self.tokenOnRegister = tokenOnRegister
    }

    static func token(_ n: UInt8) -> Data { Data(repeating: n, count: 32) }

    var registerCalls: Int { lock.withLock { registrations } }

    func register() async {
        let token = lock.withLock {
            registrations += 1
            return tokenOnRegister
        }
        if let token { continuation.yield(token) }
    }

    func tokens() -> AsyncStream<Data> { stream }

    /// The OS gives a token on its own (late, or a new one).
    func send(_ token: Data) { continuation.yield(token) }
}

/// The server's device and preference API, in memory.
final class FakeDeviceServer: @unchecked Sendable {
    // @unchecked: state under `lock`.
    private let lock = NSLock()
    let preferences = Fixtures.PreferenceServer()
    private(set) var devices: [String: (id: UUID, registration: DeviceRegistration, user: String)] = [:]
    /// Statuses for the next device registrations instead of accepting them.
    var registrationFailures: [Int] = []
    /// Statuses for the next preference reads instead of answering them.
    var readFailures: [Int] = []

    var registrations: [DeviceRegistration] = []
    var deletions: [(id: String, authorization: String?)] = []

    func handle(_ request: FakeTransport.Recorded) throws -> (Int, [String: String], Data) {
        let failure = #"{"error":{"code":"unavailable","message":"the server is busy"}}"#
        if request.path.hasPrefix("/v1/me/devices") {
            return lock.withLock {
                if request.method == "DELETE" {
                    let id = String(request.path.split(separator: "/").last ?? "")
                    deletions.append((id, request.header("Authorization")))
                    devices = devices.filter { $0.value.id.uuidString != id }
                    return (204, [:], Data())
                }
                if !registrationFailures.isEmpty {
                    return (registrationFailures.removeFirst(), [:], Data(failure.utf8))
                }
                guard let body = try? JSONDecoder().decode(DeviceRegistration.self, from: request.body ?? Data()),
                    let token = body.token
                else { return (422, [:], Data()) }
                registrations.append(body)
                let id = devices[token]?.id ?? UUID()
                let created = devices[token] == nil
                devices[token] = (id, body, request.header("Authorization") ?? "")
                let record = DeviceRecord(
                    id: id, platform: .apns, token: token, environment: body.environment, topic: body.topic,
                    endpoint: nil, authorization: body.authorization ?? .authorized, settings: body.settings ?? .init(),
                    locale: body.locale, appVersion: body.appVersion, userAgent: nil, createdAt: Date(),
                    updatedAt: Date(), retiredAt: nil, retiredReason: nil)
                return (created ? 201 : 200, [:], Fixtures.json(record))
            }
        }
        if request.method == "GET",
            let status = lock.withLock({ readFailures.isEmpty ? nil : readFailures.removeFirst() })
        {
            return (status, [:], Data(failure.utf8))
        }
        return try preferences.handle(request)
    }
}

/// Holds requests of one method until released, to look at the app while they are in flight.
final class GatedTransport: HTTPTransport, @unchecked Sendable {
    // @unchecked: state under `lock`.
    private let lock = NSLock()
    let inner: FakeTransport
    private var heldMethods: Set<String> = []
    private var waiting: [CheckedContinuation<Void, Never>] = []

    init(_ inner: FakeTransport) {
        self.inner = inner
    }

    func hold(_ method: String) { lock.withLock { _ = heldMethods.insert(method) } }

    var heldCount: Int { lock.withLock { waiting.count } }

    /// Lets every held request go on, and stops holding.
    func release() {
        let released = lock.withLock {
            heldMethods.removeAll()
            defer { waiting.removeAll() }
            return waiting
        }
        released.forEach { $0.resume() }
    }

    func data(for request: URLRequest) async throws -> (Data, HTTPURLResponse) {
        if lock.withLock({ heldMethods.contains(request.httpMethod ?? "GET") }) {
            await withCheckedContinuation { continuation in
                lock.withLock { waiting.append(continuation) }
            }
        }
        return try await inner.data(for: request)
    }

    func stream(for request: URLRequest) async throws -> (HTTPURLResponse, AsyncThrowingStream<Data, any Error>) {
        try await inner.stream(for: request)
    }
}

@MainActor
enum Eventually {
    /// Lets other tasks run until `condition` holds (work on the main actor and fakes that answer
    /// at once need only turns, never time).
    static func until(_ what: String, _ condition: () -> Bool) async throws {
        for _ in 0..<2_000 {
            if condition() { return }
            await Task.yield()
            try await Task.sleep(for: .milliseconds(1))
        }
        throw TestFailure("never happened: \(what)")
    }
}
