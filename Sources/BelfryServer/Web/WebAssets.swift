import Crypto
import Foundation
import Vapor

/// The pages' scripts, style sheet and service worker: files in `Resources/web`, read once.
struct WebAssets {
    struct File: Sendable {
        var body: String
        var contentType: HTTPMediaType
        var etag: String

        /// Revalidated on every use (`no-cache` with an ETag), so a new server version is picked up at once.
        func response(for req: Request) -> Response {
            if req.headers.first(name: .ifNoneMatch) == etag {
                return Response(status: .notModified, headers: ["ETag": etag])
            }
            let response = Response(status: .ok, body: .init(string: body))
            response.headers.contentType = contentType
            response.headers.replaceOrAdd(name: .eTag, value: etag)
            response.headers.replaceOrAdd(name: .cacheControl, value: "no-cache")
            response.headers.replaceOrAdd(name: .xContentTypeOptions, value: "nosniff")
            return response
        }
    }

    static let files: [String: File] = {
        guard
            let directory = Bundle.module.url(forResource: "web", withExtension: nil, subdirectory: "Resources"),
            let names = try? FileManager.default.contentsOfDirectory(atPath: directory.path)
        else {
            fatalError("Resources/web is missing from the BelfryServer bundle")
        }
        var files: [String: File] = [:]
        for name in names {
            let type: HTTPMediaType
            if name.hasSuffix(".js") {
                type = HTTPMediaType(type: "text", subType: "javascript", parameters: ["charset": "utf-8"])
            } else if name.hasSuffix(".css") {
                type = HTTPMediaType(type: "text", subType: "css", parameters: ["charset": "utf-8"])
            } else {
                continue
            }
            guard let body = try? String(contentsOf: directory.appendingPathComponent(name), encoding: .utf8) else {
                continue
            }
            let digest = SHA256.hash(data: Data(body.utf8)).prefix(8).hexEncoded
            files[name] = File(body: body, contentType: type, etag: "\"\(digest)\"")
        }
        return files
    }()

    static func file(_ name: String) -> File? { files[name] }

    /// Where a page links an asset.
    static func path(_ name: String) -> String { "/web/\(name)" }
}
