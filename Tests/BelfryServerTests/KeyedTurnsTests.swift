import NIOConcurrencyHelpers
import Testing

@testable import BelfryServer

@Suite("One write per key at a time")
struct KeyedTurnsTests {
    /// Who is running now, per key, the most that ever ran at once, and the order ada's ran in.
    final class Tally: Sendable {
        private let state = NIOLockedValueBox((running: [String: Int](), most: [String: Int](), order: [Int]()))

        func enter(_ key: String, _ index: Int) {
            state.withLockedValue {
                $0.running[key, default: 0] += 1
                $0.most[key] = max($0.most[key] ?? 0, $0.running[key]!)
                if key == "ada" { $0.order.append(index) }
            }
        }

        func leave(_ key: String) { state.withLockedValue { $0.running[key]! -= 1 } }
        var most: [String: Int] { state.withLockedValue { $0.most } }
        var order: [Int] { state.withLockedValue { $0.order } }
    }

    struct Refused: Error {}

    @Test("callers of one key run one at a time, first come first served; other keys run beside them")
    func oneAtATime() async throws {
        let turns = KeyedTurns<String>()
        let tally = Tally()
        let graceSawAdaLine = NIOLockedValueBox<Int?>(nil)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<20 {
                group.addTask {
                    try await turns.run("ada") {
                        tally.enter("ada", index)
                        defer { tally.leave("ada") }
                        // The first holds the key until grace, another key, has run beside it.
                        while index == 0, graceSawAdaLine.withLockedValue({ $0 }) == nil { await Task.yield() }
                        if index == 7 { throw Refused() }
                    }
                }
                // Each caller is in line before the next one asks.
                while turns.queued("ada") < index + 1 { await Task.yield() }
            }
            group.addTask {
                try await turns.run("grace") {
                    tally.enter("grace", 0)
                    defer { tally.leave("grace") }
                    graceSawAdaLine.withLockedValue { $0 = turns.queued("ada") }
                }
            }
            var refused = 0
            while let next = await group.nextResult() {
                if case .failure(let error) = next {
                    #expect(error is Refused)
                    refused += 1
                }
            }
            #expect(refused == 1, "a failing turn fails its own caller only")
        }
        #expect(tally.most == ["ada": 1, "grace": 1])
        #expect(tally.order == Array(0..<20), "in the order they asked")
        #expect(graceSawAdaLine.withLockedValue { $0 } == 20, "grace ran while all of ada's line waited")
        #expect(turns.queued("ada") == 0 && turns.queued("grace") == 0, "an idle key keeps nothing")
    }
}
