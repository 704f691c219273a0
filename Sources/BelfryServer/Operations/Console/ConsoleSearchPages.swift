import BelfryCore
import Foundation

/// The console's search pages: events by id, category and time, a page at a time; a user by
/// external id, with their devices, preferences and messages.
extension ConsolePages {
    /// The events page's filters, kept in its links.
    struct EventFilters: Sendable {
        var category: String?
        /// `1h`, `24h` or `7d`.
        var since: String?
        var notFound: String?
    }

    static let eventSpans = [("1h", "the last hour"), ("24h", "the last day"), ("7d", "the last week")]

    static func eventSearch(
        _ events: [EventStatus], filters: EventFilters, older: String?, categories: [CategoryDefinition], csrf: String
    ) -> HTML {
        let olderLink = older.map { cursor in
            "/admin/events?"
                + (["before=\(cursor)"]
                + [filters.category.map { "category=\($0)" }, filters.since.map { "since=\($0)" }]
                .compactMap { $0 }).joined(separator: "&")
        }
        return document(title: "Events", csrf: csrf) {
            el("h1") { "Events" }
            el("form", .init("method", "get"), .init("action", "/admin/events"), .class("search-form")) {
                el("label", .for("event-id")) { "Event id" }
                void("input", .id("event-id"), .name("id"), .init("autocomplete", "off"))
                el("label", .for("event-category")) { "Category" }
                el("select", .id("event-category"), .name("category")) {
                    el("option", .value("")) { "Any" }
                    for category in categories {
                        el("option", .value(category.id), .flag("selected", filters.category == category.id)) {
                            category.name
                        }
                    }
                }
                el("label", .for("event-since")) { "Accepted in" }
                el("select", .id("event-since"), .name("since")) {
                    el("option", .value("")) { "any time" }
                    for (value, label) in eventSpans {
                        el("option", .value(value), .flag("selected", filters.since == value)) { label }
                    }
                }
                el("button", .type("submit")) { "Search" }
            }
            if let missing = filters.notFound {
                el("p", .class("flash flash-error"), .role("alert")) { "There is no event \(missing)." }
            }
            Self.events(events, heading: "Newest first")
            if let olderLink {
                el("p") { el("a", .href(olderLink)) { "Older events" } }
            }
        }
    }

    static func userSearch(notFound: String?, csrf: String) -> HTML {
        document(title: "Users", csrf: csrf) {
            el("h1") { "Users" }
            el("form", .init("method", "get"), .init("action", "/admin/users"), .class("search-form")) {
                el("label", .for("user-id")) { "User (their external id)" }
                void("input", .id("user-id"), .name("id"), .init("required", ""), .init("autocomplete", "off"))
                el("button", .type("submit")) { "Show" }
            }
            if let notFound {
                el("p", .class("flash flash-error"), .role("alert")) { "There is no user \"\(notFound)\"." }
            }
        }
    }

    static func user(_ detail: ConsoleData.UserDetail, older: String?, csrf: String) -> HTML {
        let user = detail.user
        return document(title: "User \(user.id)", csrf: csrf) {
            el("h1") {
                "User "
                el("span", .class("mono")) { user.id }
            }
            el("dl", .class("facts")) {
                fact("Email", user.email ?? "none")
                fact("Sites", user.tenants.isEmpty ? "none (the default site)" : user.tenants.joined(separator: ", "))
                if let zone = user.timeZone { fact("Time zone", zone) }
                if let locale = user.locale { fact("Language", locale) }
                fact("Created", timestamp(user.createdAt))
                fact("In the inbox", "\(detail.inboxCount) notifications")
            }
            el("h2") { "Devices" }
            if detail.devices.isEmpty {
                el("p", .class("empty")) { "No push devices." }
            } else {
                deviceTable(detail.devices)
            }
            el("h2") { "Preferences" }
            el("dl", .class("facts")) {
                for (tenant, off, required) in detail.preferences {
                    fact(
                        tenant,
                        (off.isEmpty ? "every type on" : "off: " + off.joined(separator: ", "))
                            + (required.isEmpty ? "" : "; required only: " + required.joined(separator: ", ")))
                }
            }
            el("h2") { "Messages" }
            if detail.messages.isEmpty {
                el("p", .class("empty")) {
                    "No deliveries: inbox notifications available at once are written at fan-out and need none."
                }
            } else {
                messageTable(detail.messages)
                if let older {
                    el("p") { el("a", .href("/admin/users/\(user.id)?before=\(older)")) { "Older messages" } }
                }
            }
        }
    }

    private static func deviceTable(_ devices: [DeviceRecord]) -> HTML {
        el("table", .class("data")) {
            el("thead") {
                el("tr") {
                    for heading in ["Platform", "App", "Address", "Permission", "State", "Registered"] {
                        el("th", .init("scope", "col")) { heading }
                    }
                }
            }
            el("tbody") {
                for device in devices {
                    el("tr") {
                        el("td") { device.platform.rawValue }
                        el("td") { device.app ?? "the server's" }
                        el("td", .class("mono")) {
                            String((device.token ?? device.endpoint ?? "").prefix(12)) + "…"
                        }
                        el("td") { device.authorization.rawValue }
                        el("td") {
                            device.retiredAt.map { "retired \(timestamp($0)): \(device.retiredReason ?? "")" }
                                ?? "active"
                        }
                        el("td") { timestamp(device.createdAt) }
                    }
                }
            }
        }.labellingCells()
    }

    private static func messageTable(_ messages: [MessageRecord]) -> HTML {
        el("table", .class("data")) {
            el("thead") {
                el("tr") {
                    for heading in ["Created", "Event", "Channel", "Status", "Attempts"] {
                        el("th", .init("scope", "col")) { heading }
                    }
                }
            }
            el("tbody") {
                for message in messages {
                    el("tr") {
                        el("td") { timestamp(message.createdAt) }
                        el("td") {
                            el("a", .href("/admin/events/\(message.eventID.uuidString.lowercased())")) {
                                message.title.isEmpty ? message.category : message.title
                            }
                            el("span", .class("muted")) { " \(message.category)" }
                        }
                        el("td") { message.channel }
                        el("td") {
                            el("span", .class("state state-\(message.status)")) {
                                message.status
                            }
                            if let error = message.lastError {
                                el("span", .class("error-text")) { " \(inWords(error))" }
                            }
                        }
                        el("td") {
                            // The status column shows the last error already.
                            attemptList(message.attempts, showingErrors: false)
                        }
                    }
                }
            }
        }.labellingCells()
    }
}
