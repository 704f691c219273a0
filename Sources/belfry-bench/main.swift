import BelfryServer
import BelfryTestServers
import Foundation
import NIOPosix

// Benchmarks that need Belfry's own code in process. Run through scripts/benchmark_apns.sh.
// Usage: belfry-bench apns [COUNT] [CONCURRENCY]
let arguments = CommandLine.arguments.dropFirst()
guard arguments.first == "apns" else {
    FileHandle.standardError.write(Data("usage: belfry-bench apns [COUNT] [CONCURRENCY]\n".utf8))
    exit(2)
}
let count = arguments.dropFirst().first.flatMap(Int.init) ?? 20_000
let concurrency = arguments.dropFirst(2).first.flatMap(Int.init) ?? 100

let server = try await APNsTestServer(records: false)
let apns = ServerConfiguration.APNs(
    keyPEM: server.keyPEM, keyID: server.keyID, teamID: server.teamID, topic: "org.example.reader", url: server.url)
let result = try await APNsBenchmark.run(
    count: count, concurrency: concurrency, apns: apns, extraCertificatesPEM: server.authority.certificatePEM,
    eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
print(
    "belfry: \(result.sent) sent, \(result.failed) failed in \(String(format: "%.3f", result.seconds)) s: \(Int(Double(result.sent) / result.seconds)) pushes/s (concurrency \(concurrency))"
)

// The same requests from h2load, against the same server, over one connection.
let payloadPath = FileManager.default.temporaryDirectory.appendingPathComponent("belfry-apns-payload.json").path
try result.payload.write(to: URL(fileURLWithPath: payloadPath))
let h2load = Process()
h2load.executableURL = URL(fileURLWithPath: "/usr/bin/h2load")
h2load.arguments =
    ["-n", "\(count)", "-c", "1", "-m", "\(concurrency)", "-d", payloadPath]
    + result.headers.flatMap { ["-H", "\($0.0): \($0.1)"] } + ["\(server.url)\(result.path)"]
let pipe = Pipe()
h2load.standardOutput = pipe
try h2load.run()
let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
h2load.waitUntilExit()
let line = output.split(separator: "\n").first { $0.contains("req/s") && $0.contains("finished in") }
let succeeded = output.split(separator: "\n").first { $0.hasPrefix("status codes:") }
print("h2load: \(line.map(String.init) ?? "no result:\n\(output)")")
print("h2load \(succeeded.map(String.init) ?? "")")
if let line, let match = line.firstMatch(of: /([0-9.]+) req\/s/), let rate = Double(match.output.1) {
    let ratio = Double(result.sent) / result.seconds / rate
    print("ratio belfry/h2load: \(String(format: "%.2f", ratio)) (target: at least 0.50)")
}
await server.shutdown()
