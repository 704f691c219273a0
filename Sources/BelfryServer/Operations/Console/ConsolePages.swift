import BelfryCore
import Foundation

/// The operator console's pages, rendered on the server; `console.js` only swaps in the
/// sections the live feed sends.
enum ConsolePages {
    /// The frame of every console page: no user, no bell; a sign-out button when signed in.
    static func document(title: String, csrf: String?, live: Bool = false, @HTMLBuilder main: () -> [HTML]) -> HTML {
        el("html", .init("lang", "en")) {
            el("head") {
                WebResponse.headBasics
                el("title") { "\(title) · Belfry console" }
                void("link", .init("rel", "stylesheet"), .href(WebAssets.path("belfry.css")))
                void("link", .init("rel", "icon"), .href("data:,"))
                if live {
                    el("script", .init("src", WebAssets.path("console.js")), .flag("defer"))
                }
            }
            el("body", .class("page-console")) {
                el("a", .class("skip-link"), .href("#main")) { "Skip to content" }
                el("header", .class("topbar")) {
                    el("div", .class("topbar-inner")) {
                        el("span", .class("brand")) { "Belfry console" }
                        if let csrf {
                            el("nav", .aria("aria-label", "Console")) {
                                el("ul") {
                                    el("li") { el("a", .href("/admin")) { "Overview" } }
                                    el("li") { el("a", .href("/admin/events")) { "Events" } }
                                    el("li") { el("a", .href("/admin/users")) { "Users" } }
                                    el("li") { el("a", .href("/admin/keys")) { "API keys" } }
                                    el("li") { el("a", .href("/admin/audit")) { "Audit log" } }
                                    el("li") { el("a", .href("/admin/templates")) { "Templates" } }
                                }
                            }
                            el("form", .init("method", "post"), .init("action", "/admin/signout"), .class("signout")) {
                                void("input", .type("hidden"), .name("_csrf"), .value(csrf))
                                el("button", .type("submit"), .class("button-secondary")) { "Sign out" }
                            }
                        }
                    }
                }
                el("main", .id("main"), .init("tabindex", "-1"), .class("console")) { main() }
            }
        }
    }

    static func signIn(message: String?) -> HTML {
        document(title: "Sign in", csrf: nil) {
            el("h1") { "Sign in to the console" }
            if let message {
                el("p", .class("flash flash-error"), .role("alert")) { message }
            }
            el("form", .init("method", "post"), .init("action", "/admin/session"), .class("signin")) {
                el("label", .for("api-key")) { "API key" }
                void(
                    "input", .type("password"), .id("api-key"), .name("api_key"),
                    .init("autocomplete", "current-password"),
                    .flag("required"))
                el("p", .class("hint")) {
                    "An admin API key: one of \(ServerSetting.apiKeys.environment), or made with belfry keys create."
                }
                el("button", .type("submit")) { "Sign in" }
            }
        }
    }

    // MARK: Overview

    static func overview(
        _ data: ConsoleData.Overview, csrf: String, openStreams: Int, flash: String?,
        categories: [CategoryDefinition] = []
    ) -> HTML {
        document(title: "Overview", csrf: csrf, live: true) {
            el("h1") { "Overview" }
            if let flash {
                el("p", .class("flash"), .role("status")) { flash }
            }
            for (id, section) in sections(data, csrf: csrf, openStreams: openStreams) {
                el("div", .id(id), .class("live-section")) { section }
            }
            if !categories.isEmpty { testNotification(categories, csrf: csrf) }
        }
    }

