import BelfryTestSupport
import Foundation
import Testing

/// A peer that accepts connections, says nothing and never closes them: a relay or push
/// service that hangs. It prints `accepted N` as each arrives.
struct SilentServer {
    let process: BackgroundProcess
    let port: Int

    init() async throws {
        process = try BackgroundProcess(
            "/usr/bin/env",
            [
                "python3", "-c",
                "import socket\ns = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(256)\n"
                    + "print('listening', s.getsockname()[1], flush=True)\nheld = []\n"
                    + "while True:\n    held.append(s.accept()); print('accepted', len(held), flush=True)",
            ])
        let output = try await process.waitForOutput(containing: "listening ")
        port = Int(try #require(output.firstMatch(of: /listening (\d+)/)).output.1)!
    }

    /// Connections it has accepted so far.
    var accepted: Int { process.output.matches(of: /accepted (\d+)/).count }

    func stop() { process.terminate() }
}
