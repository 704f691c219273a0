import BelfryAPNs
import BelfryCore
import BelfryFCM
import BelfryWebPush
import Crypto
import Fluent
import Foundation
import NIOConcurrencyHelpers
import SQLKit

/// Checking an event against the workspace before it is stored: every problem at once.
extension EventIntake {
    /// A checked event, ready to store.
    struct Checked: Sendable {
        var category: CategoryDefinition
        var tenant: String
        /// Empty for a topic event.
        var recipients: [String]
        var topic: String?
        /// Stored for a topic event; already taken out of `recipients` otherwise.
        var exclude: [String]
        /// The content as the request gave it (parts may be left to the category's templates).
        var content: EventRequest.Content
        /// What the notification says by default: the event's text, or its templates rendered.
        var text: RenderedContent
        /// The text in each language of the category's templates; `nil` without templates.
        var variants: LocalizedContent?
        var data: String?
        var idempotencyKey: String?
        var notBefore: Date
        /// A rule read in each recipient's time zone: their notification is due at its next match.
        var calendar: CalendarRule?
        /// The schedule as asked for, so that a retry can be recognised.
        var schedule: EventRequest.Schedule?
        var ttlSeconds: Int?
        /// A background push, when the event says so (over the category's).
        var contentAvailable: Bool?
    }

    /// Checks an event against the workspace, reporting every problem at once.
    static func validate(_ event: EventRequest, workspace: WorkspaceConfig, now: Date) throws -> Checked {
        guard let category = workspace.category(event.category) else {
            throw BelfryError(.categoryNotFound, "no category \"\(event.category)\" in this workspace")
        }
        let tenant = event.tenant ?? workspace.defaultTenant
        guard workspace.tenant(tenant) != nil else {
            throw BelfryError(.tenantNotFound, "no tenant \"\(tenant)\" in this workspace")
        }
        var problems = audienceProblems(event)
        let (text, variants) = renderContent(
            event, category: category, tenant: tenant, workspace: workspace, problems: &problems)
        // The default, then each language: every text some recipient will read.
        let every = variants?.every ?? [(nil, text)]
        if problems.isEmpty {
            for (tag, variant) in every { problems += contentProblems(variant, in: tag) }
        }
        if let url = event.content.imageURL, let problem = urlProblem(url, field: "content.image_url") {
            problems.append(problem)
        }
        if let schema = category.dataSchema {
            problems += dataProblems(event.data ?? [:], schema: schema, category: category.id)
        }
        if let ttl = event.ttlSeconds, !(0...maxTTL).contains(ttl) {
            problems.append("field \"ttl_seconds\" must be from 0 to \(maxTTL), got \(ttl)")
        }
        let data = try encodedData(event.data, problems: &problems)
        if let key = event.idempotencyKey, key.isEmpty || key.count > 255 {
            problems.append("the idempotency key must have 1 to 255 characters")
        }
        let (notBefore, calendar) = event.schedule.map { when($0, now: now, problems: &problems) } ?? (now, nil)
        if problems.isEmpty {
            for (tag, variant) in every {
                problems += pushSizeProblems(
                    variant, in: tag, event: event, category: category, tenant: tenant, data: data, workspace: workspace
                )
                if !problems.isEmpty { break }
            }
        }
        if !problems.isEmpty {
            throw BelfryError.invalid(problems.joined(separator: "; "))
        }
        // One notification per person, however often the list names them; none for those left out.
        let excluded = Set(event.exclude ?? [])
        var seen = excluded
        let recipients = event.recipients.filter { seen.insert($0).inserted }
        return Checked(
            category: category, tenant: tenant, recipients: recipients, topic: event.topic,
            exclude: Array(excluded).sorted(), content: event.content, text: text, variants: variants, data: data,
            idempotencyKey: event.idempotencyKey, notBefore: notBefore, calendar: calendar, schedule: event.schedule,
            ttlSeconds: event.ttlSeconds, contentAvailable: event.push?.contentAvailable)
    }