    /// A notification to one user, to check that a channel reaches them: it goes through the
    /// same intake as the API's, and the page then shows its event.
    private static func testNotification(_ categories: [CategoryDefinition], csrf: String) -> HTML {
        el("section", .aria("aria-labelledby", "test-heading")) {
            el("h2", .id("test-heading")) { "Send a test notification" }
            el("form", .init("method", "post"), .init("action", "/admin/test"), .class("test-form")) {
                void("input", .type("hidden"), .name("_csrf"), .value(csrf))
                el("label", .for("test-user")) { "User (their external id)" }
                void("input", .id("test-user"), .name("user"), .init("required", ""), .init("autocomplete", "off"))
                el("label", .for("test-category")) { "Category" }
                el("select", .id("test-category"), .name("category")) {
                    for category in categories {
                        el("option", .value(category.id)) { "\(category.name) (\(category.id))" }
                    }
                }
                el("label", .for("test-title")) { "Title" }
                void(
                    "input", .id("test-title"), .name("title"), .value("Test notification"),
                    .init("required", ""))
                el("label", .for("test-body")) { "Body" }
                void(
                    "input", .id("test-body"), .name("body"),
                    .value("Sent from the console to check that this channel reaches you."))
                el("button", .type("submit")) { "Send" }
            }
        }
    }

    /// The parts of the overview that change, by element id: the live feed sends them again.
    static func sections(_ data: ConsoleData.Overview, csrf: String, openStreams: Int) -> [(String, HTML)] {
        [
            ("console-summary", summary(data, openStreams: openStreams)),
            ("console-charts", charts(data)),
            ("console-events", events(data.events)),
            ("console-dead", dead(data, csrf: csrf)),
            ("console-status-events", statusEvents(data, csrf: csrf)),
        ]
    }

    private static func summary(_ data: ConsoleData.Overview, openStreams: Int) -> HTML {
        let pending = data.pending.values.reduce(0, +)
        let byChannel = data.pending.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        return el("section", .aria("aria-labelledby", "summary-heading")) {
            el("h2", .id("summary-heading"), .class("visually-hidden")) { "Summary" }
            el("dl", .class("stats")) {
                el("div") {
                    el("dt") { "Queued deliveries" }
                    el("dd", .id("stat-pending")) { "\(pending)" }
                    if !byChannel.isEmpty { el("dd", .class("stat-detail")) { byChannel } }
                }
                el("div") {
                    el("dt") { "Dead deliveries" }
                    el("dd", .id("stat-dead"), .class(data.deadTotal > 0 ? "stat-alarm" : nil)) { "\(data.deadTotal)" }
                }
                el("div") {
                    el("dt") { "Failed deliveries" }
                    el("dd", .id("stat-failed"), .class(data.failedTotal > 0 ? "stat-alarm" : nil)) {
                        "\(data.failedTotal)"
                    }
                }
                el("div") {
                    el("dt") { "Sent in the last hour" }
                    el("dd", .id("stat-sent")) { "\(data.sent.reduce(0, +))" }
                }
                el("div") {
                    el("dt") { "Delivery rate" }
                    el("dd", .id("stat-rate")) { "\(Self.rate(data.deliveryRate)) a second" }
                    el("dd", .class("stat-detail")) { "over the last whole minute" }
                }
                el("div") {
                    el("dt") { "Streams open here" }
                    el("dd", .id("stat-streams")) { "\(openStreams)" }
                }
            }
        }
    }

    /// A rate as people read it: whole numbers from 10 up, one decimal below.
    static func rate(_ perSecond: Double) -> String {
        perSecond >= 10 ? String(Int(perSecond.rounded())) : String(format: "%.1f", perSecond)
    }

    private static func charts(_ data: ConsoleData.Overview) -> HTML {
        el("section", .class("charts"), .aria("aria-labelledby", "charts-heading")) {
            el("h2", .id("charts-heading")) { "The last hour" }
            el("figure", .class("chart")) {
                lineChart(
                    id: "chart-depth", title: "Queue depth",
                    summary:
                        "Deliveries queued or under way at the end of each minute; now \(data.depth.last.flatMap { $0 } ?? 0).",
                    series: [("depth", data.depth)])
                el("figcaption") { "Queue depth, sampled each minute" }
            }
            el("figure", .class("chart")) {
                lineChart(
                    id: "chart-throughput", title: "Delivery attempts per minute",
                    summary:
                        "\(data.sent.reduce(0, +)) sent and \(data.unsent.reduce(0, +)) not sent (to be retried, failed or dead) in the last hour.",
                    series: [("sent", data.sent.map(Optional.some)), ("unsent", data.unsent.map(Optional.some))])
                el("figcaption") {
                    el("span", .class("key key-sent")) { "sent" }
                    " "
                    el("span", .class("key key-unsent")) { "not sent" }
                    " per minute; an inbox notification counts as sent when it becomes available"
                }
            }
        }
    }

