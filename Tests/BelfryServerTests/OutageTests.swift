import BelfryCore
import BelfryTestSupport
import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import BelfryServer

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `belfry serve` on a PostgreSQL server that goes away under load and comes back: it answers
/// 503 meanwhile, never hangs, and delivers every event it acknowledged without a restart.
@Suite("Outages: PostgreSQL stopped and started, its backends killed", .serialized)
struct OutageTests {
    static let key = "outage-test-key-0123456789abcdef"

    /// One answer to a writer.
    struct Answer: Sendable {
        var status: Int
        var seconds: TimeInterval
        var code: String?
        var retryAfter: String?
        var event: String?
    }

    /// What the writers saw.
    final class Answers: Sendable {
        private let answers = NIOLockedValueBox<[Answer]>([])
        func add(_ answer: Answer) { answers.withLockedValue { $0.append(answer) } }
        var all: [Answer] { answers.withLockedValue { $0 } }
    }

    static func send(_ method: String, _ url: String, json: String? = nil) async -> Answer {
        var request = URLRequest(url: URL(string: url)!)
        request.httpMethod = method
        request.timeoutInterval = 30
        request.setValue("Bearer \(key)", forHTTPHeaderField: "Authorization")
        if let json {
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            request.httpBody = Data(json.utf8)
        }
        let started = Date()
        guard let (data, response) = try? await URLSession.shared.data(for: request),
            let http = response as? HTTPURLResponse
        else { return Answer(status: 0, seconds: Date().timeIntervalSince(started)) }
        let body = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
        return Answer(
            status: http.statusCode, seconds: Date().timeIntervalSince(started),
            code: (body?["error"] as? [String: Any])?["code"] as? String,
            retryAfter: http.value(forHTTPHeaderField: "Retry-After"), event: body?["event_id"] as? String)
    }

    /// Writers posting one-recipient events until `running` is false.
    static func write(
        to base: String, writers: Int, running: NIOLockedValueBox<Bool>, into answers: Answers
    ) -> Task<
        Void, Never
    > {
        Task {
            await withTaskGroup(of: Void.self) { group in
                for writer in 0..<writers {
                    group.addTask {
                        var index = 0
                        while running.withLockedValue({ $0 }) {
                            let event = """
                                {"category": "login-fail", "recipients": ["w\(writer)-\(index)"],
                                 "content": {"title": "Sign-in from a new device", "body": "Number \(index)"}}
                                """
                            answers.add(await send("POST", "\(base)/v1/events", json: event))
                            index += 1
                            try? await Task.sleep(for: .milliseconds(10))
                        }
                    }
                }
            }
        }
    }

