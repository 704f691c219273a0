import BelfryClient
import BelfryCore
import BelfryServer
import BelfryTestServers
import BelfryWebPush
import Foundation
import NIOPosix

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

// Benchmarks and interop helpers that need Belfry's code in process:
//   belfry-bench apns [COUNT] [CONCURRENCY]   APNs provider vs h2load (scripts/benchmark)
//   belfry-bench fcm [COUNT] [CONCURRENCY]    FCM provider vs h2load (scripts/benchmark)
//   belfry-bench webpush [COUNT] [CONCURRENCY] Web Push encryption and sends, as JSON (scripts/benchmark_webpush.py)
//   belfry-bench webpush-encrypt [COUNT]       the encryption alone, as JSON (a round of scripts/benchmark_webpush.py)
//   belfry-bench webpush-interop              encrypt for keys on stdin (Tests/interop/webpush_interop.py)
//   belfry-bench sdk [TOGGLES] [CATEGORIES]    SDK preference writes per debounce window, and toggle latency
//   belfry-bench apns-server [EXPECT]         the APNs test server alone, until stopped; its settings as JSON, then
//                                             a line when the EXPECTth push is answered (scripts/benchmark_push_queue.py)
//   belfry-bench fcm-server [EXPECT]          the same for FCM (scripts/benchmark_push_queue.py --platform fcm)
//   belfry-bench webhook URL [COUNT] [CONCURRENCY]  the webhook channel alone, as JSON (scripts/benchmark_delivery.py)
//   belfry-bench email PORT [COUNT] [CONNECTIONS] [prepared]  emails to a loopback relay (scripts/benchmark_email.py)
let arguments = Array(CommandLine.arguments.dropFirst())
func number(_ index: Int, default value: Int) -> Int {
    arguments.count > index ? Int(arguments[index]) ?? value : value
}

