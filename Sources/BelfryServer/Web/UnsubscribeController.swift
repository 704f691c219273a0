import BelfryCore
import Fluent
import Foundation
import Vapor

/// One-click unsubscribe from an email (RFC 8058, RFC 2369). The signed link in an email's
/// `List-Unsubscribe` header is the credential: a `POST` with `List-Unsubscribe=One-Click`
/// turns that category's email off for the user on that site (the category itself stays on).
/// A `GET` only shows a page with a button: mail scanners follow links, and must never
/// unsubscribe anyone.
struct UnsubscribeController: RouteCollection {
    /// The server's settings and shared parts (the clock, the workspace, the database).
    let context: BelfryContext
    let preferenceChanges: PreferenceChanges

    func boot(routes: any RoutesBuilder) throws {
        let pages = routes.grouped(
            WebErrorMiddleware(),
            RateLimitMiddleware(limiter: context.rateLimiter, auth: context.auth, byAddress: .public))
        pages.get("unsubscribe", ":token", use: confirm)
        pages.post("unsubscribe", ":token", use: unsubscribe)
    }

    /// What a valid link names.
    private struct Target {
        var link: UnsubscribeLink
        var user: UserModel
        var category: CategoryDefinition
        var tenantName: String
    }

    private func target(_ req: Request) async throws -> Target {
        guard let token = req.parameters.get("token"),
            let link = context.webSigner.verify(token, as: UnsubscribeLink.self), link.kind == "unsubscribe"
        else {
            throw BelfryError(.invalidLink, "This unsubscribe link is not valid. Use the link in a recent email.")
        }
        guard link.exp > Int(context.now().timeIntervalSince1970) else {
            throw BelfryError(.linkExpired, "This unsubscribe link has expired. Use the link in a recent email.")
        }
        guard let user = try await UserModel.find(link.uid, on: req.db) else {
            throw BelfryError(.invalidLink, "The account of this link no longer exists.")
        }
        guard let category = context.workspace.category(link.category),
            EmailComposer.canUnsubscribe(from: link.channel, in: category)
        else {
            throw BelfryError(.invalidLink, "These emails can no longer be turned off here. Open your preferences.")
        }
        return Target(
            link: link, user: user, category: category,
            tenantName: context.workspace.tenant(link.tenant)?.name ?? link.tenant)
    }

    /// `GET /unsubscribe/{token}`: asks, with one button.
    @Sendable func confirm(req: Request) async throws -> Response {
        let target = try await target(req)
        let path = req.url.path
        return page(title: "Stop these emails?") {
            el("p") {
                "You get an email for each “\(target.category.name)” notification on \(target.tenantName). "
                    + "You will still see them in your inbox."
            }
            el("form", .init("method", "post"), .init("action", path)) {
                void("input", .type("hidden"), .name("List-Unsubscribe"), .value("One-Click"))
                el("button", .type("submit"), .class("button")) { "Stop these emails" }
            }
        }
    }

    /// `POST /unsubscribe/{token}` with `List-Unsubscribe=One-Click`, from a mail client or the page's button.
    @Sendable func unsubscribe(req: Request) async throws -> Response {
        let target = try await target(req)
        guard try Self.isOneClick(req) else {
            throw BelfryError.badRequest("An unsubscribe request carries List-Unsubscribe=One-Click.")
        }
        let userID = try target.user.requireID()
        let change = PreferenceChange.channelInCategory(
            channel: target.link.channel, category: target.category.id, .optOut)
        let unsubscribed = StatusEvent(
            type: .emailUnsubscribed,
            data: [
                "user": .string(target.user.externalID), "category": .string(target.category.id),
                "tenant": .string(target.link.tenant), "channel": .string(target.link.channel),
            ])
        _ = try await self.preferenceChanges.change(
            userID: userID, scopes: [.tenant(target.link.tenant)], changes: [change], expected: [:],
            also: [unsubscribed], on: req.db)
        req.logger.info(
            "preferences changed",
            metadata: [
                "belfry.user": "\(target.user.externalID)", "belfry.scopes": "tenant:\(target.link.tenant)",
                "belfry.changes": "1", "belfry.via": "unsubscribe link",
            ])
        // The answer carries no credential: a one-click link travels in forwarded mail, and
        // whoever holds it may turn these emails off, nothing more.
        return page(title: "You will get no more of these emails") {
            el("p", .role("status")) {
                "“\(target.category.name)” emails on \(target.tenantName) are off. They still reach your inbox."
            }
            el("p") { "To choose what else you get, follow “Choose what you get” at the end of any of our emails." }
        }
    }

    /// The body RFC 8058 §3.1 describes, as a web form or as multipart form data.
    static func isOneClick(_ req: Request) throws -> Bool {
        if req.headers.contentType?.subType == "form-data" {
            struct OneClick: Content {
                var value: String?
                enum CodingKeys: String, CodingKey { case value = "List-Unsubscribe" }
            }
            return (try? req.content.decode(OneClick.self))?.value == "One-Click"
        }
        return try WebForm.parse(req)["List-Unsubscribe"] == "One-Click"
    }

    private func page(title: String, @HTMLBuilder content: () -> [HTML]) -> Response {
        WebResponse.html(WebResponse.standalone(title: title, kind: "unsubscribe-page", content: content))
    }
}