    /// Runs `outage` against a `belfry serve` under eight writers, then checks what every
    /// deployment needs: the server still up, every acknowledged event at the webhook within
    /// 30 s of the database's return, repeats only for what was in flight, no request over 5 s,
    /// and nothing but 202 and 503 `database_unavailable` (with `Retry-After`) answered.
    func underLoad(
        _ outage: (DisposablePostgresServer, String) async throws -> Date
    ) async throws -> [Answer] {
        let postgres = try await DisposablePostgresServer.start()
        defer { postgres.remove() }
        let admin = postgres.url
        try await DisposablePostgresServer.offThePool {
            try TestProcess.run("/usr/bin/psql", [admin, "-qAtc", "CREATE DATABASE belfry_outage"])
        }
        let url = postgres.url.replacingOccurrences(of: "/postgres", with: "/belfry_outage")
        let receiver = try await WebhookReceiver(answers: "200")
        defer { receiver.stop() }
        let server = try await BelfryServeProcess.start(
            database: url,
            environment: [
                "BELFRY_API_KEY": Self.key, "DATABASE_URL": "", "BELFRY_CONFIG": "", "BELFRY_LOG_LEVEL": "critical",
                "BELFRY_WEBHOOK_URL": receiver.url, "BELFRY_WEBHOOK_SECRET": WebhookReceiver.secret,
            ])
        defer { server.process.terminate() }

        let running = NIOLockedValueBox(true)
        let answers = Answers()
        let writers = Self.write(to: server.base, writers: 8, running: running, into: answers)
        try await Task.sleep(for: .seconds(2))
        let back = try await outage(postgres, server.base)
        try await Task.sleep(for: .seconds(2))
        running.withLockedValue { $0 = false }
        await writers.value

        let all = answers.all
        let accepted = Set(all.compactMap(\.event))
        #expect(!accepted.isEmpty)
        var arrived: [String: Int] = [:]
        while Date().timeIntervalSince(back) < 30 {
            // The receiver may be writing its last line: a read that ends mid-line is read again.
            guard let entries = try? receiver.entries() else {
                try await Task.sleep(for: .milliseconds(50))
                continue
            }
            arrived = [:]
            for entry in entries {
                guard case .object(let body) = entry.body, case .string(let event)? = body["event_id"] else { continue }
                arrived[event, default: 0] += 1
            }
            if accepted.isSubset(of: arrived.keys) { break }
            // Reading the receiver's log is work for the tests' few threads: not too often.
            try await Task.sleep(for: .seconds(1))
        }
        let missing = accepted.subtracting(arrived.keys)
        #expect(missing.isEmpty, "\(missing.count) of \(accepted.count) acknowledged events not delivered 30 s after")
        let repeats = arrived.values.filter { $0 > 1 }.count
        #expect(repeats <= WebhookChannel.inFlight + DeliveryQueue.unrecordedResults, "\(repeats) sent twice")
        let slowest = all.map(\.seconds).max() ?? 0
        #expect(slowest <= 5, "a request waited \(slowest) s")
        let refused = all.filter { $0.status != 202 }
        #expect(
            refused.allSatisfy { $0.status == 503 && $0.code == "database_unavailable" && $0.retryAfter != nil },
            "answers besides 202: \(Set(refused.map { "\($0.status) \($0.code ?? "-")" }))")
        #expect(kill(server.process.pid, 0) == 0, "the server is still running")
        return all
    }

    @Test("PostgreSQL stopped for 8 s under load, then started: 503 meanwhile, everything delivered after")
    func restart() async throws {
        let all = try await underLoad { postgres, base in
            try await postgres.crash()
            let stopped = Date()
            var firstNotReady: TimeInterval?
            while Date().timeIntervalSince(stopped) < 8 {
                let ready = await Self.send("GET", "\(base)/readyz")
                // Well under the pool's 10 s wait: it answers from the monitor rather than hang
                // on the database (a loaded 2-core machine has taken just over 1 s).
                #expect(ready.seconds <= 3, "/readyz took \(ready.seconds) s while the database was down")
                if ready.status == 503, firstNotReady == nil { firstNotReady = Date().timeIntervalSince(stopped) }
                try await Task.sleep(for: .milliseconds(200))
            }
            #expect((firstNotReady ?? 99) <= 3, "/readyz said 503 after \(firstNotReady ?? -1) s")
            try await postgres.restart()
            let back = Date()
            var ready = false
            while Date().timeIntervalSince(back) < 5, !ready {
                ready = await Self.send("GET", "\(base)/readyz").status == 200
                if !ready { try await Task.sleep(for: .milliseconds(100)) }
            }
            #expect(ready, "/readyz said 200 within 5 s of the database's return")
            return back
        }
        #expect(all.contains { $0.status == 503 }, "the writers saw the outage")
    }

    @Test("every backend of the database killed twice: requests and deliveries go on")
    func killedBackends() async throws {
        _ = try await underLoad { postgres, _ in
            let kill = """
                SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                WHERE datname = 'belfry_outage' AND pid <> pg_backend_pid()
                """
            for _ in 0..<2 {
                try await DisposablePostgresServer.offThePool {
                    try TestProcess.run("/usr/bin/psql", [postgres.url, "-qAtc", kill])
                }
                try await Task.sleep(for: .seconds(1))
            }
            return Date()
        }
    }
}

/// SQLite's side of the same promise: a disk that fills answers 503 and loses nothing it
/// acknowledged, and a 202 is on disk when it is answered, even under `kill -9`.
@Suite("Outages: a full disk, and kill -9 right after the 202s", .serialized)
struct StorageOutageTests {
    static let key = OutageTests.key

    static func start(_ database: String) async throws -> BelfryServeProcess {
        try await BelfryServeProcess.start(
            database: database,
            environment: [
                "BELFRY_API_KEY": key, "DATABASE_URL": "", "BELFRY_CONFIG": "", "BELFRY_LOG_LEVEL": "critical",
            ])
    }