    /// A line chart of per-minute values, oldest on the left; a gap where a value is missing.
    static func lineChart(id: String, title: String, summary: String, series: [(String, [Int?])]) -> HTML {
        let (width, height, left, bottom) = (600.0, 160.0, 40.0, 20.0)
        let top = 8.0
        let peak = max(1, series.flatMap { $0.1.compactMap { $0 } }.max() ?? 1)
        let count = max(2, series.first?.1.count ?? 2)
        func x(_ index: Int) -> Double { left + (width - left - 8) * Double(index) / Double(count - 1) }
        func y(_ value: Int) -> Double { top + (height - bottom - top) * (1 - Double(value) / Double(peak)) }
        func format(_ value: Double) -> String { String(format: "%.1f", value) }
        return el(
            "svg", .id(id), .class("chart-svg"), .init("viewBox", "0 0 \(Int(width)) \(Int(height))"), .role("img"),
            .aria("aria-labelledby", "\(id)-title \(id)-desc")
        ) {
            el("title", .id("\(id)-title")) { title }
            el("desc", .id("\(id)-desc")) { summary }
            el(
                "line", .class("axis"), .init("x1", format(left)), .init("y1", format(height - bottom)),
                .init("x2", format(width - 8)), .init("y2", format(height - bottom)))
            el(
                "line", .class("grid"), .init("x1", format(left)), .init("y1", format(top)),
                .init("x2", format(width - 8)),
                .init("y2", format(top)))
            el(
                "text", .class("label"), .init("x", format(left - 6)), .init("y", format(top + 4)),
                .init("text-anchor", "end")
            ) {
                "\(peak)"
            }
            el(
                "text", .class("label"), .init("x", format(left - 6)), .init("y", format(height - bottom + 4)),
                .init("text-anchor", "end")
            ) { "0" }
            el("text", .class("label"), .init("x", format(left)), .init("y", format(height - 4))) { "60 min ago" }
            el(
                "text", .class("label"), .init("x", format(width - 8)), .init("y", format(height - 4)),
                .init("text-anchor", "end")
            ) {
                "now"
            }
            for (name, values) in series {
                // Runs of known values, each its own line.
                for run in runs(values) {
                    if run.count == 1, let only = run.first {
                        el(
                            "circle", .class("point point-\(name)"), .init("cx", format(x(only.0))),
                            .init("cy", format(y(only.1))), .init("r", "2.5"))
                    } else {
                        el(
                            "polyline", .class("line line-\(name)"),
                            .init("points", run.map { "\(format(x($0.0))),\(format(y($0.1)))" }.joined(separator: " ")))
                    }
                }
            }
        }
    }

    private static func runs(_ values: [Int?]) -> [[(Int, Int)]] {
        var runs: [[(Int, Int)]] = []
        var current: [(Int, Int)] = []
        for (index, value) in values.enumerated() {
            if let value {
                current.append((index, value))
            } else if !current.isEmpty {
                runs.append(current)
                current = []
            }
        }
        if !current.isEmpty { runs.append(current) }
        return runs
    }

    static func events(_ events: [EventStatus], heading: String = "Recent events") -> HTML {
        el("section", .aria("aria-labelledby", "events-heading")) {
            el("h2", .id("events-heading")) { heading }
            if events.isEmpty {
                el("p", .class("empty")) { "No events yet." }
            } else {
                el("table", .class("data")) {
                    el("thead") {
                        el("tr") {
                            for heading in ["Accepted", "Event", "Category", "State", "Fan-out", "Deliveries"] {
                                el("th", .init("scope", "col")) { heading }
                            }
                        }
                    }
                    el("tbody") {
                        for event in events {
                            el("tr") {
                                el("td") { timestamp(event.createdAt) }
                                el("td") {
                                    el("a", .href("/admin/events/\(event.id.uuidString.lowercased())"), .class("mono"))
                                    {
                                        event.id.uuidString.lowercased()
                                    }
                                }
                                el("td") { "\(event.category) · \(event.tenant)" }
                                el("td") {
                                    el("span", .class("state state-\(event.state.rawValue)")) { event.state.rawValue }
                                }
                                el("td") { progress(event) }
                                el("td") { outcomes(event) }
                            }
                        }
                    }
                }.labellingCells()
            }
        }
    }

