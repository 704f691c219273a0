import BelfryTestSupport
import NIOConcurrencyHelpers
import Testing

@testable import BelfryServer

@Suite("Group commit: concurrent callers share commits")
struct GroupCommitTests {
    struct Refused: Error, Equatable {
        var item: Int
    }

    /// The groups committed, and the most committing at once.
    final class Log: Sendable {
        private let state = NIOLockedValueBox((groups: [[Int]](), committing: 0, most: 0))

        func begin(_ items: [Int]) {
            state.withLockedValue {
                $0.groups.append(items)
                $0.committing += 1
                $0.most = max($0.most, $0.committing)
            }
        }

        func end() { state.withLockedValue { $0.committing -= 1 } }
        var groups: [[Int]] { state.withLockedValue { $0.groups } }
        var most: Int { state.withLockedValue { $0.most } }
    }

    /// 50 callers while each commit takes a while: all are committed, in groups of at most
    /// `maxGroup`, one at a time, and only the refused item's caller fails.
    @Test("callers arriving during a commit share the next; each hears its own item's error")
    func grouped() async throws {
        let commits = GroupCommit<Int>(maxGroup: 8)
        let log = Log()
        let commit: GroupCommit<Int>.Commit = { items, _ in
            log.begin(items)
            defer { log.end() }
            // The first commit waits for a crowd to gather behind it.
            if log.groups.count == 1 {
                while commits.waiting < 48 { await Task.yield() }
            }
            try await Task.sleep(for: .milliseconds(2))
            return items.map { $0 == 13 ? Refused(item: $0) : nil }
        }
        let results = await withTaskGroup(of: (Int, (any Error)?).self) { group in
            for item in 0..<50 {
                group.addTask {
                    do {
                        try await commits.run(item, commit: commit)
                        return (item, nil)
                    } catch {
                        return (item, error)
                    }
                }
            }
            return await group.reduce(into: [Int: (any Error)?]()) { $0[$1.0] = $1.1 }
        }
        #expect(results.count == 50)
        #expect(results.filter { $0.value != nil }.map(\.key) == [13])
        #expect((results[13] ?? nil) as? Refused == Refused(item: 13))
        let groups = log.groups
        #expect(groups.flatMap { $0 }.sorted() == Array(0..<50), "each item committed once")
        #expect(groups.allSatisfy { $0.count <= 8 })
        #expect(groups.count <= 8, "callers shared commits: \(groups.map(\.count))")
        #expect(log.most == 1, "one group at a time")
    }

    /// With three lanes, groups commit side by side, never more than three at once, and each
    /// item once.
    @Test("lanes: up to that many groups commit at once", .timeLimit(.minutes(1)))
    func lanes() async throws {
        let commits = GroupCommit<Int>(maxGroup: 8, lanes: 3)
        let log = Log()
        let commit: GroupCommit<Int>.Commit = { items, _ in
            log.begin(items)
            defer { log.end() }
            // The first groups wait until three commit at once.
            while log.groups.count < 3 { await Task.yield() }
            try await Task.sleep(for: .milliseconds(2))
            return items.map { _ in nil }
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for item in 0..<60 {
                group.addTask { try await commits.run(item, commit: commit) }
            }
            try await group.waitForAll()
        }
        let groups = log.groups
        #expect(groups.flatMap { $0 }.sorted() == Array(0..<60), "each item committed once")
        #expect(groups.allSatisfy { $0.count <= 8 })
        #expect(log.most == 3, "three groups at once, never more: \(log.most)")
        #expect(commits.waiting == 0)
    }

