import BelfryCore
import BelfryWebPush
import Fluent
import Foundation
import SQLKit
import Vapor

/// `POST /v1/events` (trigger) and `GET /v1/events/{event_id}` (fan-out and delivery status), API key.
struct EventsController: RouteCollection {
    static let maxRecipients = 10_000
    static let maxTitleLength = 256
    static let maxBodyBytes = 64 * 1024
    static let maxDataBytes = 16 * 1024
    static let idempotencyWindow: TimeInterval = 24 * 3600
    /// Recipients per INSERT statement: well under SQLite's 32 766 bound parameters.
    static let insertBatch = 500

    func boot(routes: any RoutesBuilder) throws {
        // 10 000 recipients of up to 128 characters need more than the default body limit.
        routes.on(.POST, "v1", "events", body: .collect(maxSize: "2mb"), use: trigger)
        routes.get("v1", "events", ":event_id", use: status)
    }

    @Sendable func trigger(req: Request) async throws -> Response {
        try await req.requireServer()
        var event = try req.decodeBody(
            EventRequest.self,
            keys: [
                "category", "recipients", "tenant", "content", "data", "idempotency_key", "schedule", "ttl_seconds",
            ],
            nested: [
                "content": ["title", "body", "url", "image_url"], "schedule": ["send_at", "delay_seconds", "calendar"],
            ])
        if let header = req.headers.first(name: "Idempotency-Key") {
            if let key = event.idempotencyKey, key != header {
                throw BelfryError.invalid("the Idempotency-Key header and \"idempotency_key\" differ; send one")
            }
            event.idempotencyKey = header
        }
        let accepted = try Self.validate(event, workspace: req.belfry.workspace, now: req.belfry.now())
        let (id, replayed) = try await EventIntake(context: req.belfry).accept(accepted, on: req.db)
        req.belfry.deliveryWake()
        req.logger.info(
            "event accepted",
            metadata: [
                "belfry.event.id": "\(id)", "belfry.category": "\(accepted.category.id)",
                "belfry.recipients": "\(accepted.recipients.count)", "belfry.replayed": "\(replayed)",
            ])
        var headers: HTTPHeaders = ["Location": "/v1/events/\(id)"]
        if replayed { headers.add(name: "Idempotent-Replayed", value: "true") }
        return try Response.json(EventAccepted(eventID: id), status: .accepted, headers: headers)
    }

    @Sendable func status(req: Request) async throws -> Response {
        try await req.requireServer()
        guard let id = req.parameters.get("event_id").flatMap(UUID.init(uuidString:)) else {
            throw BelfryError.notFound("event_not_found", "no event \"\(req.parameters.get("event_id") ?? "")\"")
        }
        guard let status = try await EventIntake(context: req.belfry).status(of: id, on: req.db) else {
            throw BelfryError.notFound("event_not_found", "no event \"\(id)\"")
        }
        return try Response.json(status)
    }

    /// A checked event, ready to store.
    struct Accepted: Sendable {
        var category: CategoryDefinition
        var tenant: String
        var recipients: [String]
        var content: EventRequest.Content
        var data: String?
        var idempotencyKey: String?
        var notBefore: Date
        /// A rule read in each recipient's time zone: their notification is due at its next match.
        var calendar: CalendarRule?
        /// The schedule as asked for, so that a retry can be recognised.
        var schedule: EventRequest.Schedule?
        var ttlSeconds: Int?
    }

