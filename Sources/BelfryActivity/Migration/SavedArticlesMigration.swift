import Foundation

/// Copies saved dates from the legacy store to the new store (seed 002).
///
/// Each batch fetches legacy rows with `is_saved_migrated = 0`, writes the parsable ones to the
/// new store in one transaction, and only then marks them migrated. Rows that cannot be parsed
/// are reported and marked skipped, so they never stall the migration.
///
/// - Resumable: a failed batch marks nothing and stops the run; the next run starts there.
/// - Idempotent: the new store keeps one record per article and list with the latest date, so
///   copying a row twice (after a crash between the write and the mark) changes nothing.
///
/// Run it regularly, for example at launch and when the app returns to the foreground, until
/// `MigrationReport.isComplete`. Batches run on the recorder, between the app's saves.
public struct SavedArticlesMigration: Sendable {
    /// The recorder whose stores are migrated, the same one the app saves through.
    public let recorder: SavedArticlesRecorder
    /// Legacy rows per batch.
    public let batchSize: Int
    /// Set once a run found nothing left: later `runIfNeeded` calls return at once.
    private let finished = FinishedFlag()

    /// - Parameters:
    ///   - recorder: the app's recorder, so that batches and saves never interleave.
    ///   - batchSize: legacy rows per batch (at least 1).
    public init(recorder: SavedArticlesRecorder, batchSize: Int = 200) {
        self.recorder = recorder
        self.batchSize = max(1, batchSize)
    }

    /// For launch and foreground (seed 002's "regularly"): batches until nothing is pending, a
    /// batch fails, or `budget` is spent on `clock`, always at least one batch, so that a large
    /// old store moves a little at each visit without holding up the app. Once a run found
    /// nothing left, later calls do no work at all.
    public func runIfNeeded<C: Clock>(budget: C.Duration, clock: C) async -> MigrationReport {
        var report = MigrationReport()
        if finished.isSet {
            report.isComplete = true
            return report
        }
        let deadline = clock.now.advanced(by: budget)
        repeat {
            let batch = await recorder.migrateBatch(limit: batchSize)
            report.add(batch)
            if batch.failure != nil { return report }
            if batch.fetched < batchSize {
                report.isComplete = true
                finished.set()
                return report
            }
        } while clock.now < deadline && !Task.isCancelled
        return report
    }

    /// ``runIfNeeded(budget:clock:)`` on the continuous clock.
    public func runIfNeeded(budget: Duration) async -> MigrationReport {
        await runIfNeeded(budget: budget, clock: ContinuousClock())
    }

    /// Runs batches until nothing is pending, a batch fails, or the task is cancelled.
    public func run() async -> MigrationReport {
        var report = MigrationReport()
        while !Task.isCancelled {
            let batch = await recorder.migrateBatch(limit: batchSize)
            report.add(batch)
            if batch.failure != nil { return report }
            if batch.fetched < batchSize {
                report.isComplete = true
                return report
            }
        }
        return report
    }

    /// Runs one batch; `isComplete` tells whether it found fewer rows than a batch holds.
    public func runBatch() async -> MigrationReport {
        let batch = await recorder.migrateBatch(limit: batchSize)
        var report = MigrationReport()
        report.add(batch)
        report.isComplete = batch.failure == nil && batch.fetched < batchSize
        return report
    }
}

/// What a migration run did.
public struct MigrationReport: Sendable, Equatable {
    /// A legacy row left out, and why.
    public struct SkippedRow: Sendable, Hashable {
        /// The row's id in the legacy store.
        public var legacyID: Int64
        /// Its article key, possibly empty.
        public var articleKey: String
        /// Why it was left out.
        public var reason: SkipReason

        /// - Parameters: the row and why it was left out.
        public init(legacyID: Int64, articleKey: String, reason: SkipReason) {
            self.legacyID = legacyID
            self.articleKey = articleKey
            self.reason = reason
        }
    }

    /// Legacy rows copied and marked migrated in this run.
    public var migratedCount = 0
    /// Legacy rows that could not be parsed, marked skipped in this run.
    public var skipped: [SkippedRow] = []
    /// Batches that ran, the failed one included.
    public var batchCount = 0
    /// Why the run stopped early; nothing of that batch was marked.
    public var failure: ActivityError?
    /// Whether no legacy row is left to migrate.
    public var isComplete = false

    /// An empty report.
    public init() {}

    mutating func add(_ batch: MigrationBatch) {
        batchCount += 1
        migratedCount += batch.migrated.count
        skipped += batch.skipped
        failure = batch.failure
    }
}

/// Whether a migration has seen its end, shared by the copies of a `SavedArticlesMigration`.
private final class FinishedFlag: @unchecked Sendable {
    // @unchecked: the flag is read and set under `lock`.
    private let lock = NSLock()
    private var value = false

    var isSet: Bool { lock.withLock { value } }
    func set() { lock.withLock { value = true } }
}
