import BelfryCore
import BelfryTestSupport
import Foundation
import NIOConcurrencyHelpers
import SQLKit
import Testing
import Vapor

@testable import BelfryServer

/// Fan-out offers the deliveries it has just written, due now on webhook and push channels, to
/// the pipeline running beside it, which claims them by id and starts them as built, without a
/// search of the queue or a read. What a provider is given must not change for that.
@Suite("Fan-out's offers to the running pipeline")
struct DeliveryOffersTests {
    /// Keeps each delivery it is given and answers that it was sent.
    final class Recorder: DeliveryProvider {
        private let delivered = NIOLockedValueBox<[Delivery]>([])
        var maxAttempts: Int { 3 }
        let concurrency: Int
        /// How long each send takes.
        let delay: Duration

        init(concurrency: Int, delay: Duration = .zero) {
            self.concurrency = concurrency
            self.delay = delay
        }

        func deliver(_ delivery: Delivery) async -> DeliveryResult {
            if delay > .zero { try? await Task.sleep(for: delay) }
            delivered.withLockedValue { $0.append(delivery) }
            return .delivered(status: 200)
        }

        var count: Int { delivered.withLockedValue(\.count) }

        /// What was delivered so far, forgotten here.
        func take() -> [Delivery] {
            delivered.withLockedValue { delivered in
                defer { delivered = [] }
                return delivered
            }
        }
    }

    /// What a provider sees of a delivery, but for its ids and times.
    struct Seen: Equatable, CustomStringConvertible {
        var channel: String
        var user: String
        var attempt: Int
        var category: String
        var tenant: String
        var title: String
        var body: String
        var url: String?
        var imageURL: String?
        var data: String?
        var ttlSeconds: Int?
        var background: Bool
        var locale: String?
        var payload: String
        var condition: String?
        var readAt: Date?
        var seenAt: Date?

        init(_ delivery: Delivery) {
            channel = delivery.channel.id
            user = delivery.externalUserID
            attempt = delivery.attempt
            category = delivery.content.category.id
            tenant = delivery.content.tenant
            title = delivery.content.title
            body = delivery.content.body
            url = delivery.content.url
            imageURL = delivery.content.imageURL
            data = delivery.content.data
            ttlSeconds = delivery.content.ttlSeconds
            background = delivery.content.background
            locale = delivery.content.locale
            payload = String(describing: delivery.payload)
            condition = delivery.condition?.rawValue
            readAt = delivery.readAt
            seenAt = delivery.seenAt
        }

        var description: String { "\(channel) for \(user): \(title) \(payload)" }
    }

    static let event = EventRequest(
        category: "login-fail", recipients: (0..<40).map { "reader-\($0)" },
        content: .init(
            title: "Failed login attempts", body: "From an unknown device", url: "https://example.org/security",
            imageURL: "https://example.org/lock.png"),
        data: ["ip": .string("192.0.2.1")], ttlSeconds: 600)

