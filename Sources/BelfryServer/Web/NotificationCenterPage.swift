import BelfryCore
import Foundation

/// The notification center (seed 001 for the web): newest first, read and unread told apart,
/// each with its actions. Plain forms work without JS; `inbox.js` adds live updates, toasts
/// and infinite scroll.
struct NotificationCenterPage {
    enum Filter: String, CaseIterable {
        case all, unread, archived

        var label: String {
            switch self {
            case .all: "All"
            case .unread: "Unread"
            case .archived: "Archived"
            }
        }
    }

    var workspace: WorkspaceConfig
    var page: InboxPage
    var filter: Filter
    var csrf: String

    func render(layout: WebLayout) -> HTML {
        layout.render {
            el("h1") { "Inbox" }
            el("div", .class("inbox-toolbar")) {
                el("nav", .aria("aria-label", "Show"), .class("filters")) {
                    el("ul") {
                        for option in Filter.allCases {
                            el("li") {
                                el(
                                    "a", .href(option == .all ? "/inbox" : "/inbox?status=\(option.rawValue)"),
                                    .aria("aria-current", option == filter ? "page" : nil)
                                ) { option.label }
                            }
                        }
                    }
                }
                el("form", .class("inline"), .init("method", "post"), .init("action", "/inbox")) {
                    void("input", .type("hidden"), .name("_csrf"), .value(csrf))
                    el("button", .type("submit"), .id("read-all"), .name("op"), .value("read-all")) {
                        "Mark all as read"
                    }
                }
            }
            el(
                "ol", .id("inbox-list"), .class("inbox-list"), .data("data-filter", filter.rawValue),
                .data("data-tenants", tenantNames), .aria("aria-label", "Notifications")
            ) {
                for item in page.notifications { Self.item(item, workspace: workspace, csrf: csrf) }
            }
            el("p", .id("inbox-empty"), .class("empty"), .flag("hidden", !page.notifications.isEmpty)) {
                filter == .archived ? "Nothing archived." : "You're all caught up. New notifications appear here."
            }
            if let cursor = page.nextCursor {
                el(
                    "a", .id("inbox-more"), .class("more"),
                    .href("/inbox?\(filter == .all ? "" : "status=\(filter.rawValue)&")cursor=\(cursor)"),
                    .data("data-cursor", cursor)
                ) { "Older notifications" }
            }
        }
    }

    /// The workspace's tenant names by id, as JSON, for the items `inbox.js` renders.
    private var tenantNames: String {
        let names = Dictionary(workspace.tenants.map { ($0.id, $0.name) }, uniquingKeysWith: { first, _ in first })
        let data = (try? JSONEncoder().encode(names)) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    /// One notification. `inbox.js` builds the same markup for items that arrive live.
    static func item(_ item: InboxNotification, workspace: WorkspaceConfig, csrf: String) -> HTML {
        let id = item.id.uuidString.lowercased()
        let unread = item.readAt == nil
        return el(
            "li", .id("n-\(id)"), .class(unread ? "notification unread" : "notification"), .data("data-id", id),
            .data("data-category", item.category)
        ) {
            el("article", .aria("aria-labelledby", "n-\(id)-title")) {
                // Text from a template variant is in its language, which may run right to left.
                let direction = item.locale.map { LanguageTag.isRightToLeft($0) ? "rtl" : "ltr" }
                el(
                    "h2", .id("n-\(id)-title"), .class("notification-title"), .init("lang", item.locale),
                    .init("dir", direction)
                ) {
                    el("span", .class("unread-label visually-hidden")) { unread ? "Unread: " : "" }
                    if let url = item.url, url.hasPrefix("https://") || url.hasPrefix("http://") || url.hasPrefix("/") {
                        el("a", .href(url), .class("notification-link")) { item.title }
                    } else {
                        item.title
                    }
                }
                el("p", .class("notification-body"), .init("lang", item.locale), .init("dir", direction)) { item.body }
                el("p", .class("notification-meta")) {
                    workspace.tenant(item.tenant)?.name ?? item.tenant
                    " · "
                    el("time", .init("datetime", iso8601(item.createdAt))) { display(item.createdAt) }
                }
                el("form", .class("notification-actions"), .init("method", "post"), .init("action", "/inbox")) {
                    void("input", .type("hidden"), .name("_csrf"), .value(csrf))
                    void("input", .type("hidden"), .name("id"), .value(id))
                    for action in item.actions {
                        el(
                            "button", .type("submit"), .name("op"), .value("action:\(action.id)"),
                            .class(action.destructive ? "action destructive" : "action"),
                            .data("data-action", action.id)
                        ) { action.title }
                    }
                    // A category's own "Mark as read" action marks read too: one button, not two.
                    let ownMarkRead = item.actions.contains { $0.title.lowercased() == "mark as read" }
                    if item.archivedAt == nil {
                        if !(unread && ownMarkRead) {
                            el(
                                "button", .type("submit"), .name("op"), .value(unread ? "read" : "unread"),
                                .class("mark"), .aria("aria-describedby", "n-\(id)-title")
                            ) { unread ? "Mark as read" : "Mark as unread" }
                        }
                        el(
                            "button", .type("submit"), .name("op"), .value("archive"), .class("archive"),
                            .aria("aria-describedby", "n-\(id)-title")
                        ) { "Archive" }
                    } else {
                        el(
                            "button", .type("submit"), .name("op"), .value("unarchive"), .class("archive"),
                            .aria("aria-describedby", "n-\(id)-title")
                        ) { "Move to inbox" }
                    }
                }
            }
        }
    }

    static func iso8601(_ date: Date) -> String {
        date.formatted(.iso8601)
    }

    /// Shown until `inbox.js` replaces it with the reader's local time.
    static func display(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "d MMM yyyy, HH:mm 'UTC'"
        return formatter.string(from: date)
    }
}
