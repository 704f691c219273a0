import BelfryCore
import Foundation

/// The hosted preference center (seed 004's page) for one tenant, and the browser's push
/// settings (seed 000 for the web). A plain form that saves on submit; `preferences.js` and
/// `push.js` make it save each change on its own, after a 1 s debounce.
struct PreferenceCenterPage {
    var workspace: WorkspaceConfig
    var data: PreferenceData
    var tenant: String
    var etag: String
    /// The sites the user belongs to, for the switch and "apply to all my sites".
    var userTenants: [String]
    var flash: Flash?
    var csrf: String

    struct Flash {
        var text: String
        var isError: Bool
    }

    /// Names of the form fields, which carry the ids: `category:<id>`, `channel:<category>:<channel>`,
    /// `overall:<channel>`. Ids never contain `:`.
    static func categoryField(_ category: String) -> String { "category:\(category)" }
    static func channelField(_ category: String, _ channel: String) -> String { "channel:\(category):\(channel)" }
    static func overallField(_ channel: String) -> String { "overall:\(channel)" }

    /// The user's sites and the one shown, in the workspace's order.
    var switchableTenants: [String] {
        workspace.tenants.map(\.id).filter { $0 == tenant || userTenants.contains($0) }
    }

    func tenantName(_ id: String) -> String { workspace.tenant(id)?.name ?? id }
    func channelName(_ id: String) -> String { workspace.channel(id)?.name ?? id }

    func render(layout: WebLayout) -> HTML {
        layout.render {
            el("h1") { "Notification preferences" }
            el("p", .class("lede")) {
                "Choose what we send you on "
                el("strong") { tenantName(tenant) }
                "."
            }
            if switchableTenants.count > 1 { tenantSwitch }
            if let flash {
                el(
                    "p", .class(flash.isError ? "flash flash-error" : "flash"),
                    .role(flash.isError ? "alert" : "status")
                ) { flash.text }
            }
            pushSection
            if data.channelPreferences?.contains(where: { $0.channel == "web_push" }) == true {
                el("noscript") {
                    el("p", .class("flash")) { "Push notifications on this browser can be turned on with JavaScript." }
                }
            }
            form
        }
    }

    private var tenantSwitch: HTML {
        el("form", .class("tenant-switch"), .init("method", "get"), .init("action", "/preferences")) {
            el("label", .for("tenant-select")) { "Site" }
            el("select", .id("tenant-select"), .name("tenant")) {
                for id in switchableTenants {
                    el("option", .value(id), .flag("selected", id == tenant)) { tenantName(id) }
                }
            }
            el("button", .type("submit")) { "Show this site" }
        }
    }

    private var form: HTML {
        el(
            "form", .id("preferences-form"), .class("preferences"), .init("method", "post"),
            .init("action", "/preferences"), .data("data-tenant", tenant),
            .data("data-tenants", userTenants.joined(separator: ","))
        ) {
            void("input", .type("hidden"), .name("_csrf"), .value(csrf))
            void("input", .type("hidden"), .name("tenant"), .value(tenant))
            void("input", .type("hidden"), .name("etag"), .value(etag))
            for (index, section) in (data.sections ?? []).enumerated() {
                sectionView(section, index: index)
            }
            overallChannels
            el("div", .class("form-actions")) {
                el("button", .type("submit"), .class("primary save-button"), .name("apply"), .value("tenant")) {
                    "Save"
                }
                if !userTenants.isEmpty {
                    el(
                        "button", .type("submit"), .id("apply-all"), .name("apply"), .value("all"),
                        .aria("aria-describedby", "apply-all-help")
                    ) { "Apply to all my sites" }
                    el("p", .id("apply-all-help"), .class("help")) {
                        "Copies these choices to \(workspace.tenants.filter { userTenants.contains($0.id) }.map(\.name).joined(separator: ", ")), and to sites you join later."
                    }
                }
                el("p", .id("save-status"), .class("save-status"), .role("status"), .aria("aria-live", "polite")) {}
            }
        }
    }

    @HTMLBuilder
    private func sectionView(_ section: Section, index: Int) -> [HTML] {
        if let name = section.name {
            el("section", .class("pref-section"), .aria("aria-labelledby", "section-\(index)")) {
                el("h2", .id("section-\(index)")) { name }
                if let description = section.description { el("p", .class("section-description")) { description } }
                for category in section.subcategories ?? [] { categoryView(category) }
            }
        } else {
            el("div", .class("pref-section unnamed")) {
                for category in section.subcategories ?? [] { categoryView(category) }
            }
        }
    }

    private func categoryView(_ category: Category) -> HTML {
        let id = "c-\(category.category)"
        let describedBy =
            [category.description != nil ? "\(id)-description" : nil, category.isEditable ? nil : "\(id)-locked"]
            .compactMap { $0 }.joined(separator: " ")
        let on = category.preference == .optIn
        return el(
            "div", .class(category.isEditable ? "category" : "category locked"), .id("category-\(category.category)")
        ) {
            el("div", .class("switch-row")) {
                void(
                    "input", .type("checkbox"), .role("switch"), .id(id), .class("switch"),
                    .name(Self.categoryField(category.category)), .value("opt_in"), .flag("checked", on),
                    .aria("aria-checked", on ? "true" : "false"), .flag("disabled", !category.isEditable),
                    .aria("aria-describedby", describedBy.isEmpty ? nil : describedBy),
                    .data("data-pref", Self.categoryField(category.category)))
                el("label", .for(id), .class("switch-label")) { category.name }
            }
            if let description = category.description {
                el("p", .id("\(id)-description"), .class("description")) { description }
            }
            if !category.isEditable {
                el("p", .id("\(id)-locked"), .class("locked-reason")) {
                    "Always on: important for your account, so it can't be turned off."
                }
            }
            if let channels = category.channels, !channels.isEmpty {
                el("fieldset", .class("channels")) {
                    el("legend", .class("channels-legend")) {
                        el("span", .class("visually-hidden")) { "\(category.name): " }
                        "send by"
                    }
                    for channel in channels { channelView(channel, category: category, categoryOn: on) }
                }
            }
        }
    }