    static func validate(_ event: EventRequest, workspace: WorkspaceConfig, now: Date) throws -> Accepted {
        guard let category = workspace.category(event.category) else {
            throw BelfryError.notFound("category_not_found", "no category \"\(event.category)\" in this workspace")
        }
        let tenant = event.tenant ?? workspace.defaultTenant
        guard workspace.tenant(tenant) != nil else {
            throw BelfryError.notFound("tenant_not_found", "no tenant \"\(tenant)\" in this workspace")
        }
        var problems: [String] = []
        if event.recipients.isEmpty || event.recipients.count > maxRecipients {
            problems.append(
                "field \"recipients\" must list 1 to \(maxRecipients) user ids, got \(event.recipients.count); "
                    + "send larger audiences in several events")
        }
        let badIDs = event.recipients.enumerated().filter { !UserID.isValid($0.element) }.prefix(3)
        for (index, id) in badIDs {
            problems.append(
                "field \"recipients[\(index)]\": \"\(id.prefix(40))\" is not a valid user id (\(UserID.rule))")
        }
        let title = event.content.title.trimmingCharacters(in: .whitespacesAndNewlines)
        if title.isEmpty || event.content.title.count > maxTitleLength {
            problems.append(
                "field \"content.title\" must have 1 to \(maxTitleLength) characters, got \(event.content.title.count)")
        }
        if event.content.body.utf8.count > maxBodyBytes {
            problems.append(
                "field \"content.body\" is \(event.content.body.utf8.count) bytes; at most \(maxBodyBytes) allowed")
        }
        for (field, url) in [("content.url", event.content.url), ("content.image_url", event.content.imageURL)] {
            guard let url else { continue }
            let parsed = URL(string: url)
            if url.count > 2048 || !["http", "https"].contains(parsed?.scheme ?? "") || parsed?.host == nil {
                problems.append("field \"\(field)\" must be an http or https URL, got \"\(url.prefix(80))\"")
            }
        }
        if let ttl = event.ttlSeconds, !(0...maxTTL).contains(ttl) {
            problems.append("field \"ttl_seconds\" must be from 0 to \(maxTTL), got \(ttl)")
        }
        var data: String?
        if let fields = event.data {
            let encoded = try JSONEncoder().encode(fields)
            if encoded.count > maxDataBytes {
                problems.append("field \"data\" is \(encoded.count) bytes as JSON; at most \(maxDataBytes) allowed")
            }
            data = String(decoding: encoded, as: UTF8.self)
        }
        if let key = event.idempotencyKey, key.isEmpty || key.count > 255 {
            problems.append("the idempotency key must have 1 to 255 characters")
        }
        var notBefore = now
        var calendar: CalendarRule?
        if let schedule = event.schedule {
            let year: TimeInterval = 366 * 24 * 3600
            let given = [schedule.sendAt != nil, schedule.delaySeconds != nil, schedule.calendar != nil].filter { $0 }
            if given.count != 1 {
                problems.append("field \"schedule\" takes one of \"send_at\", \"delay_seconds\" or \"calendar\"")
            }
            if let sendAt = schedule.sendAt {
                if sendAt.timeIntervalSince(now) > year {
                    problems.append("field \"schedule.send_at\" must be within a year")
                }
                notBefore = max(now, sendAt)
            }
            if let delay = schedule.delaySeconds {
                if !(0...Int(year)).contains(delay) {
                    problems.append("field \"schedule.delay_seconds\" must be from 0 to \(Int(year)), got \(delay)")
                }
                notBefore = now.addingTimeInterval(TimeInterval(max(delay, 0)))
            }
            if let rule = schedule.calendar {
                problems += rule.problems.map { "field \"schedule.calendar\": \($0)" }
                if rule.problems.isEmpty, rule.nextDate(after: now, in: .gmt) == nil {
                    problems.append("field \"schedule.calendar\": no date matches it (such as 30 February)")
                }
                if rule.repeats {
                    problems.append(
                        "field \"schedule.calendar.repeats\": events are sent once; trigger one event per occurrence")
                }
                calendar = rule
            }
        }
        if problems.isEmpty {
            problems += pushSizeProblems(event, category: category, tenant: tenant, data: data, workspace: workspace)
        }
        if !problems.isEmpty {
            throw BelfryError.invalid(problems.joined(separator: "; "))
        }
        // One notification per person, however often the list names them.
        var seen = Set<String>()
        let recipients = event.recipients.filter { seen.insert($0).inserted }
        return Accepted(
            category: category, tenant: tenant, recipients: recipients, content: event.content, data: data,
            idempotencyKey: event.idempotencyKey, notBefore: notBefore, calendar: calendar, schedule: event.schedule,
            ttlSeconds: event.ttlSeconds)
    }

    /// Four weeks, the longest any push service keeps a message.
    static let maxTTL = 28 * 86_400

    /// The event is refused when the largest push it can make (every field, a large badge) is
    /// over what a push channel of its category takes: 4096 bytes of APNs payload, or 4096
    /// bytes of encrypted Web Push body.
    private static func pushSizeProblems(
        _ event: EventRequest, category: CategoryDefinition, tenant: String, data: String?, workspace: WorkspaceConfig
    ) -> [String] {
        let kinds = Set(category.channels.compactMap { workspace.channel($0.channel)?.kind })
        let content = DeliveryContent(
            deliveryID: UUID(), notificationID: UUID(), category: category, tenant: tenant,
            title: event.content.title, body: event.content.body, url: event.content.url,
            imageURL: event.content.imageURL, data: data, createdAt: Date(), ttlSeconds: event.ttlSeconds)
        var problems: [String] = []
        if kinds.contains(.apns), case let size = APNsPayload.largestSize(content), size > APNsPayload.maxSize {
            problems.append(
                "the APNs payload would be \(size) bytes; APNs takes at most \(APNsPayload.maxSize): "
                    + "shorten the content or the data")
        }
        if kinds.contains(.webPush), case let size = WebPushMessage.largestEncryptedSize(content),
            size > WebPushEncryption.maxPayloadSize
        {
            problems.append(
                "the encrypted Web Push message would be \(size) bytes; push services take at most "
                    + "\(WebPushEncryption.maxPayloadSize): shorten the content or the data")
        }
        return problems
    }
}