    private static func progress(_ event: EventStatus) -> HTML {
        let total = max(event.recipients, event.processed)
        return el("span", .class("progress")) {
            el(
                "progress", .init("max", "\(max(total, 1))"), .init("value", "\(total == 0 ? 1 : event.processed)"),
                .aria("aria-label", "Fan-out of event \(event.id.uuidString.lowercased())"))
            " \(event.processed)/\(total)"
        }
    }

    /// "webhook 1 dead, 2 sent", a line per channel.
    private static func outcomeLines(_ event: EventStatus) -> [String] {
        event.deliveries.sorted { $0.key < $1.key }.map { channel, counts in
            channel + " " + counts.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }.joined(separator: ", ")
        }
    }

    private static func outcomes(_ event: EventStatus) -> HTML {
        let parts = outcomeLines(event)
        return el("ul", .class("outcomes")) {
            for part in parts { el("li") { part } }
            if parts.isEmpty { el("li", .class("muted")) { "none" } }
        }
    }

    private static func dead(_ data: ConsoleData.Overview, csrf: String) -> HTML {
        let total = data.deadTotal + data.failedTotal
        return el("section", .aria("aria-labelledby", "dead-heading")) {
            el("h2", .id("dead-heading")) { "Failed and dead deliveries" }
            if data.ended.isEmpty {
                el("p", .class("empty")) { "None: every delivery was sent or is still being tried." }
            } else {
                if total > data.ended.count {
                    el("p", .class("muted")) { "The latest \(data.ended.count) of \(total)." }
                }
                el("table", .class("data")) {
                    el("thead") {
                        el("tr") {
                            for heading in ["Ended", "Event", "Channel", "User", "Status", "Attempts", "Why", ""] {
                                if heading.isEmpty {
                                    el("td") {}
                                } else {
                                    el("th", .init("scope", "col")) { heading }
                                }
                            }
                        }
                    }
                    el("tbody") {
                        for delivery in data.ended {
                            let event = delivery.eventID.uuidString.lowercased()
                            el("tr") {
                                el("td") { timestamp(delivery.updatedAt) }
                                el("td") { el("a", .href("/admin/events/\(event)"), .class("mono")) { event } }
                                el("td") { delivery.channel }
                                el("td") { delivery.user }
                                el("td") {
                                    el("span", .class("state state-\(delivery.status.rawValue)")) {
                                        delivery.status.rawValue
                                    }
                                }
                                el("td") { "\(delivery.attempts)" }
                                el("td", .class("error-text")) { inWords(delivery.lastError) }
                                el("td") { deliveryRetryForm(delivery.id, csrf: csrf, returnTo: "overview") }
                            }
                        }
                    }
                }.labellingCells()
            }
        }
    }

    /// The status events for the workspace's `webhooks`: counts by status, and the failed and
    /// dead ones with a retry button each, and one for all.
    private static func statusEvents(_ data: ConsoleData.Overview, csrf: String) -> HTML {
        el("section", .aria("aria-labelledby", "status-events-heading")) {
            el("h2", .id("status-events-heading")) { "Status events" }
            if data.statusCounts.isEmpty {
                el("p", .class("empty")) { "None: no status event was queued (the config file's webhooks)." }
            } else {
                el("p") {
                    StatusEventSender.Status.allCases.map { "\(data.statusCounts[$0.rawValue] ?? 0) \($0.rawValue)" }
                        .joined(separator: ", ")
                }
            }
            if !data.statusEnded.isEmpty {
                statusRetryForm(nil, csrf: csrf, label: "Retry all failed and dead status events")
                el("table", .class("data")) {
                    el("thead") {
                        el("tr") {
                            for heading in ["Ended", "Endpoint", "Type", "Status", "Attempts", "Why", ""] {
                                if heading.isEmpty {
                                    el("td") {}
                                } else {
                                    el("th", .init("scope", "col")) { heading }
                                }
                            }
                        }
                    }
                    el("tbody") {
                        for event in data.statusEnded {
                            el("tr") {
                                el("td") { timestamp(event.updatedAt) }
                                el("td") { event.endpoint }
                                el("td") { event.reports > 1 ? "\(event.reports) × \(event.type)" : event.type }
                                el("td") { el("span", .class("state state-\(event.status)")) { event.status } }
                                el("td") { "\(event.attempts)" }
                                el("td", .class("error-text")) { event.lastError ?? "" }
                                el("td") { statusRetryForm(event.id, csrf: csrf, label: "Retry") }
                            }
                        }
                    }
                }.labellingCells()
            }
        }
    }

    /// Queues one failed or dead status event again, or all of them (`id` nil).
    private static func statusRetryForm(_ id: UUID?, csrf: String, label: String) -> HTML {
        el("form", .init("method", "post"), .init("action", "/admin/status-events/retry"), .class("inline")) {
            void("input", .type("hidden"), .name("_csrf"), .value(csrf))
            if let id { void("input", .type("hidden"), .name("id"), .value(id.uuidString.lowercased())) }
            el(
                "button", .type("submit"),
                .aria("aria-label", id.map { "Retry status event \($0.uuidString.lowercased())" } ?? label)
            ) { label }
        }
    }

    /// A reason as people read it: the delivery log keeps some as codes (`no_authorized_device`).
    static func inWords(_ reason: String?) -> String {
        guard let reason else { return "" }
        switch SkipReason(rawValue: reason) {
        case .categoryOptedOut: return "the user turned this category off"
        case .channelOptedOut: return "the user turned this channel off for the category"
        case .channelRestricted: return "the user keeps this channel for required notifications"
        case .noAuthorizedDevice: return "the user has no device that may be notified"
        case .noAddress: return "the user has no email address"
        case .throttled: return "the category's throttle held it back"
        case .readBeforeFallback: return "read in the inbox before the fallback was due"
        case .seenBeforeFallback: return "seen in the inbox before the fallback was due"
        case nil: return reason
        }
    }

    /// Queues an event's failed and dead deliveries again.
    private static func retryForm(event: String, csrf: String, label: String, returnTo: String) -> HTML {
        el("form", .init("method", "post"), .init("action", "/admin/events/\(event)/retry"), .class("inline")) {
            void("input", .type("hidden"), .name("_csrf"), .value(csrf))
            void("input", .type("hidden"), .name("return"), .value(returnTo))
            el(
                "button", .type("submit"),
                .aria("aria-label", "\(label): the failed and dead deliveries of event \(event)")
            ) {
                label
            }
        }
    }

    /// Queues one failed or dead delivery again.
    private static func deliveryRetryForm(_ id: UUID, csrf: String, returnTo: String) -> HTML {
        let delivery = id.uuidString.lowercased()
        return el(
            "form", .init("method", "post"), .init("action", "/admin/deliveries/\(delivery)/retry"), .class("inline")
        ) {
            void("input", .type("hidden"), .name("_csrf"), .value(csrf))
            void("input", .type("hidden"), .name("return"), .value(returnTo))
            el("button", .type("submit"), .aria("aria-label", "Retry delivery \(delivery)")) { "Retry" }
        }
    }

    /// A console path that names nothing: a console page, so the operator stays in the console.
    static func notFound(path: String) -> HTML {
        document(title: "Not found", csrf: nil) {
            el("h1") { "Not found" }
            el("p", .class("error-message")) { "The console has no page at \(path)." }
            el("p") { el("a", .href("/admin")) { "Back to the overview" } }
        }
    }

    // MARK: Keys and the audit log

    /// The stored keys, each active one with a revoke button; the configuration's keys are not listed.
    static func keys(_ keys: [KeyRecord], csrf: String, flash: String?) -> HTML {
        document(title: "API keys", csrf: csrf) {
            el("h1") { "API keys" }
            if let flash {
                el("p", .class("flash"), .role("status")) { flash }
            }
            el("p", .class("muted")) {
                "Keys made with belfry keys create NAME --scope admin|publish|read. The keys of \(ServerSetting.apiKeys.environment) are "
                    + "admin keys and not listed here."
            }
            if keys.isEmpty {
                el("p", .class("empty")) { "No stored keys." }
            } else {
                el("table", .class("data"), .id("keys")) {
                    el("thead") {
                        el("tr") {
                            for heading in ["Name", "Scope", "Fingerprint", "Created", "Last used", "State"] {
                                el("th", .init("scope", "col")) { heading }
                            }
                            el("td") {}
                        }
                    }
                    el("tbody") {
                        for key in keys {
                            el("tr") {
                                el("td") { key.name }
                                el("td") { key.scope.rawValue }
                                el("td", .class("mono")) { key.fingerprint }
                                el("td") { timestamp(key.createdAt) }
                                el("td") { key.lastUsedAt.map(timestamp) ?? "never" }
                                el("td") { key.revokedAt.map { "revoked \(timestamp($0))" } ?? "active" }
                                el("td") {
                                    if key.revokedAt == nil {
                                        el(
                                            "form", .init("method", "post"), .init("action", "/admin/keys/revoke"),
                                            .class("inline")
                                        ) {
                                            void("input", .type("hidden"), .name("_csrf"), .value(csrf))
                                            void("input", .type("hidden"), .name("name"), .value(key.name))
                                            el(
                                                "button", .type("submit"),
                                                .aria("aria-label", "Revoke the key \(key.name)")
                                            ) {
                                                "Revoke"
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }.labellingCells()
            }
        }
    }

    static func audit(_ page: AuditPage, csrf: String) -> HTML {
        document(title: "Audit log", csrf: csrf) {
            el("h1") { "Audit log" }
            if page.entries.isEmpty {
                el("p", .class("empty")) { "Nothing yet." }
            } else {
                el("table", .class("data"), .id("audit")) {
                    el("thead") {
                        el("tr") {
                            for heading in ["Time", "Who", "What", "Subject", "Detail"] {
                                el("th", .init("scope", "col")) { heading }
                            }
                        }
                    }
                    el("tbody") {
                        for entry in page.entries {
                            el("tr") {
                                el("td") { timestamp(entry.at) }
                                el("td", .class("mono")) { entry.actor }
                                el("td") { entry.action }
                                el("td", .class("mono")) { entry.subject ?? "" }
                                el("td") { entry.detail ?? "" }
                            }
                        }
                    }
                }.labellingCells()
                if let next = page.nextBefore {
                    el("p") { el("a", .href("/admin/audit?before=\(next)")) { "Older entries" } }
                }
            }
        }
    }

    // MARK: An event

    static func event(_ detail: ConsoleData.EventDetail, csrf: String, flash: String?) -> HTML {
        let status = detail.status
        let id = status.id.uuidString.lowercased()
        let ended = DeadLetters.retryable.map(\.rawValue)
        let retryable = detail.deliveries.contains { ended.contains($0.status) }
        return document(title: "Event \(id)", csrf: csrf) {
            el("h1") {
                "Event "
                el("span", .class("mono")) { id }
            }
            if let flash {
                el("p", .class("flash"), .role("status")) { flash }
            }
            el("dl", .class("facts")) {
                fact("Title", detail.content.title.isEmpty ? "(none: erased with its user)" : detail.content.title)
                if !detail.content.body.isEmpty { fact("Body", detail.content.body) }
                if let url = detail.content.url { fact("Link", url) }
                if let data = detail.content.data { fact("Data", data) }
                fact("Category", "\(status.category) in \(status.tenant)")
                fact("State", status.state.rawValue)
                fact("Accepted", timestamp(status.createdAt))
                fact(
                    "Fan-out",
                    "\(status.processed) of \(status.recipients) recipients, \(status.notifications) notifications")
                if !status.deliveries.isEmpty {
                    fact("Outcomes", outcomeLines(status).joined(separator: "; "))
                }
                if status.batched > 0 { fact("In digests", "\(status.batched)") }
                if let error = status.error { fact("Error", error) }
                let skipped = status.skipped.sorted { $0.key < $1.key }.map { channel, reasons in
                    channel + ": "
                        + reasons.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }.joined(separator: ", ")
                }
                if !skipped.isEmpty { fact("Skipped", skipped.joined(separator: "; ")) }
            }
            if retryable {
                retryForm(event: id, csrf: csrf, label: "Retry failed and dead deliveries", returnTo: "event")
            }
            el("h2") { "Deliveries" }
            if detail.deliveries.isEmpty {
                el("p", .class("empty")) {
                    "No delivery rows: inbox notifications available at once are written at fan-out and need none."
                }
            } else {
                deliveryTable(detail.deliveries, csrf: csrf)
                if detail.more > 0 {
                    el("p", .class("muted")) { "\(detail.more) more deliveries are not listed." }
                }
            }
        }
    }

    /// An event's deliveries, each with its attempt log and, once ended, a retry button.
    private static func deliveryTable(_ deliveries: [ConsoleData.DeliveryRow], csrf: String) -> HTML {
        let ended = DeadLetters.retryable.map(\.rawValue)
        return el("table", .class("data")) {
            el("thead") {
                el("tr") {
                    for heading in ["Channel", "User", "Status", "Attempts", "Last error", "Attempt log"] {
                        el("th", .init("scope", "col")) { heading }
                    }
                    el("td") {}
                }
            }
            el("tbody") {
                for delivery in deliveries {
                    el("tr") {
                        el("td") {
                            delivery.channel
                            if let device = delivery.device {
                                el("span", .class("muted mono")) { " device \(device.uuidString.lowercased())" }
                            }
                        }
                        el("td") { delivery.user }
                        el("td") {
                            el("span", .class("state state-\(delivery.status)")) { delivery.status }
                            if delivery.status == DeliveryStatus.queued.rawValue {
                                el("span", .class("muted")) { " next \(timestamp(delivery.nextAttemptAt))" }
                            }
                        }
                        el("td") { "\(delivery.attempts)" }
                        el("td", .class("error-text")) {
                            [delivery.lastStatus.map { "HTTP \($0)" }, delivery.lastError.map { inWords($0) }]
                                .compactMap { $0 }.joined(separator: ": ")
                        }
                        el("td") {
                            attemptList(delivery.attemptLog, showingErrors: true)
                        }
                        el("td") {
                            if ended.contains(delivery.status) {
                                deliveryRetryForm(delivery.id, csrf: csrf, returnTo: "event")
                            }
                        }
                    }
                }
            }
        }.labellingCells()
    }

    /// A delivery's attempts, oldest first: time, outcome and the provider's status (and its
    /// error, where the page has no other place for it).
    static func attemptList(_ attempts: [ConsoleData.Attempt], showingErrors: Bool) -> HTML {
        el("ol", .class("attempts")) {
            for attempt in attempts {
                el("li") {
                    "\(timestamp(attempt.finishedAt)) \(attempt.outcome)"
                        + (attempt.statusCode.map { " (\($0))" } ?? "")
                        + (showingErrors ? attempt.error.map { ": \($0)" } ?? "" : "")
                }
            }
        }
    }

    static func fact(_ name: String, _ value: String) -> HTML {
        el("div") {
            el("dt") { name }
            el("dd") { value }
        }
    }

    /// `2026-11-24 09:41:07Z`: UTC, to the second, the same for every operator.
    static func timestamp(_ date: Date) -> String {
        Date.ISO8601FormatStyle(dateSeparator: .dash, dateTimeSeparator: .space, timeZone: .gmt).format(date)
    }
}
