import Foundation
import Vapor

/// How pages answer: HTML with headers that keep them out of caches, frames and other sites' scripts.
enum WebResponse {
    /// Scripts, styles and connections from this origin only; no inline script, no framing.
    static let contentSecurityPolicy =
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        + "worker-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

    /// What every page's head starts with: its character set, a viewport for phones, and both
    /// color schemes.
    static let headBasics: [HTML] = [
        void("meta", .init("charset", "utf-8")),
        void("meta", .name("viewport"), .init("content", "width=device-width, initial-scale=1")),
        void("meta", .name("color-scheme"), .init("content", "light dark")),
    ]

    static func html(_ html: HTML, status: HTTPStatus = .ok) -> Response {
        let response = Response(status: status, body: .init(string: html.document))
        response.headers.contentType = .html
        secure(response)
        return response
    }

    /// Headers every page and page redirect carries. `no-referrer` matters most: a page reached
    /// with `?token=` must not hand its address to the next site.
    static func secure(_ response: Response) {
        response.headers.replaceOrAdd(name: "Content-Security-Policy", value: contentSecurityPolicy)
        response.headers.replaceOrAdd(name: .xContentTypeOptions, value: "nosniff")
        response.headers.replaceOrAdd(name: "Referrer-Policy", value: "no-referrer")
        response.headers.replaceOrAdd(name: .xFrameOptions, value: "DENY")
        response.headers.replaceOrAdd(name: .cacheControl, value: "no-store")
    }

    /// A page of its own, without the signed-in frame: a heading and `content`, kept out of
    /// search engines. Errors, "continue as …?" and the unsubscribe pages.
    static func standalone(title: String, kind: String? = nil, @HTMLBuilder content: () -> [HTML]) -> HTML {
        el("html", .init("lang", "en")) {
            el("head") {
                WebResponse.headBasics
                void("meta", .name("robots"), .init("content", "noindex"))
                el("title") { "\(title) · Belfry" }
                void("link", .init("rel", "stylesheet"), .href(WebAssets.path("belfry.css")))
            }
            el("body") {
                el("main", .id("main"), .class(["error-page", kind].compactMap { $0 }.joined(separator: " "))) {
                    el("h1") { title }
                    content()
                }
            }
        }
    }

    /// "Continue as …?": what a page's address with a token or link shows before anyone is
    /// signed in. `fields` go back hidden in the form.
    static func signInPage(page: WebLayout.Page, userName: String, fields: [(String, String)]) -> HTML {
        standalone(title: "Continue as \(userName)?", kind: "sign-in-page") {
            el("p") { "This link opens the \(page.title) of \(userName). If that is not you, close this page." }
            el("form", .init("method", "post"), .init("action", "/web/session")) {
                for (name, value) in fields {
                    void("input", .type("hidden"), .name(name), .value(value))
                }
                el("button", .type("submit"), .class("button"), .id("continue")) { "Continue" }
            }
        }
    }

    /// A page for an error, with what to do next.
    static func error(status: HTTPStatus, message: String) -> Response {
        let title =
            switch status.code {
            case 401: "Sign-in needed"
            case 404: "Not found"
            case 429: "Too many requests"
            default: "Something went wrong"
            }
        let page = standalone(title: title) {
            el("p", .class("error-message")) { message }
            if status.code != 401 {
                el("p") { el("a", .href("/inbox")) { "Go to your inbox" } }
            }
        }
        return html(page, status: status)
    }
}

/// Renders errors on page routes as HTML pages instead of the API's JSON body.
struct WebErrorMiddleware: Middleware {
    func respond(to request: Request, chainingTo next: any Responder) -> EventLoopFuture<Response> {
        next.respond(to: request).flatMapErrorThrowing { error in
            let failure = BelfryErrorMiddleware.classify(error)
            if failure.status.code >= 500 {
                request.logger.error("page failed", metadata: ["belfry.error": "\(String(reflecting: error))"])
            }
            let page = WebResponse.error(status: failure.status, message: failure.message)
            // Retry-After and the RateLimit fields of a 429, Retry-After of a 503.
            for (name, value) in failure.headers where page.headers[name].isEmpty {
                page.headers.add(name: name, value: value)
            }
            return page
        }
    }
}

/// An `application/x-www-form-urlencoded` body as a dictionary (the last value of a repeated name wins).
enum WebForm {
    static let maxBytes = 64 * 1024

    static func parse(_ req: Request) throws -> [String: String] {
        guard req.headers.contentType?.type == "application",
            req.headers.contentType?.subType == "x-www-form-urlencoded"
        else {
            throw BelfryError(.unsupportedMediaType, "This form must be sent as a web form.")
        }
        // An empty form has no body at all: it is an empty form, not a large one.
        let buffer = req.body.data ?? ByteBuffer()
        guard buffer.readableBytes <= maxBytes else {
            throw BelfryError(.payloadTooLarge, "This form is too large.")
        }
        return try parse(String(buffer: buffer))
    }

    static func parse(_ body: String) throws -> [String: String] {
        do {
            return Dictionary(try URLEncoded.pairs(Substring(body)), uniquingKeysWith: { _, last in last })
        } catch {
            throw BelfryError.badRequest("This form has \"\(error.part)\", which could not be read.")
        }
    }
}