    /// The recipients, the topic and the exclusions: who the event is for.
    private static func audienceProblems(_ event: EventRequest) -> [String] {
        var problems: [String] = []
        if let topic = event.topic {
            if !event.recipients.isEmpty {
                problems.append("give \"recipients\" or \"topic\", not both")
            }
            if !TopicName.isValid(topic) {
                problems.append("field \"topic\" must be \(TopicName.rule), got \"\(topic.prefix(40))\"")
            }
        } else if event.recipients.isEmpty || event.recipients.count > maxRecipients {
            problems.append(
                "field \"recipients\" must list 1 to \(maxRecipients) user ids, got \(event.recipients.count); "
                    + "send larger audiences in several events, or name a \"topic\"")
        }
        for (field, ids) in [("recipients", event.recipients), ("exclude", event.exclude ?? [])] {
            for (index, id) in ids.enumerated().filter({ !UserID.isValid($0.element) }).prefix(3) {
                problems.append(
                    "field \"\(field)[\(index)]\": \"\(id.prefix(40))\" is not a valid user id (\(UserID.rule))")
            }
        }
        if let exclude = event.exclude, exclude.count > maxRecipients {
            problems.append("field \"exclude\" may list at most \(maxRecipients) user ids, got \(exclude.count)")
        }
        return problems
    }

    /// The event's text: as given, or the category's templates rendered in each language.
    private static func renderContent(
        _ event: EventRequest, category: CategoryDefinition, tenant: String, workspace: WorkspaceConfig,
        problems: inout [String]
    ) -> (RenderedContent, LocalizedContent?) {
        var text = RenderedContent(
            title: event.content.title ?? "", body: event.content.body ?? "", url: event.content.url)
        var variants: LocalizedContent?
        if let templates = category.content {
            do {
                let rendered = try ContentRendering.render(
                    templates, given: event.content, data: event.data, category: category, tenant: tenant,
                    workspace: workspace)
                text = rendered.base
                variants = rendered
            } catch {
                problems.append("the content template of category \"\(category.id)\": \(error)")
            }
        } else {
            for (field, value) in [("title", event.content.title), ("body", event.content.body)] where value == nil {
                problems.append(
                    "field \"content.\(field)\" is required: category \"\(category.id)\" has no content templates")
            }
        }
        return (text, variants)
    }

    /// The event's data as stored (JSON), within the depth and size every reader takes.
    private static func encodedData(_ data: [String: JSONValue]?, problems: inout [String]) throws -> String? {
        guard let fields = data else { return nil }
        // Every reader of the data (the inbox, the streams, each provider) decodes it again
        // inside the notification around it: one limit here keeps all of them well within
        // what their decoders take.
        let depth = JSONValue.object(fields).depth
        if depth > maxDataDepth {
            problems.append("field \"data\" nests \(depth) levels deep; at most \(maxDataDepth) allowed")
        }
        let encoded = try JSONEncoder().encode(fields)
        if encoded.count > maxDataBytes {
            problems.append("field \"data\" is \(encoded.count) bytes as JSON; at most \(maxDataBytes) allowed")
        }
        return String(decoding: encoded, as: UTF8.self)
    }

    /// When the event is due: now, a time, a delay, or a calendar rule read in each recipient's
    /// time zone.
    private static func when(
        _ schedule: EventRequest.Schedule, now: Date, problems: inout [String]
    ) -> (notBefore: Date, calendar: CalendarRule?) {
        var notBefore = now
        var calendar: CalendarRule?
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
        return (notBefore, calendar)
    }

    /// Four weeks, the longest any push service keeps a message.
    static let maxTTL = 28 * 86_400

