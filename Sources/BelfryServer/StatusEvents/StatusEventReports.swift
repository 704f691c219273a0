import BelfryCore
import BelfryJSON
import Foundation
import SQLKit

/// What one `status_events` row holds: one report, or a bundle of them.
///
/// A change that reports many things to one endpoint at once (fan-out's `message.sent` for every
/// inbox notification it wrote, a group commit's results) queues them as bundles of at most
/// ``bundleLimit`` reports of one type, one row each, instead of a row per report: those rows are
/// written inside the deliveries' transactions, on SQLite's one writer, and rows, not bytes, are
/// what they cost. A single report's body is its JSON (`{…}`), and the row's id is its
/// webhook-id; a bundle's body is a line per report, `<id> <JSON>` (JSON holds no raw line break),
/// so each report keeps its own webhook-id whichever row carries it. The sender posts each report
/// on its own; reports of a bundle that end differently are split into rows of their own.
enum StatusEventReports {
    struct Report: Sendable, Equatable {
        var id: UUID
        var body: String
    }

    /// The most reports one row bundles.
    static let bundleLimit = 64

    /// The reports of the row `rowID` whose body is `body`.
    static func decode(rowID: UUID, body: String) -> [Report] {
        guard body.utf8.first != UInt8(ascii: "{") else { return [Report(id: rowID, body: body)] }
        return body.utf8.split(separator: UInt8(ascii: "\n")).compactMap { line in
            let space = line.firstIndex(of: UInt8(ascii: " ")) ?? line.endIndex
            guard let id = UUID(uuidString: String(decoding: line[..<space], as: UTF8.self)), space < line.endIndex
            else { return nil }
            return Report(id: id, body: String(decoding: line[line.index(after: space)...], as: UTF8.self))
        }
    }

    /// The body of a bundle row holding `reports`.
    static func bundle(_ reports: some Sequence<Report>) -> String {
        var text = ""
        for report in reports {
            if !text.isEmpty { text += "\n" }
            text += report.id.lowerCaseText
            text += " "
            text += report.body
        }
        return text
    }
}

extension StatusEventReports {
    /// Erases every report about the user `externalID`: whole rows when all they hold is about
    /// them, their lines from bundles that also hold others'. Rows are found by the user's name
    /// in the text (`LIKE`, a superset: SQLite's is case-blind) and each report is checked by its
    /// parsed `data.user`.
    static func erase(user externalID: String, on sql: any SQLDatabase) async throws {
        var quoted: [UInt8] = []
        JSONBytes.appendString(externalID, to: &quoted)
        let needle = "\"user\":" + String(decoding: quoted, as: UTF8.self)
        var pattern = "%"
        for character in needle {
            if character == "%" || character == "_" || character == "\\" { pattern.append("\\") }
            pattern.append(character)
        }
        pattern += "%"
        let rows = try await sql.raw(
            "SELECT id, body FROM status_events WHERE body LIKE \(bind: pattern) ESCAPE '\\'"
        ).all()
        for row in rows {
            let id = try row.decode(column: "id", as: UUID.self)
            let reports = decode(rowID: id, body: try row.decode(column: "body", as: String.self))
            let kept = reports.filter { !isAbout(externalID, $0) }
            if kept.isEmpty {
                try await sql.delete(from: Tables.statusEvents).where("id", .equal, id).run()
            } else if kept.count < reports.count {
                try await sql.update(Tables.statusEvents).set("body", to: bundle(kept)).set("reports", to: kept.count)
                    .where("id", .equal, id).run()
            }
        }
    }

    private static func isAbout(_ externalID: String, _ report: Report) -> Bool {
        guard case .object(let fields)? = try? JSONDecoder().decode(JSONValue.self, from: Data(report.body.utf8)),
            case .object(let data)? = fields["data"], case .string(let user)? = data["user"]
        else { return false }
        return user == externalID
    }
}
