import BelfryCore
import Foundation

/// `/admin/templates`: a category's content rendered from sample data in each language, as
/// `belfry templates render` prints it.
extension ConsolePages {
    struct TemplatesForm {
        var categories: [CategoryDefinition]
        var chosen: CategoryDefinition?
        var data: String
        var locale: String
        var count: Int
        var preview: TemplatePreview?
        var problem: String?
    }

    static func templates(_ form: TemplatesForm, csrf: String) -> HTML {
        document(title: "Templates", csrf: csrf) {
            el("h1") { "Templates" }
            el("p", .class("muted")) {
                "Each category with content templates or a digest, rendered from sample data in every language it has. "
                    + "Nothing is sent."
            }
            if form.categories.isEmpty {
                el("p", .class("empty")) { "No category has content templates or a digest." }
            } else {
                el("form", .init("method", "get"), .init("action", "/admin/templates"), .class("test-form")) {
                    el("label", .for("template-category")) { "Category" }
                    el("select", .id("template-category"), .name("category")) {
                        for category in form.categories {
                            el(
                                "option", .value(category.id),
                                .init("selected", category.id == form.chosen?.id ? "" : nil)
                            ) { "\(category.name) (\(category.id))" }
                        }
                    }
                    el("label", .for("template-data")) { "Sample data (JSON)" }
                    el("textarea", .id("template-data"), .name("data"), .init("rows", "4")) { form.data }
                    el("label", .for("template-locale")) { "A user's locale (empty: every language)" }
                    void("input", .id("template-locale"), .name("locale"), .value(form.locale))
                    el("label", .for("template-count")) { "Events in a digest" }
                    void(
                        "input", .id("template-count"), .name("count"), .type("number"), .init("min", "1"),
                        .value("\(form.count)"))
                    el("button", .type("submit")) { "Preview" }
                }
            }
            if let problem = form.problem {
                el("p", .class("error-message"), .role("alert")) { problem }
            }
            if let preview = form.preview {
                for (index, block) in preview.blocks.enumerated() {
                    el("section", .class("template-preview"), .aria("aria-labelledby", "preview-\(index)")) {
                        el("h2", .id("preview-\(index)")) { block.label }
                        el("dl") {
                            for field in block.fields {
                                el("dt") { field.name }
                                el(
                                    "dd", .init("lang", block.language),
                                    .init("dir", block.language.map { LanguageTag.isRightToLeft($0) ? "rtl" : "ltr" })
                                ) { field.value }
                            }
                        }
                    }
                }
            }
        }
    }
}