    static func event(_ index: Int, body: String = "B") -> String {
        """
        {"category": "login-fail", "recipients": ["u\(index)"],
         "content": {"title": "Sign-in from a new device", "body": "\(body)"}}
        """
    }

    /// Whether this process may mount a file system (root on Linux): the full-disk test needs one.
    static let canMount: Bool = {
        #if os(Linux)
            return getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/mount")
        #else
            return false
        #endif
    }()

    @Test(
        "the database's disk fills: 503 storage_unavailable, every 202 kept, and writes resume once space returns",
        .enabled(if: canMount, "mounting a small tmpfs needs root"))
    func fullDisk() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("belfry-full-\(UUID())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try TestProcess.run("/usr/bin/mount", ["-t", "tmpfs", "-o", "size=4m", "tmpfs", directory])
        defer {
            _ = try? TestProcess.run("/usr/bin/umount", ["-l", directory])
            try? FileManager.default.removeItem(atPath: directory)
        }
        let server = try await Self.start("\(directory)/belfry.sqlite")
        defer { server.process.terminate() }

        // Under the 4 KB an APNs payload may carry (the category pushes too).
        let large = String(repeating: "x", count: 3_000)
        var accepted: [String] = []
        var refused: OutageTests.Answer?
        for index in 0..<3_000 {
            let answer = await OutageTests.send(
                "POST", "\(server.base)/v1/events", json: Self.event(index, body: large))
            if let event = answer.event {
                accepted.append(event)
            } else {
                refused = answer
                break
            }
        }
        let full = try #require(refused, "4 MB filled up")
        #expect(full.status == 503 && full.code == "storage_unavailable", "\(full.status) \(full.code ?? "-")")
        #expect(full.retryAfter != nil)
        #expect(!accepted.isEmpty, "some fitted first")
        #expect(kill(server.process.pid, 0) == 0, "the server is still running")

        try TestProcess.run("/usr/bin/mount", ["-o", "remount,size=64m", directory])
        var resumed = false
        for index in 0..<50 where !resumed {
            resumed =
                await OutageTests.send("POST", "\(server.base)/v1/events", json: Self.event(1_000 + index)).status
                == 202
            if !resumed { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(resumed, "writes go on once there is space")
        for event in accepted {
            #expect(await OutageTests.send("GET", "\(server.base)/v1/events/\(event)").status == 200, "\(event) kept")
        }
    }

    /// On both databases: concurrent small events are stored in groups (one transaction on
    /// SQLite, one statement on PostgreSQL), and a 202 still means that its event is stored.
    @Test(
        "kill -9 right after the last of 400 concurrent 202s: every acknowledged event is stored",
        arguments: ["sqlite", "postgres"])
    func killAfterAcknowledgement(kind: String) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("belfry-kill-\(UUID())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var database = "\(directory)/belfry.sqlite"
        var postgres: DisposablePostgresServer?
        defer { postgres?.remove() }
        if kind == "postgres" {
            let server = try await DisposablePostgresServer.start()
            postgres = server
            try await DisposablePostgresServer.offThePool {
                try TestProcess.run("/usr/bin/psql", [server.url, "-qAtc", "CREATE DATABASE belfry_kill"])
            }
            database = server.url.replacingOccurrences(of: "/postgres", with: "/belfry_kill")
        }
        let server = try await Self.start(database)
        let accepted = NIOLockedValueBox<[String]>([])
        await withTaskGroup(of: Void.self) { group in
            for writer in 0..<16 {
                group.addTask {
                    for index in stride(from: writer, to: 400, by: 16) {
                        if let event = await OutageTests.send(
                            "POST", "\(server.base)/v1/events", json: Self.event(index)
                        ).event {
                            accepted.withLockedValue { $0.append(event) }
                        }
                    }
                }
            }
        }
        #expect(server.process.terminate(signal: SIGKILL) == 128 + SIGKILL)
        let events = accepted.withLockedValue { $0 }
        #expect(events.count == 400)

        let again = try await Self.start(database)
        defer { again.process.terminate() }
        for event in events {
            #expect(await OutageTests.send("GET", "\(again.base)/v1/events/\(event)").status == 200, "\(event) stored")
        }
    }
}