    /// With a spare lane: callers behind a group that sticks wait until it has committed for
    /// `spareAfter`, then share the spare; once the lanes move again, a crowd of quick commits
    /// shares one lane. Time is the test's: the spare's moment does not race the callers queueing.
    @Test("spare lanes: one opens only behind a stuck lane, and a busy spell shares one", .timeLimit(.minutes(1)))
    func spareLanes() async throws {
        let clock = TestClock()
        let (start, origin) = (clock.now, ContinuousClock.now)
        let commits = GroupCommit<Int>(
            maxGroup: 8, lanes: 2, spareAfter: .seconds(3), clock: clock,
            now: { origin + .seconds(clock.now.timeIntervalSince(start)) })
        let log = NIOLockedValueBox(Log())
        let stuck = NIOLockedValueBox(true)
        let commit: GroupCommit<Int>.Commit = { items, _ in
            let current = log.withLockedValue { $0 }
            current.begin(items)
            defer { current.end() }
            if items.contains(0) {
                while stuck.withLockedValue({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
            } else {
                try await Task.sleep(for: .milliseconds(1))
            }
            return items.map { _ in nil }
        }
        let first = Task { try await commits.run(0, commit: commit) }
        while log.withLockedValue({ $0.groups.isEmpty }) { await Task.yield() }
        let behind = (1...5).map { item in Task { try await commits.run(item, commit: commit) } }
        while commits.waiting < 5 || clock.sleeping == 0 { try await Task.sleep(for: .milliseconds(1)) }
        #expect(clock.sleeping == 1, "one check of the spare is armed, for the five waiting")

        clock.advance(by: 2.9)
        #expect(clock.sleeping == 1, "the check is still waiting for the lane's 3 s")
        try await Task.sleep(for: .milliseconds(50))
        #expect(commits.waiting == 5, "the spare opened before the first lane had stuck")
        #expect(log.withLockedValue { $0.groups.count } == 1)

        // Past 3 s, not onto it: 2.9 + 0.1 may round a hair short of the deadline.
        clock.advance(by: 0.2)
        for task in behind { try await task.value }
        let stuckSpell = log.withLockedValue { $0 }
        #expect(stuckSpell.groups.map { $0.sorted() } == [[0], [1, 2, 3, 4, 5]], "\(stuckSpell.groups)")
        #expect(stuckSpell.most == 2, "the spare committed beside the stuck lane")
        stuck.withLockedValue { $0 = false }
        try await first.value

        let busySpell = Log()
        log.withLockedValue { $0 = busySpell }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for item in 100..<140 {
                group.addTask { try await commits.run(item, commit: commit) }
            }
            try await group.waitForAll()
        }
        #expect(busySpell.groups.flatMap { $0 }.sorted() == Array(100..<140), "each item committed once")
        #expect(busySpell.most == 1, "quick commits share one lane: \(busySpell.most)")
        #expect(busySpell.groups.count < 40, "callers shared groups: \(busySpell.groups.map(\.count))")
        #expect(commits.waiting == 0)
        clock.advance(by: 60)  // lets any check still armed see that nobody waits
    }

    /// A commit that calls `begun` hands its lane on at once: with one lane, the next group
    /// begins while the first is still being committed, and no third begins until the second
    /// has called `begun` too.
    @Test("begun: the next group gathers and begins while this one is committed", .timeLimit(.minutes(1)))
    func handedOnWhenBegun() async throws {
        let commits = GroupCommit<Int>(maxGroup: 100)
        let log = Log()
        let commit: GroupCommit<Int>.Commit = { items, begun in
            log.begin(items)
            defer { log.end() }
            let number = log.groups.count
            if number == 1 {
                while commits.waiting < 5 { await Task.yield() }
                begun()
                // Holds on until the next group has begun beside it.
                while log.groups.count < 2 { await Task.yield() }
            } else if number == 2 {
                while commits.waiting < 1 { await Task.yield() }
                // Not yet begun: the caller waiting behind it waits too.
                try await Task.sleep(for: .milliseconds(20))
                #expect(log.groups.count == 2, "a third group began before the second called begun")
                begun()
            }
            return items.map { _ in nil }
        }
        let first = Task { try await commits.run(0, commit: commit) }
        while log.groups.isEmpty { await Task.yield() }
        let others = (1...5).map { item in Task { try await commits.run(item, commit: commit) } }
        while log.groups.count < 2 { await Task.yield() }
        let last = Task { try await commits.run(6, commit: commit) }
        try await first.value
        for other in others { try await other.value }
        try await last.value
        #expect(log.groups.map { $0.sorted() } == [[0], [1, 2, 3, 4, 5], [6]], "\(log.groups)")
        #expect(log.most == 2, "the second began while the first was committed: \(log.most)")
        #expect(commits.waiting == 0)
    }

    @Test("a commit that fails as a whole fails every caller in its group, and the next group goes on")
    func wholeGroupFails() async throws {
        let commits = GroupCommit<Int>(maxGroup: 100)
        let attempts = NIOLockedValueBox(0)
        let commit: GroupCommit<Int>.Commit = { items, _ in
            let attempt = attempts.withLockedValue {
                $0 += 1
                return $0
            }
            if attempt == 1 {
                while commits.waiting < 5 { await Task.yield() }
                throw Refused(item: -1)
            }
            return items.map { _ in nil }
        }
        let first = Task { try await commits.run(0, commit: commit) }
        // The first leads alone; the others arrive while its commit runs, and share the second.
        while attempts.withLockedValue({ $0 }) == 0 { await Task.yield() }
        let others = (1...5).map { item in Task { try await commits.run(item, commit: commit) } }
        await #expect(throws: Refused.self) { try await first.value }
        for other in others { try await other.value }
        #expect(attempts.withLockedValue { $0 } == 2, "the five shared one commit")
    }
}

@Suite("The SQLite write gate: sessions of transactions on one connection")
struct WriteGateTests {
    struct NoConnection: Error {}