    /// The event is refused when the largest push it can make (every field, a large badge) is
    /// over what a push channel of its category takes: 4096 bytes of APNs payload or of FCM
    /// message, or 4096 bytes of encrypted Web Push body.
    private static let sizingID = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))

    private static func pushSizeProblems(
        _ text: RenderedContent, in tag: String?, event: EventRequest, category: CategoryDefinition, tenant: String,
        data: String?, workspace: WorkspaceConfig
    ) -> [String] {
        let kinds = Set(category.channels.compactMap { workspace.channel($0.channel)?.kind })
        // Any ids will do: a UUID's text is as long as any other's. (`UUID()` opens the
        // system's random device each time, two file operations an event.)
        let content = DeliveryContent(
            deliveryID: Self.sizingID, notificationID: Self.sizingID, category: category, tenant: tenant,
            title: text.pushTitle ?? text.title, body: text.pushBody ?? text.body, url: text.url,
            imageURL: event.content.imageURL, data: data, createdAt: Date(), ttlSeconds: event.ttlSeconds)
        guard PushSizeBound.mayExceed(content, kinds: kinds) else { return [] }
        let rendered = tag.map { " (the content rendered for \($0))" } ?? ""
        var problems: [String] = []
        if kinds.contains(.apns), case let size = APNsPayload.largestSize(APNsNotification(content)),
            size > APNsPayload.maxSize
        {
            problems.append(
                "the APNs payload would be \(size) bytes; APNs takes at most \(APNsPayload.maxSize): "
                    + "shorten the content or the data\(rendered)")
        }
        if kinds.contains(.fcm), case let size = FCMPayload.largestSize(FCMNotification(content)),
            size > FCMPayload.maxSize
        {
            problems.append(
                "the FCM message would be \(size) bytes; FCM takes at most \(FCMPayload.maxSize): "
                    + "shorten the content or the data\(rendered)")
        }
        if kinds.contains(.webPush), case let size = WebPushMessage.largestEncryptedSize(content),
            size > WebPushEncryption.maxPayloadSize
        {
            problems.append(
                "the encrypted Web Push message would be \(size) bytes; push services take at most "
                    + "\(WebPushEncryption.maxPayloadSize): shorten the content or the data\(rendered)")
        }
        return problems
    }

    /// What is wrong with a notification's text: the event's own, or rendered for `tag`.
    private static func contentProblems(_ text: RenderedContent, in tag: String?) -> [String] {
        let rendered = tag.map { " (rendered for \($0))" } ?? ""
        var problems: [String] = []
        for (field, title) in [("content.title", text.title), ("content.push.title", text.pushTitle)] {
            guard let title else { continue }
            // Scalars, not `trimmingCharacters`: Foundation's copy through NSString cost more than
            // the rest of the check.
            if title.unicodeScalars.allSatisfy(CharacterSet.whitespacesAndNewlines.contains)
                || title.count > maxTitleLength
            {
                problems.append(
                    "field \"\(field)\"\(rendered) must have 1 to \(maxTitleLength) characters, got \(title.count)")
            }
            if let problem = TextCheck.controlCharacters(in: title, field: field + rendered) {
                problems.append(problem)
            }
        }
        for (field, body) in [("content.body", text.body), ("content.push.body", text.pushBody)] {
            guard let body else { continue }
            if let problem = TextCheck.controlCharacters(in: body, field: field + rendered, multiline: true) {
                problems.append(problem)
            }
            if body.utf8.count > maxBodyBytes {
                problems.append(
                    "field \"\(field)\"\(rendered) is \(body.utf8.count) bytes; at most \(maxBodyBytes) allowed")
            }
        }
        if let url = text.url, let problem = urlProblem(url, field: "content.url" + rendered) {
            problems.append(problem)
        }
        return problems
    }

    private static func urlProblem(_ url: String, field: String) -> String? {
        let parsed = URL(string: url)
        guard url.count > 2048 || !["http", "https"].contains(parsed?.scheme ?? "") || parsed?.host == nil else {
            return nil
        }
        return "field \"\(field)\" must be an http or https URL, got \"\(url.prefix(80))\""
    }

    /// What `data` lacks or has of the wrong type by the category's `data_schema`.
    private static func dataProblems(_ data: [String: JSONValue], schema: DataSchema, category: String) -> [String] {
        var problems: [String] = []
        for name in schema.required where data[name] == nil || data[name] == .null {
            problems.append("field \"data.\(name)\" is required by category \"\(category)\"")
        }
        for (name, value) in data.sorted(by: { $0.key < $1.key }) {
            guard let type = schema.properties[name]?.type, value != .null else { continue }
            let matches: Bool
            switch (type, value) {
            case (.string, .string), (.number, .number), (.boolean, .bool), (.object, .object), (.array, .array):
                matches = true
            case (.integer, .number(let number)):
                matches = number.rounded() == number
            default:
                matches = false
            }
            if !matches {
                problems.append("field \"data.\(name)\" must be of type \(type.rawValue) for category \"\(category)\"")
            }
        }
        return problems
    }
}

