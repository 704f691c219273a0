import ArgumentParser
import BelfryCore
import Foundation
import Vapor

/// `belfry send`: triggers notifications from the shell, straight into the database; a
/// running `belfry serve` fans them out and delivers them.
struct SendCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract: "Trigger a notification for users listed on the command line or in files.",
        discussion: """
            Each --to is a user id, or a file of user ids: one per line, or CSV with the id in the \
            first column (a header row named id or user_id, blank lines and lines starting with # \
            are skipped). Recipients go out in events of up to 10 000 each.
            """)

    @ArgumentParser.Option(help: "The notification category.")
    var category: String

    @ArgumentParser.Option(name: .customLong("to"), help: "A user id, or a file of user ids. Repeatable.")
    var recipients: [String]

    @ArgumentParser.Option(help: "The tenant. Default: the workspace's default tenant.")
    var tenant: String?

    @ArgumentParser.Option(help: "The notification's title (from the category's templates when left out).")
    var title: String?

    @ArgumentParser.Option(help: "The notification's body (from the category's templates when left out).")
    var body: String?

    @ArgumentParser.Option(help: "The event's data as a JSON object, such as '{\"page\": \"Glocke\"}'.")
    var data: String?

    @ArgumentParser.Option(help: "A link for the notification.")
    var url: String?

    @ArgumentParser.Option(
        help:
            "Makes re-running safe: batch n of this send uses the key <key>-<n>, and a key seen in the last 24 h is not sent again."
    )
    var idempotencyKey: String?

    @OptionGroup var storage: StorageOptions

    func run() async throws {
        let settings = try ServerConfiguration.forCommand(.init(database: storage.database, config: storage.config))
        let users = try Self.readRecipients(recipients)
        guard !users.isEmpty else { throw ValidationError("no recipients: --to named no user ids") }
        var fields: [String: JSONValue]?
        if let data {
            guard case .object(let object) = try? JSONDecoder().decode(JSONValue.self, from: Data(data.utf8)) else {
                throw ValidationError("--data must be a JSON object, such as '{\"page\": \"Glocke\"}'")
            }
            fields = object
        }
        let batches = users.chunked(EventIntake.maxRecipients)
        let (ids, replayed) = try await withConfiguredApp(settings, arguments: ["belfry"]) { belfry, _ in
            let intake = belfry.services.eventIntake
            let progress = Progress(total: users.count)
            var ids: [UUID] = []
            var replayed = 0
            for (index, batch) in batches.enumerated() {
                let request = EventRequest(
                    category: category, recipients: Array(batch), tenant: tenant,
                    content: .init(title: title, body: body, url: url), data: fields,
                    idempotencyKey: idempotencyKey.map { "\($0)-\(index + 1)" })
                do {
                    let accepted = try await intake.accept(request, via: .command, on: belfry.db)
                    ids.append(accepted.id)
                    if accepted.replayed { replayed += 1 }
                } catch let error as BelfryError {
                    throw CommandFailure(error.message)
                }
                progress.advance(by: batch.count, events: ids.count)
            }
            progress.finish()
            return (ids, replayed)
        }
        if replayed == ids.count {
            say(
                "Nothing new was sent: the idempotency key \"\(idempotencyKey ?? "")\" was used already, "
                    + "for \(counted(ids.count, "event")):")
            ids.forEach { say("  \($0)") }
            return
        }
        say("Accepted \(counted(ids.count - replayed, "event")) for \(counted(users.count, "recipient")):")
        ids.forEach { say("  \($0)") }
        if replayed > 0 { say("(\(counted(replayed, "event")) of them sent before, under the same idempotency key.)") }
        say("A running `belfry serve` fans them out; follow each with GET /v1/events/{event_id}.")
    }

    /// The user ids named by `--to` values, in order, each once.
    static func readRecipients(_ values: [String]) throws -> [String] {
        var ids: [String] = []
        var problems: [String] = []
        for value in values {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: value, isDirectory: &isDirectory), !isDirectory.boolValue
            else {
                if UserID.isValid(value) {
                    ids.append(value)
                } else {
                    problems.append("\"\(value)\" is not a valid user id")
                }
                continue
            }
            let text: String
            do {
                text = try String(contentsOfFile: value, encoding: .utf8)
            } catch {
                throw CommandFailure("cannot read \(value): \(error.localizedDescription)")
            }
            for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                var id = line.split(separator: ",", maxSplits: 1).first.map(String.init) ?? ""
                id = id.trimmingCharacters(in: .whitespaces).trimmingCharacters(in: CharacterSet(charactersIn: "\"\r"))
                if id.isEmpty || id.hasPrefix("#") || (number == 0 && ["id", "user_id"].contains(id.lowercased())) {
                    continue
                }
                if UserID.isValid(id) {
                    ids.append(id)
                } else {
                    problems.append("\(value) line \(number + 1): \"\(id.prefix(40))\" is not a valid user id")
                }
            }
        }
        if !problems.isEmpty {
            let shown = problems.prefix(5).joined(separator: "\n  ")
            let more = problems.count > 5 ? "\n  … and \(problems.count - 5) more" : ""
            throw ValidationError(
                "\(problems.count) bad recipient\(problems.count == 1 ? "" : "s") (\(UserID.rule)):\n  \(shown)\(more)")
        }
        var seen = Set<String>()
        return ids.filter { seen.insert($0).inserted }
    }

    /// A progress bar on standard error, with the rate and the time left: redrawn in place on a
    /// terminal, a plain line per batch otherwise (a log, a pipe).
    final class Progress {
        let total: Int
        var done = 0
        let interactive = isatty(STDERR_FILENO) == 1
        let started = ContinuousClock.now

        init(total: Int) {
            self.total = total
        }

        func advance(by count: Int, events: Int) {
            done += count
            let elapsed = started.duration(to: .now)
            let seconds = elapsed.inSeconds
            let line = Self.line(done: done, total: total, events: events, seconds: seconds)
            FileHandle.standardError.write(Data((interactive ? "\r" + line : line + "\n").utf8))
        }

        func finish() {
            if interactive { FileHandle.standardError.write(Data("\n".utf8)) }
        }

        /// `[#####.....] 5000/10000 recipients, 1 event, 2500/s, 0:02 left`.
        static func line(done: Int, total: Int, events: Int, seconds: Double) -> String {
            let width = 30
            let filled = total == 0 ? width : width * done / total
            let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
            var line = "[\(bar)] \(done)/\(counted(total, "recipient")), \(counted(events, "event"))"
            guard seconds > 0, done > 0 else { return line }
            let rate = Double(done) / seconds
            line += ", \(Int(rate.rounded()))/s"
            if done < total {
                let left = Int((Double(total - done) / rate).rounded(.up))
                line += ", " + String(format: "%d:%02d", left / 60, left % 60) + " left"
            } else {
                line += ", " + String(format: "%d:%02d", Int(seconds) / 60, Int(seconds) % 60) + " in all"
            }
            return line
        }
    }
}
