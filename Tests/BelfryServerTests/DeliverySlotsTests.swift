import BelfryCore
import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import BelfryServer

@Suite("Delivery slots: per kind and per origin")
struct DeliverySlotsTests {
    /// Starts `acquire` calls one after another, each noted in `started` once it holds its slot.
    static func waiters(
        _ slots: DeliverySlots, _ requests: [(ChannelKind, String?)], started: NIOLockedValueBox<[Int]>
    ) async -> [Task<Void, Never>] {
        var tasks: [Task<Void, Never>] = []
        for (index, (kind, origin)) in requests.enumerated() {
            let before = slots.waiting + started.withLockedValue { $0.count }
            tasks.append(
                Task {
                    await slots.acquire(kind, origin: origin)
                    started.withLockedValue { $0.append(index) }
                })
            // Each is queued (or started) before the next asks, however busy the machine.
            await eventually { slots.waiting + started.withLockedValue { $0.count } > before }
        }
        return tasks
    }

    /// Waits until `condition` holds, for up to 30 s: what a task does once woken takes a while
    /// on a machine busy with the rest of the suite.
    static func eventually(_ condition: () -> Bool) async {
        let deadline = ContinuousClock.now + .seconds(30)
        while !condition(), ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(1)) }
    }

    @Test("a released slot goes to its kind's first waiter, one at a time, in the order they came")
    func firstComeFirstServed() async throws {
        let slots = DeliverySlots(limits: [
            .apns: .init(perKind: 1, perOrigin: 1), .webhook: .init(perKind: 1, perOrigin: 1),
        ])
        await slots.acquire(.apns, origin: nil)
        await slots.acquire(.webhook, origin: nil)
        let started = NIOLockedValueBox<[Int]>([])
        let tasks = await Self.waiters(slots, [(.apns, nil), (.apns, nil), (.webhook, nil)], started: started)
        #expect(started.withLockedValue { $0 }.isEmpty, "every slot is taken")
        slots.release(.apns, origin: nil)
        await Self.eventually { !started.withLockedValue { $0 }.isEmpty }
        #expect(started.withLockedValue { $0 } == [0], "the first APNs waiter, and no other kind's")
        slots.release(.webhook, origin: nil)
        slots.release(.apns, origin: nil)
        for task in tasks { await task.value }
        #expect(Set(started.withLockedValue { $0 }) == [0, 1, 2])
        #expect(slots.running(.apns) == 1 && slots.running(.webhook) == 1)
    }

    @Test("a waiter whose origin is full lets the next one of another origin have the kind's free slot")
    func originFullWaitsOn() async throws {
        let slots = DeliverySlots(limits: [.webPush: .init(perKind: 2, perOrigin: 1)])
        await slots.acquire(.webPush, origin: "a.example")
        await slots.acquire(.webPush, origin: "b.example")
        let started = NIOLockedValueBox<[Int]>([])
        let tasks = await Self.waiters(
            slots, [(.webPush, "a.example"), (.webPush, "c.example")], started: started)
        // b's slot comes free: a's waiter still has a's origin full, c's takes the slot.
        slots.release(.webPush, origin: "b.example")
        await Self.eventually { !started.withLockedValue { $0 }.isEmpty }
        #expect(started.withLockedValue { $0 } == [1])
        #expect(slots.waiting == 1, "a's waiter still waits, its origin full")
        slots.release(.webPush, origin: "a.example")
        for task in tasks { await task.value }
        #expect(started.withLockedValue { $0 } == [1, 0])
        #expect(slots.running(.webPush) == 2)
    }

    @Test("reserve takes only the free slots, and a release gives one back")
    func reserveUpTo() {
        let slots = DeliverySlots(limits: [.webhook: .init(perKind: 4, perOrigin: 4)])
        #expect(slots.reserve(upTo: 3, of: .webhook) == 3)
        #expect(slots.reserve(upTo: 3, of: .webhook) == 1)
        #expect(slots.reserve(upTo: 3, of: .webhook) == 0)
        slots.release(.webhook, origin: nil)
        #expect(slots.reserve(upTo: 3, of: .webhook) == 1)
        #expect(slots.running(.webhook) == 4)
    }
}