/// A cheap check that an event's pushes are far below every limit, so that most events need
/// not have their largest pushes built and measured. A push of an event is at most its
/// category's and tenant's push with the variable parts (text, links, data) empty, plus twelve
/// bytes for each byte of those parts (a part may appear twice, as FCM's image does, and JSON's
/// longest escape, `\u0000`, is six bytes), plus a little for its time to live. The empty push
/// is built once per category, tenant and shape.
enum PushSizeBound {
    /// What an empty push depends on, bar the category's definition: its name, the tenant, which
    /// optional parts are there, and the kinds. Hashing the whole definition for each event took
    /// more than measuring its pushes would save (1.3 % of the intake benchmark's machine).
    private struct Shape: Hashable {
        var category: String
        var tenant: String
        var parts: [Bool]
        var kinds: Set<ChannelKind>
    }

    /// The sizes of a shape, with the definition they were measured for: workspaces differ, and
    /// several may share a process. Comparing a definition with the one it was copied from is
    /// quick (equal strings and arrays that share storage compare by identity first).
    private struct Measured {
        var category: CategoryDefinition
        var sizes: [ChannelKind: Int]
    }

    private static let empty = NIOLockedValueBox<[Shape: Measured]>([:])
    /// Room for the time to live an event may carry (FCM's `"ttl":"2419200s"`).
    static let ttlSlack = 32
    /// The most bytes one byte of a variable part becomes in a push.
    static let growth = 12

    /// Whether some push of `content` may be over its limit (and so must be measured).
    static func mayExceed(_ content: DeliveryContent, kinds: Set<ChannelKind>) -> Bool {
        let variable = [content.title, content.body, content.url ?? "", content.imageURL ?? "", content.data ?? ""]
            .reduce(0) { $0 + $1.utf8.count }
        let sizes = emptySizes(like: content, kinds: kinds)
        let limits: [ChannelKind: Int] = [
            .apns: APNsPayload.maxSize, .fcm: FCMPayload.maxSize, .webPush: WebPushEncryption.maxPayloadSize,
        ]
        return sizes.contains { kind, size in size + growth * variable + ttlSlack > limits[kind] ?? 0 }
    }

    private static func emptySizes(like content: DeliveryContent, kinds: Set<ChannelKind>) -> [ChannelKind: Int] {
        let key = Shape(
            category: content.category.id, tenant: content.tenant,
            parts: [content.url != nil, content.imageURL != nil, content.data != nil], kinds: kinds)
        if let measured = empty.withLockedValue({ $0[key] }), measured.category == content.category {
            return measured.sizes
        }
        let blank = DeliveryContent(
            deliveryID: content.deliveryID, notificationID: content.notificationID, category: content.category,
            tenant: content.tenant, title: "", body: "", url: content.url.map { _ in "" },
            imageURL: content.imageURL.map { _ in "" }, data: content.data.map { _ in "{}" },
            createdAt: content.createdAt, background: content.background, batch: content.batch,
            locale: content.locale)
        var sizes: [ChannelKind: Int] = [:]
        if kinds.contains(.apns) { sizes[.apns] = APNsPayload.largestSize(APNsNotification(blank)) }
        if kinds.contains(.fcm) { sizes[.fcm] = FCMPayload.largestSize(FCMNotification(blank)) }
        if kinds.contains(.webPush) { sizes[.webPush] = WebPushMessage.largestEncryptedSize(blank) }
        empty.withLockedValue { cache in
            // A workspace has few categories and tenants; a bound on the cache all the same.
            if cache.count > 10_000 { cache.removeAll() }
            cache[key] = Measured(category: content.category, sizes: sizes)
        }
        return sizes
    }
}
