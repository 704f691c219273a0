import Foundation

/// The frame every page shares: head with the page's scripts and tokens, the top bar with the
/// bell, the toast region, and the main landmark.
struct WebLayout {
    enum Page: String, Sendable {
        case preferences, inbox

        /// How a sentence names it: "your notification preferences".
        var title: String {
            switch self {
            case .preferences: "notification preferences"
            case .inbox: "inbox"
            }
        }
    }

    var page: Page
    var title: String
    var userName: String
    var unread: Int
    var csrf: String
    /// A short-lived user token for the page's scripts, which call the JSON API with it.
    var apiToken: String
    var scripts: [String]

    /// "(3) Inbox · Belfry": the badge shows in the tab too.
    var documentTitle: String {
        (unread > 0 ? "(\(unread)) " : "") + title + " · Belfry"
    }

    func render(@HTMLBuilder main: () -> [HTML]) -> HTML {
        el("html", .init("lang", "en")) {
            el("head") {
                WebResponse.headBasics
                void("meta", .name("belfry-csrf"), .init("content", csrf))
                void("meta", .name("belfry-token"), .init("content", apiToken))
                void("meta", .name("belfry-page"), .init("content", page.rawValue))
                el("title", .id("page-title"), .data("data-title", title)) { documentTitle }
                void("link", .init("rel", "stylesheet"), .href(WebAssets.path("belfry.css")))
                void("link", .init("rel", "icon"), .href("data:,"))
                for script in ["common.js"] + scripts {
                    el("script", .init("src", WebAssets.path(script)), .flag("defer"))
                }
            }
            el("body", .class("page-\(page.rawValue)")) {
                el("a", .class("skip-link"), .href("#main")) { "Skip to content" }
                topBar
                el("main", .id("main"), .init("tabindex", "-1")) { main() }
                el("div", .id("toasts"), .class("toasts"), .aria("aria-live", "polite"), .role("status")) {}
                el("div", .id("alerts"), .class("toasts toasts-alert"), .role("alert")) {}
            }
        }
    }

    private var topBar: HTML {
        el("header", .class("topbar")) {
            el("div", .class("topbar-inner")) {
                el("span", .class("brand")) { "Belfry" }
                el("nav", .aria("aria-label", "Main")) {
                    el("ul") {
                        el("li") {
                            el(
                                "a", .href("/preferences"),
                                .aria("aria-current", page == .preferences ? "page" : nil)
                            ) { "Preferences" }
                        }
                        el("li") {
                            el(
                                "a", .href("/inbox"), .id("bell"), .class("bell"),
                                .aria("aria-current", page == .inbox ? "page" : nil)
                            ) {
                                bellIcon
                                el("span") { "Inbox" }
                                el(
                                    "span", .id("bell-badge"), .class("badge"), .data("data-count", "\(unread)"),
                                    .flag("hidden", unread == 0)
                                ) {
                                    el("span", .class("badge-count")) { unread > 99 ? "99+" : "\(unread)" }
                                    el("span", .class("visually-hidden")) { " unread" }
                                }
                            }
                        }
                    }
                }
                el("span", .class("user")) {
                    el("span", .class("visually-hidden")) { "Signed in as " }
                    userName
                }
                // push.js unsubscribes this browser first, in the background (seed 000 step 9).
                el("form", .init("method", "post"), .init("action", "/web/signout"), .id("signout"), .class("signout"))
                {
                    void("input", .type("hidden"), .name("_csrf"), .value(csrf))
                    void("input", .type("hidden"), .name("page"), .value(page.rawValue))
                    el("button", .type("submit"), .class("button-secondary")) { "Sign out" }
                }
            }
        }
    }

    private var bellIcon: HTML {
        el(
            "svg", .class("icon"), .init("viewBox", "0 0 24 24"), .init("width", "20"), .init("height", "20"),
            .aria("aria-hidden", "true"), .init("focusable", "false")
        ) {
            el(
                "path",
                .init(
                    "d",
                    "M12 22a2.5 2.5 0 0 0 2.45-2h-4.9A2.5 2.5 0 0 0 12 22Zm7-6V11a7 7 0 0 0-5.5-6.84V3a1.5 1.5 0 0 0-3 0v1.16A7 7 0 0 0 5 11v5l-2 2v1h18v-1l-2-2Z"
                ), .init("fill", "currentColor"))
        }
    }
}