    /// Sessions opened and transactions run, with the writes of each.
    final class Log: Sendable {
        private let state = NIOLockedValueBox((sessions: 0, transactions: [[Int]](), refuseSessions: 0))

        func refuseNextSession() { state.withLockedValue { $0.refuseSessions += 1 } }

        /// Counts a session; false when it is to be refused.
        func openSession() -> Bool {
            state.withLockedValue {
                guard $0.refuseSessions == 0 else {
                    $0.refuseSessions -= 1
                    return false
                }
                $0.sessions += 1
                return true
            }
        }

        func transaction(_ writes: Int) { state.withLockedValue { $0.transactions.append([writes]) } }
        var sessions: Int { state.withLockedValue { $0.sessions } }
        var transactions: [Int] { state.withLockedValue { $0.transactions.map { $0[0] } } }
    }

    @Test("a busy spell's writes share transactions on one session; a session that cannot open fails its waiters only")
    func sessions() async throws {
        try await withBelfry(.sqlite) { app in
            let gate = WriteGate(maxGroup: 10)
            let log = Log()
            let database = app.db
            let session: WriteGate.Session = { body in
                guard log.openSession() else { throw NoConnection() }
                try await body(database)
            }
            let transaction: WriteGate.Transaction = { writes, connection in
                log.transaction(writes.count)
                // The first transaction waits for the crowd to gather behind it.
                if log.transactions.count == 1 {
                    while gate.waiting < 100 - writes.count { try await Task.sleep(for: .milliseconds(1)) }
                }
                var errors: [(any Error)?] = []
                for write in writes {
                    do {
                        try await write(connection)
                        errors.append(nil)
                    } catch {
                        errors.append(error)
                    }
                }
                return errors
            }
            let results = await withTaskGroup(of: Int?.self) { group in
                for index in 0..<100 {
                    group.addTask {
                        try? await gate.run({ _ in index }, session: session, transaction: transaction)
                    }
                }
                return await group.reduce(into: [Int]()) { if let value = $1 { $0.append(value) } }
            }
            #expect(results.sorted() == Array(0..<100), "each write ran once and returned its own value")
            #expect(log.transactions.reduce(0, +) == 100)
            #expect(log.transactions.allSatisfy { $0 <= 10 })
            #expect(log.transactions.count <= 11, "the first, then groups of ten: \(log.transactions)")
            #expect(log.sessions == 1, "one session for the spell: \(log.sessions)")

            log.refuseNextSession()
            await #expect(throws: NoConnection.self) {
                try await gate.run({ _ in 1 }, session: session, transaction: transaction)
            }
            let next = try await gate.run({ _ in 2 }, session: session, transaction: transaction)
            #expect(next == 2, "the next write opens a session anew")
        }
    }
}