switch arguments.first {
case "apns":
    try await benchmarkAPNs(count: number(1, default: 20_000), concurrency: number(2, default: 100))
case "fcm":
    try await benchmarkFCM(count: number(1, default: 20_000), concurrency: number(2, default: 100))
case "webpush":
    try await benchmarkWebPush(count: number(1, default: 5_000), concurrency: number(2, default: 100))
case "webpush-encrypt":
    try await benchmarkWebPush(count: number(1, default: 5_000), concurrency: 0)
case "webpush-interop":
    webPushInterop()
case "apns-server":
    try await runAPNsServer(arrivals: ArrivalCount(expected: number(1, default: 0)))
case "fcm-server":
    try await runFCMServer(arrivals: ArrivalCount(expected: number(1, default: 0)))
case "webhook" where arguments.count > 1:
    let result = try await WebhookBenchmark.run(
        url: arguments[1], count: number(2, default: 20_000), concurrency: number(3, default: 128),
        eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
    print(#"{"sent": \#(result.sent), "seconds": \#(result.seconds), "cpu_seconds": \#(result.cpuSeconds)}"#)
case "email":
    let result = try await EmailBenchmark.run(
        count: number(2, default: 2_000), connections: number(3, default: 1), port: number(1, default: 25),
        prepared: arguments.contains("prepared"), eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
    let sample = FileManager.default.temporaryDirectory.appendingPathComponent("belfry-email-sample.eml")
    try Data(result.sample.utf8).write(to: sample)
    print(
        #"{"sent": \#(result.sent), "failed": \#(result.failed), "seconds": \#(result.seconds), "sample": "\#(sample.path)"}"#
    )
case "sdk":
    await benchmarkSDK(toggles: number(1, default: 1_000), categories: number(2, default: 20))
default:
    FileHandle.standardError.write(
        Data("usage: belfry-bench apns|fcm|webpush [COUNT] [CONCURRENCY] | webpush-interop\n".utf8))
    exit(2)
}

/// This process's CPU time so far, user and system, in seconds.
func processCPUSeconds() -> Double { ProcessFigures.cpuSeconds }

/// Prints one line of JSON once the `expected`th push has been answered 200: how many, and when
/// (Unix seconds). A benchmark then times the last arrival at the provider without polling the
/// server it measures (a scrape of its metrics every 20 ms took PostgreSQL 3 ms each).
final class ArrivalCount: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    /// Zero: nothing is printed.
    let expected: Int

    init(expected: Int) {
        self.expected = expected
    }

    func answered(_ status: Int) {
        // An error answer is not an arrival: the push is tried again, and counted then.
        guard status == 200 else { return }
        let reached = lock.withLock {
            count += 1
            return count == expected
        }
        guard reached else { return }
        let line = #"{"arrived": \#(expected), "at": \#(Date().timeIntervalSince1970)}"# + "\n"
        FileHandle.standardOutput.write(Data(line.utf8))
    }
}

/// Runs the APNs test server (its own event loop, as in `benchmarkAPNs`) until the process is
/// stopped, and prints what `belfry serve` needs to reach it: its URL, and files with its key and
/// its certificate authority.
func runAPNsServer(arrivals: ArrivalCount) async throws {
    let server = try await APNsTestServer(
        records: false, group: MultiThreadedEventLoopGroup(numberOfThreads: 1), answered: arrivals.answered)
    try await announceAndWait(
        "apns", settings: ["url": server.url, "key_id": server.keyID, "team_id": server.teamID],
        files: [
            ("key_path", "key.p8", server.keyPEM), ("ca_path", "ca.pem", server.authority.certificatePEM),
        ])
}

/// Runs the FCM test server (its token endpoint included) until the process is stopped, and
/// prints what `belfry serve` needs to reach it: its URL, and files with the service account
/// and the certificate authority.
func runFCMServer(arrivals: ArrivalCount) async throws {
    let server = try await FCMTestServer(
        records: false, group: MultiThreadedEventLoopGroup(numberOfThreads: 1), answered: arrivals.answered)
    try await announceAndWait(
        "fcm", settings: ["url": server.url],
        files: [
            ("service_account_path", "service-account.json", server.serviceAccountJSON),
            ("ca_path", "ca.pem", server.authority.certificatePEM),
        ])
}

/// Writes each of `files` to a folder of its own, prints `settings` with each file's path under
/// its key as one line of JSON (the script reads it while this keeps running), then waits until
/// the process is stopped.
func announceAndWait(
    _ name: String, settings: [String: String], files: [(key: String, file: String, contents: String)]
) async throws {
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("belfry-\(name)-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    var settings = settings
    for (key, file, contents) in files {
        let path = folder.appendingPathComponent(file)
        try Data(contents.utf8).write(to: path)
        settings[key] = path.path
    }
    FileHandle.standardOutput.write(try JSONSerialization.data(withJSONObject: settings, options: [.sortedKeys]))
    FileHandle.standardOutput.write(Data("\n".utf8))
    while true { try await Task.sleep(for: .seconds(3600)) }
}

func benchmarkAPNs(count: Int, concurrency: Int) async throws {
    // The server has an event loop of its own, as it has under h2load (another process): the
    // client's connection then never shares the server's thread.
    let serverGroup = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    let server = try await APNsTestServer(records: false, group: serverGroup)
    let apns = ServerConfiguration.APNs(
        keyPEM: server.keyPEM, keyID: server.keyID, teamID: server.teamID, topic: "org.example.reader", url: server.url)
    try await compareWithH2load(name: "pushes", url: server.url, count: count, concurrency: concurrency) {
        try await APNsBenchmark.run(
            count: count, concurrency: concurrency, apns: apns, extraCertificatesPEM: server.authority.certificatePEM,
            eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
    }
    await server.shutdown()
    try await serverGroup.shutdownGracefully()
}

func benchmarkFCM(count: Int, concurrency: Int) async throws {
    let serverGroup = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    let server = try await FCMTestServer(records: false, group: serverGroup)
    let fcm = ServerConfiguration.FCM(serviceAccountJSON: server.serviceAccountJSON, url: server.url)
    try await compareWithH2load(name: "messages", url: server.url, count: count, concurrency: concurrency) {
        try await FCMBenchmark.run(
            count: count, concurrency: concurrency, fcm: fcm, extraCertificatesPEM: server.authority.certificatePEM,
            eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
    }
    await server.shutdown()
    try await serverGroup.shutdownGracefully()
}

/// Runs Belfry's provider against a test server in this process, then h2load (another process)
/// sending the same requests to the same server over one connection, and prints both rates,
/// their ratio and the CPU time per request of the client and of the server.
func compareWithH2load(
    name: String, url: String, count: Int, concurrency: Int,
    _ belfry: () async throws -> PushBenchmark.Result
) async throws {
    // The server runs in this process: its CPU time is measured alone while h2load sends the
    // same requests, and taken from the total to leave the client's.
    let belfryCPU = processCPUSeconds()
    let result = try await belfry()
    let bothCPU = processCPUSeconds() - belfryCPU
    print(
        "belfry: \(result.sent) sent, \(result.failed) failed in \(String(format: "%.3f", result.seconds)) s: "
            + "\(Int(Double(result.sent) / result.seconds)) \(name)/s (concurrency \(concurrency))")

    let payloadPath = FileManager.default.temporaryDirectory.appendingPathComponent("belfry-push-payload.json").path
    try result.payload.write(to: URL(fileURLWithPath: payloadPath))
    let h2load = Process()
    h2load.executableURL = URL(fileURLWithPath: "/usr/bin/h2load")
    h2load.arguments =
        ["-n", "\(count)", "-c", "1", "-m", "\(concurrency)", "-d", payloadPath]
        + result.headers.flatMap { ["-H", "\($0.0): \($0.1)"] } + ["\(url)\(result.path)"]
    let pipe = Pipe()
    h2load.standardOutput = pipe
    let serverCPUStart = processCPUSeconds()
    try h2load.run()
    let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    h2load.waitUntilExit()
    let serverCPU = processCPUSeconds() - serverCPUStart
    let lines = output.split(separator: "\n")
    let line = lines.first { $0.contains("req/s") && $0.contains("finished in") }
    print("h2load: \(line.map(String.init) ?? "no result:\n\(output)")")
    print("h2load \(lines.first { $0.hasPrefix("status codes:") }.map(String.init) ?? "")")
    if let line, let match = line.firstMatch(of: /([0-9.]+) req\/s/), let rate = Double(match.output.1) {
        let ratio = Double(result.sent) / result.seconds / rate
        print("ratio belfry/h2load: \(String(format: "%.2f", ratio)) (target: at least 0.90)")
    }
    print(
        String(
            format: "CPU per request: client %.1f µs, test server %.1f µs (the server's measured under h2load)",
            (bothCPU - serverCPU) / Double(count) * 1e6, serverCPU / Double(count) * 1e6))
}

/// Encrypts `count` messages, and times the floor; then, unless `concurrency` is 0, sends them.
func benchmarkWebPush(count: Int, concurrency: Int) async throws {
    let endpoint = try await WebPushTestEndpoint(records: false)
    let subscriber = endpoint.subscribe("bench")
    let payload = WebPushBenchmark.samplePayload()
    let encryptSeconds = try WebPushBenchmark.encrypt(
        payload, count: count, p256dh: subscriber.p256dh, auth: subscriber.auth)
    let floorSeconds = try WebPushBenchmark.floor(count: count, p256dh: subscriber.p256dh, auth: subscriber.auth)
    var report: [String: Any] = [
        "payload": Base64URL.encode(payload), "count": count, "encrypt_seconds": encryptSeconds,
        "floor_seconds": floorSeconds,
    ]
    if concurrency > 0 {
        let (accepted, sendSeconds) = try await WebPushBenchmark.send(
            payload, count: count, concurrency: concurrency, endpoint: subscriber.endpoint,
            p256dh: subscriber.p256dh, auth: subscriber.auth, extraCertificatesPEM: endpoint.authority.certificatePEM,
            eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
        report.merge(["sent": accepted, "send_seconds": sendSeconds, "concurrency": concurrency]) { $1 }
    }
    print(String(decoding: try JSONSerialization.data(withJSONObject: report, options: [.sortedKeys]), as: UTF8.self))
    await endpoint.shutdown()
}

/// Reads {"p256dh", "auth", "plaintext" (base64url), "padding"?, "audience", "subject"} on stdin;
/// writes {"ciphertext" (base64url), "authorization"}, signing with a new VAPID key.
func webPushInterop() {
    struct Request: Decodable {
        let p256dh: String
        let auth: String
        let plaintext: String
        let padding: Int?
        let audience: String
        let subject: String
    }
    struct Response: Encodable {
        let ciphertext: String
        let authorization: String
    }
    do {
        let request = try JSONDecoder().decode(Request.self, from: FileHandle.standardInput.readDataToEndOfFile())
        guard let plaintext = Base64URL.decode(request.plaintext) else {
            throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "plaintext is not base64url"))
        }
        let keys = try WebPushSubscriberKeys(p256dh: request.p256dh, auth: request.auth)
        let ciphertext = try WebPushEncryption.encrypt(plaintext, for: keys, padding: request.padding ?? 0)
        let authorization = try VAPIDKey().authorization(
            audience: request.audience, subject: request.subject, expiration: Date().addingTimeInterval(12 * 3600))
        let response = Response(ciphertext: Base64URL.encode(ciphertext), authorization: authorization)
        FileHandle.standardOutput.write(try JSONEncoder().encode(response))
    } catch {
        FileHandle.standardError.write(Data("webpush-interop: \(error)\n".utf8))
        exit(1)
    }
}

/// 1 000 rapid toggles across 20 categories, one every 10 ms of (manual) clock time: how many
/// requests reach the server per 1 s debounce window, and how long each toggle takes to
/// change the local state.
@MainActor
func benchmarkSDK(toggles: Int, categories: Int) async {
    final class CountingServer: HTTPTransport, @unchecked Sendable {
        // @unchecked: `writes` is only touched under `lock`.
        let lock = NSLock()
        var writes: [Date] = []
        let clock: ManualClock
        let data: PreferenceData

        init(clock: ManualClock, categories: Int) {
            self.clock = clock
            let subcategories = (0..<categories).map {
                Category(
                    name: "Type \($0)", category: "type-\($0)", description: nil, preference: .optIn, isEditable: true,
                    channels: [CategoryChannel(channel: "push", preference: .optIn, isEditable: true)])
            }
            data = PreferenceData(
                sections: [Section(name: "Types", subcategories: subcategories)],
                channelPreferences: [ChannelPreference(channel: "push", isRestricted: false)])
        }

        func data(for request: URLRequest) async throws -> (Data, HTTPURLResponse) {
            let body: Data
            if request.httpMethod == "POST" {
                lock.withLock { writes.append(clock.now()) }
                body = try JSONEncoder().encode(
                    PreferenceChangesResponse(results: [.init(tenant: "enwiki", etag: "\"v\"", preferences: data)]))
            } else {
                body = try JSONEncoder().encode(data)
            }
            return (
                body,
                HTTPURLResponse(url: request.url!, statusCode: 200, httpVersion: nil, headerFields: ["ETag": "\"v\""])!
            )
        }

        func stream(for request: URLRequest) async throws -> (HTTPURLResponse, AsyncThrowingStream<Data, any Error>) {
            throw URLError(.unsupportedURL)
        }
    }

    let clock = ManualClock()
    let server = CountingServer(clock: clock, categories: categories)
    let start = clock.now()
    let client = BelfryClient(
        baseURL: URL(string: "https://belfry.invalid")!, tokenProvider: ClosureTokenProvider { _ in "token" },
        transport: server, clock: clock, store: InMemoryKeyValueStore())
    _ = await client.preferences.getPreferences(args: .init(tenantId: "enwiki"))
    var latencies: [Double] = []
    for index in 0..<toggles {
        let category = "type-\(index % categories)"
        let preference: PreferenceOptions = (index / categories).isMultiple(of: 2) ? .optOut : .optIn
        let started = ContinuousClock.now
        _ = await client.preferences.updateCategoryPreference(category: category, preference: preference)
        let elapsed = started.duration(to: .now)
        latencies.append(Double(elapsed.components.attoseconds) / 1e12 + Double(elapsed.components.seconds) * 1e6)
        await clock.advance(by: 0.01)
    }
    await clock.advance(by: 1)
    await client.preferences.flush()
    let writes = server.lock.withLock { server.writes }
    let windows = Dictionary(grouping: writes) { Int($0.timeIntervalSince(start)) }
    latencies.sort()
    let span = Double(toggles) * 0.01
    print(
        "\(toggles) toggles across \(categories) categories over \(span) s of clock time: \(writes.count) requests, "
            + "at most \(windows.values.map(\.count).max() ?? 0) in any 1 s window (target: at most 2)")
    print(
        String(
            format: "local update per toggle: median %.1f µs, p99 %.1f µs (target: median under 50 µs)",
            latencies[latencies.count / 2], latencies[latencies.count * 99 / 100]))
}