    /// With room for every offer at once, and with 4 slots a kind: then up to 4 offers a kind
    /// start at once, 16 wait for a slot, and the rest are left to claims.
    @Test(
        "an offered delivery is what the claim's read gives, its badge counted alike, and each is sent once",
        arguments: TestDatabase.allCases, [256, 4])
    func offeredAsRead(database: TestDatabase, slots: Int) async throws {
        try await withBelfry(database) { app in
            let users = Self.event.recipients
            for (index, user) in users.enumerated() {
                let token = try await app.userToken(user)
                _ = try await app.putUser(user, UserUpsert(email: "\(user)@example.org"))
                _ = try await APNsChannelTests.register(app, token, token: String(format: "%064x", index + 1))
            }
            let recorder = Recorder(concurrency: slots)
            let worker = try #require(app.deliveryQueue)
            let queue = DeliveryQueue(
                database: worker.database, storage: worker.storage, workspace: worker.workspace,
                providers: [.apns: recorder, .webhook: recorder, .email: recorder], metrics: worker.metrics,
                now: worker.now, jitter: worker.jitter, logger: worker.logger, devices: app.belfryServices.devices,
                inbox: app.belfryServices.inboxStore)
            // Some readers have unread notifications already: their badges differ.
            _ = try await InboxAPITests.notify(app, Array(users.prefix(10)), title: "Earlier", category: "edit-thank")
            while try await queue.runOnce() > 0 {}
            _ = recorder.take()

            // The reference: fanned out, then claimed and read.
            try await Self.trigger(app, fanout: app.belfryServices.fanout)
            while try await queue.runOnce() > 0 {}
            let read = recorder.take()
            #expect(read.count == users.count * 3, "a webhook, a push and an email for each reader")
            #expect(queue.offersTaken.withLockedValue { $0 } == 0)

            // The same event again, fanned out beside the running pipeline.
            let pipeline = Task { await queue.run(clock: ServerClock(), interval: 60) }
            while !queue.takesOffers { try await Task.sleep(for: .milliseconds(5)) }
            var offering = app.belfryServices.fanout
            offering.offers = queue
            let second = try await Self.trigger(app, fanout: offering)
            let deadline = ContinuousClock.now + .seconds(30)
            while recorder.count < read.count && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            queue.beginStopping()
            await pipeline.value
            let offered = recorder.take()
            // A kind's free slots may go to a claim the pipeline made just before the offer
            // came; the places to wait for a slot are the offers' own.
            let takenAKind = min(users.count, slots * DeliveryQueue.offersWaiting(on: queue.storage.kind))
            #expect(
                queue.offersTaken.withLockedValue { $0 } >= takenAKind * 2,
                "webhooks and pushes were offered and taken as slots allow; the emails were claimed")
            #expect(Set(offered.map(\.id)).count == offered.count, "none was sent twice")

            func key(_ delivery: Delivery) -> String { "\(delivery.channel.id) \(delivery.externalUserID)" }
            let reference = Dictionary(uniqueKeysWithValues: read.map { (key($0), $0) })
            #expect(Set(offered.map(key)) == Set(reference.keys))
            for delivery in offered {
                let earlier = try #require(reference[key(delivery)])
                var expected = Seen(earlier)
                if case .push(let device, let unread) = earlier.payload {
                    // The second event is one more unread notification in each inbox.
                    expected.payload = String(describing: Delivery.Payload.push(device, unread: unread + 1))
                }
                #expect(Seen(delivery) == expected)
                #expect(delivery.eventID == second)
                let acceptedAt = try #require(delivery.acceptedAt)
                #expect(abs(acceptedAt.timeIntervalSince(delivery.content.createdAt)) < 5)
            }
            let statuses = try await app.db.sql.select().column("status").column("attempts")
                .from(Tables.deliveries).where("event_id", .equal, second).all()
            #expect(statuses.count == users.count * 3)
            for row in statuses {
                #expect(try row.decode(column: "status", as: String.self) == "sent")
                #expect(try row.decode(column: "attempts", as: Int.self) == 1)
            }
        }
    }

    @Test("offers still waiting for a slot when the queue stops go back to the queue, unattempted")
    func stoppingReturnsWaitingOffers() async throws {
        try await withBelfry(.sqlite) { app in
            // Slow enough that the stop comes while four wait, however busy the machine.
            let recorder = Recorder(concurrency: 1, delay: .seconds(2))
            let (queue, pipeline) = try await Self.running(recorder, in: app)
            var offering = app.belfryServices.fanout
            offering.offers = queue
            let event = try await Self.trigger(app, fanout: offering)
            // One webhook sends, `offersWaiting(on:)` more wait for the slot.
            let waiting = 1 + DeliveryQueue.offersWaiting(on: .sqlite)
            let deadline = ContinuousClock.now + .seconds(30)
            while queue.offersTaken.withLockedValue({ $0 }) < waiting && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(5))
            }
            #expect(queue.offersTaken.withLockedValue { $0 } == waiting)
            queue.beginStopping()
            await pipeline.value
            let sent = recorder.take().count
            #expect(sent >= 1 && sent < waiting, "the send under way finished; those waiting did not start")
            let rows = try await app.db.sql.select().column("status").column("attempts").from(Tables.deliveries)
                .where("event_id", .equal, event).where("channel", .equal, "webhook").all()
            let states = try rows.map {
                (try $0.decode(column: "status", as: String.self), try $0.decode(column: "attempts", as: Int.self))
            }
            #expect(states.filter { $0.0 == "sent" }.count == sent)
            #expect(states.allSatisfy { $0 == ("sent", 1) || $0 == ("queued", 0) }, "none is left running: \(states)")
        }
    }

    @Test("the deliveries the queue takes are written claimed by it; a reservation given back frees its room")
    func writtenClaimed() async throws {
        try await withBelfry(.sqlite) { app in
            let recorder = Recorder(concurrency: 1, delay: .seconds(2))
            let (queue, pipeline) = try await Self.running(recorder, in: app)

            // Room for one webhook under way and `offersWaiting(on:)` more waiting: taken, held back,
            // given back.
            let webhook = try #require(queue.workspace.channel("webhook"))
            let content = PushBenchmark.sampleContent()
            let deliveries = (0..<40).map { index in
                Delivery(
                    id: UUID(), eventID: content.notificationID, channel: webhook, attempt: 1,
                    userID: content.deliveryID, externalUserID: "reader-\(index)", content: content,
                    payload: .webhook(action: nil))
            }
            let room = 1 + DeliveryQueue.offersWaiting(on: .sqlite)
            let first = try #require(queue.reserve(deliveries))
            #expect(first.taken.count == room)
            #expect(first.worker == queue.name)
            #expect(queue.reserve(deliveries) == nil, "no room left")
            queue.cancel(first)
            let again = try #require(queue.reserve(deliveries), "the room came back")
            #expect(again.taken.count == room)
            queue.cancel(again)

            // Fan-out writes what the queue took as running under its lease, the rest queued.
            var offering = app.belfryServices.fanout
            offering.offers = queue
            let written = Date()
            let event = try await Self.trigger(app, fanout: offering)
            let rows = try await app.db.sql.select()
                .columns("status", "attempts", "worker", "lease_expires_at", "created_at", "updated_at")
                .from(Tables.deliveries).where("event_id", .equal, event).where("channel", .equal, "webhook").all()
            // Claimed: running, or sent already by the one slot on a slow machine. On one slow
            // enough that the slot's two-second send ended before these rows were read, the freed
            // slot may also have gone to a claim of a queued row before a waiting offer asked.
            let claimed = try rows.filter { try $0.decode(column: "worker", as: String?.self) == queue.name }
            #expect(claimed.count >= room && claimed.count <= room + 1, "\(claimed.count) claimed")
            let queued = try rows.filter { try $0.decode(column: "status", as: String.self) == "queued" }
            #expect(queued.count == Self.event.recipients.count - claimed.count)
            let running = try claimed.filter { try $0.decode(column: "status", as: String.self) == "running" }
            #expect(running.count >= room - 1, "one send takes two seconds")
            for row in running {
                #expect(try row.decode(column: "attempts", as: Int.self) == 1)
                let lease = try #require(try row.decode(column: "lease_expires_at", as: Date?.self))
                #expect(lease > written.addingTimeInterval(queue.lease - 5))
                #expect(
                    try row.decode(column: "updated_at", as: Date.self)
                        == row.decode(column: "created_at", as: Date.self),
                    "claimed as written, not by a statement after the commit")
            }
            queue.beginStopping()
            await pipeline.value
        }
    }

    @Test("without a running pipeline nothing is offered, and the deliveries wait for a claim")
    func noPipelineNoOffers() async throws {
        try await withBelfry(.sqlite) { app in
            let worker = try #require(app.deliveryQueue)
            #expect(!worker.takesOffers)
            var offering = app.belfryServices.fanout
            offering.offers = worker
            let event = try await Self.trigger(app, fanout: offering)
            let statuses = try await app.db.sql.select().column("status").from(Tables.deliveries)
                .where("event_id", .equal, event).all().map { try $0.decode(column: "status", as: String.self) }
            #expect(statuses.count >= Self.event.recipients.count, "a webhook for each reader at least")
            #expect(Set(statuses) == ["queued"])
            #expect(worker.offersTaken.withLockedValue { $0 } == 0)
        }
    }

    /// A queue sending webhooks and emails through `recorder`, its pipeline running.
    static func running(
        _ recorder: Recorder, in app: Application
    ) async throws -> (DeliveryQueue, Task<Void, Never>) {
        let worker = try #require(app.deliveryQueue)
        let queue = DeliveryQueue(
            database: worker.database, storage: worker.storage, workspace: worker.workspace,
            providers: [.webhook: recorder, .email: recorder], metrics: worker.metrics, now: worker.now,
            jitter: worker.jitter, logger: worker.logger, devices: app.belfryServices.devices,
            inbox: app.belfryServices.inboxStore)
        let pipeline = Task { await queue.run(clock: ServerClock(), interval: 60) }
        while !queue.takesOffers { try await Task.sleep(for: .milliseconds(5)) }
        return (queue, pipeline)
    }

    @discardableResult
    static func trigger(_ app: Application, fanout: Fanout) async throws -> UUID {
        let id = try await app.send(.POST, "/v1/events", bearer: testAPIKey, json: event).decode(EventAccepted.self)
            .eventID
        while try await fanout.processBatch(on: app.db) {}
        return id
    }
}