    /// A channel's box: disabled while its category is off (nothing of the type is sent then).
    private func channelView(_ channel: CategoryChannel, category: Category, categoryOn: Bool) -> HTML {
        let id = "ch-\(category.category)-\(channel.channel)"
        let on = channel.preference == .optIn
        return el("span", .class(channel.isEditable ? "check" : "check locked")) {
            void(
                "input", .type("checkbox"), .id(id), .name(Self.channelField(category.category, channel.channel)),
                .value("opt_in"), .flag("checked", on), .flag("disabled", !channel.isEditable || !categoryOn),
                .aria("aria-describedby", channel.isEditable ? nil : "\(id)-locked"),
                .data("data-locked", channel.isEditable ? nil : "true"),
                .data("data-pref", Self.channelField(category.category, channel.channel)))
            el("label", .for(id)) {
                channelName(channel.channel)
                if !channel.isEditable {
                    el("span", .id("\(id)-locked"), .class("locked-note")) { " (always on)" }
                }
            }
        }
    }

    private var overallChannels: HTML {
        el("section", .class("pref-section overall"), .aria("aria-labelledby", "overall-heading")) {
            el("h2", .id("overall-heading")) { "Channels" }
            el("p", .id("overall-help"), .class("section-description")) {
                el("strong") { "All" }
                " lets every type you have on use the channel. "
                el("strong") { "Required" }
                " keeps the channel for what must reach you, such as security alerts, whatever else you chose."
            }
            for preference in data.channelPreferences ?? [] {
                let name = Self.overallField(preference.channel)
                el("fieldset", .class("overall-channel"), .aria("aria-describedby", "overall-help")) {
                    el("legend") { channelName(preference.channel) }
                    for (value, label, checked) in [
                        ("all", "All", !preference.isRestricted), ("required", "Required", preference.isRestricted),
                    ] {
                        let id = "o-\(preference.channel)-\(value)"
                        el("span", .class("radio")) {
                            void(
                                "input", .type("radio"), .id(id), .name(name), .value(value),
                                .flag("checked", checked), .data("data-pref", name))
                            el("label", .for(id)) { label }
                        }
                    }
                }
            }
        }
    }

    private var pushSection: HTML {
        let types = (data.sections ?? []).flatMap { $0.subcategories ?? [] }.filter { category in
            category.channels?.contains { $0.channel == "web_push" } == true
        }
        // No browser push on this server: nothing to offer.
        guard data.channelPreferences?.contains(where: { $0.channel == "web_push" }) == true else {
            return .fragment([])
        }
        return el(
            "section", .id("push"), .class("pref-section push"), .aria("aria-labelledby", "push-heading"),
            .flag("hidden"), .data("data-state", "off")
        ) {
            el("h2", .id("push-heading")) { "Push notifications on this browser" }
            el("p", .id("push-education"), .class("section-description")) {
                "Get notified on this device even when this page is closed. Your browser asks for permission once; "
                "you then choose the types below and can turn push off here at any time."
            }
            el("div", .class("switch-row")) {
                void(
                    "input", .type("checkbox"), .role("switch"), .id("push-toggle"), .class("switch"),
                    .aria("aria-checked", "false"), .aria("aria-describedby", "push-education"))
                el("label", .for("push-toggle"), .class("switch-label")) { "Push notifications on this browser" }
            }
            el("div", .id("push-denied"), .class("notice"), .flag("hidden")) {
                el("p") {
                    el("strong") { "Notifications are blocked for this site." }
                    " To allow them, open this site's settings in your browser (the icon to the left of the address), "
                    "set Notifications to Allow, then come back to this page."
                }
            }
            el("div", .id("push-failed"), .class("notice notice-error"), .flag("hidden")) {
                el("p") {
                    "This browser could not be subscribed: "
                    el("span", .id("push-error")) {}
                }
                el("button", .type("button"), .id("push-retry")) { "Try again" }
            }
            el("p", .id("push-unsupported"), .class("notice"), .flag("hidden")) {
                "This browser cannot receive push notifications."
            }
            el("fieldset", .id("push-types"), .class("push-types"), .flag("hidden")) {
                el("legend") { "Types to push to this browser" }
                for category in types {
                    let channel = category.channels?.first { $0.channel == "web_push" }
                    let on = channel?.preference == .optIn
                    let editable = channel?.isEditable ?? false
                    let id = "pt-\(category.category)"
                    el("div", .class("switch-row")) {
                        void(
                            "input", .type("checkbox"), .role("switch"), .id(id), .class("switch"),
                            .flag("checked", on), .aria("aria-checked", on ? "true" : "false"),
                            .flag("disabled", !editable || category.preference != .optIn),
                            .data("data-locked", editable ? nil : "true"),
                            .data("data-pref", Self.channelField(category.category, "web_push")))
                        el("label", .for(id), .class("switch-label")) { category.name }
                    }
                }
            }
            el("p", .id("push-status"), .class("save-status"), .role("status")) {}
        }
    }
}
