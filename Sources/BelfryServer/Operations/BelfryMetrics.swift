import Foundation
import NIOConcurrencyHelpers
import Prometheus
import SQLKit

/// What `/metrics` reports, counted by this process since it started. Each application has its
/// own registry rather than the process-wide metrics system, so that several applications in
/// one process (as in the tests) each count their own.
final class BelfryMetrics: Sendable {
    let registry = PrometheusCollectorRegistry()

    /// A series: its metric's name and its label values, in order.
    private struct Series: Hashable {
        var name: String
        var labels: [String]
    }

    /// The series counted on every request and every batch, once made: the registry checks each
    /// name and help text and takes its lock whenever a series is asked for (about 1 % of
    /// intake's samples). Their labels come from small sets (channels, outcomes, routes).
    private let counters = NIOLockedValueBox<[Series: Counter]>([:])
    private let histograms = NIOLockedValueBox<[Series: DurationHistogram]>([:])

    private func counter(_ descriptor: MetricNameDescriptor, _ labels: [(String, String)] = []) -> Counter {
        Self.kept(in: counters, descriptor, labels) { registry.makeCounter(descriptor: descriptor, labels: labels) }
    }

    private func histogram(
        _ descriptor: MetricNameDescriptor, _ labels: [(String, String)], buckets: [Duration]
    ) -> DurationHistogram {
        Self.kept(in: histograms, descriptor, labels) {
            registry.makeDurationHistogram(descriptor: descriptor, labels: labels, buckets: buckets)
        }
    }

    /// The series of `descriptor` and `labels` from `cache`, made (by `make`) and kept the first time.
    private static func kept<Metric>(
        in cache: NIOLockedValueBox<[Series: Metric]>, _ descriptor: MetricNameDescriptor, _ labels: [(String, String)],
        make: () -> Metric
    ) -> Metric {
        let series = Series(name: descriptor.metricName, labels: labels.map(\.1))
        if let metric = cache.withLockedValue({ $0[series] }) { return metric }
        let metric = make()
        cache.withLockedValue { $0[series] = metric }
        return metric
    }

    /// The outcomes `belfry_deliveries_total` counts.
    static let outcomes = ["sent", "retry", "failed", "skipped", "dead"]
    /// The states `belfry_events_total` counts.
    static let eventStates = ["accepted", "done", "failed"]

    /// Makes every documented series exist from the start, at 0: a counter that appears only at
    /// its first increment hides that increment from `increase(...) > 0`.
    func start(channels: [String]) {
        for channel in channels {
            for outcome in Self.outcomes {
                _ = registry.makeCounter(
                    descriptor: Name.deliveries, labels: [("channel", channel), ("outcome", outcome)])
            }
            _ = registry.makeDurationHistogram(
                descriptor: Name.deliveryLatency, labels: [("channel", channel)], buckets: Self.latencyBuckets)
        }
        for state in Self.eventStates {
            _ = registry.makeCounter(descriptor: Name.events, labels: [("state", state)])
        }
        _ = registry.makeCounter(descriptor: Name.fannedOut)
        registry.makeGauge(descriptor: Name.buildInfo, labels: [("version", belfryVersion)]).set(to: 1)
        registry.makeGauge(descriptor: Name.processStart).set(to: ProcessFigures.startTime)
    }

    /// Each metric's full name and help text. (The descriptor type is not `Sendable`, so it is
    /// made where it is used; the texts are made once.)
    private enum Name {
        static let deliveriesHelp =
            "Finished delivery attempts by channel and outcome: sent, retry, failed, skipped or dead. "
            + "An inbox notification available at once counts as sent."

        static func metric(_ name: String, _ help: String) -> MetricNameDescriptor {
            MetricNameDescriptor(metricName: name, unitName: "", helpText: help)
        }

        static var deliveries: MetricNameDescriptor { metric("belfry_deliveries_total", deliveriesHelp) }
        static var fannedOut: MetricNameDescriptor {
            metric("belfry_fanout_recipients_total", "Recipients processed by fan-out.")
        }
        static var events: MetricNameDescriptor {
            metric(
                "belfry_events_total",
                "Events accepted (state accepted), and events whose fan-out finished (done) or stopped (failed).")
        }
        static var requestDuration: MetricNameDescriptor {
            metric(
                "belfry_http_request_duration_seconds",
                "Time from a request's arrival to its response head, by route pattern, method and status.")
        }
        static var outboxPending: MetricNameDescriptor {
            metric(
                "belfry_outbox_pending",
                "Deliveries queued or under way, by channel, across every instance sharing the database.")
        }
        static var deliveryLatency: MetricNameDescriptor {
            metric(
                "belfry_delivery_latency_seconds",
                "Time from an event's 202 to each of its deliveries sent (an inbox item: available), by channel.")
        }
        static var outboxOldest: MetricNameDescriptor {
            metric(
                "belfry_outbox_oldest_seconds",
                "How long the oldest delivery due now has waited, by channel (0 when none waits).")
        }
        static var streamsOpen: MetricNameDescriptor {
            metric("belfry_streams_open", "Inbox streams open on this instance.")
        }
        static var buildInfo: MetricNameDescriptor {
            metric("belfry_build_info", "Always 1; the version of Belfry this process runs, as a label.")
        }
        static var processStart: MetricNameDescriptor {
            metric("process_start_time_seconds", "When this process started, in seconds since 1970.")
        }
        static var processCPU: MetricNameDescriptor {
            metric("process_cpu_seconds_total", "CPU time this process has used, user and system, in seconds.")
        }
        static var processMemory: MetricNameDescriptor {
            metric("process_resident_memory_bytes", "This process's resident memory, in bytes.")
        }
        static var processOpenFDs: MetricNameDescriptor {
            metric("process_open_fds", "File descriptors this process has open (sockets included).")
        }
        static var processMaxFDs: MetricNameDescriptor {
            metric("process_max_fds", "The most file descriptors this process may open.")
        }
    }

    /// A finished delivery attempt; an inbox notification written at once counts as `sent`.
    func delivered(channel: String, outcome: String, count: Int = 1) {
        guard count > 0 else { return }
        counter(Name.deliveries, [("channel", channel), ("outcome", outcome)]).increment(by: Int64(count))
    }

    /// Deliveries sent (or inbox items made available) `count` times, each `latency` after its event's 202.
    func deliveredAfter(_ latency: TimeInterval, channel: String, count: Int = 1) {
        guard count > 0 else { return }
        let histogram = histogram(Name.deliveryLatency, [("channel", channel)], buckets: Self.latencyBuckets)
        for _ in 0..<count { histogram.record(.milliseconds(Int64(max(latency, 0) * 1000))) }
    }

    /// From a few milliseconds (the pipeline at its best) to an hour (retries, schedules).
    static let latencyBuckets: [Duration] = [
        .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100),
        .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10),
        .seconds(30), .seconds(60), .seconds(300), .seconds(900), .seconds(3600),
    ]

    /// Recipients fan-out has processed, batched or not.
    func fannedOut(_ recipients: Int) {
        guard recipients > 0 else { return }
        counter(Name.fannedOut).increment(by: Int64(recipients))
    }

    /// What became of events: `accepted` when stored, then `done` or `failed` when fan-out ends.
    func event(_ state: String) {
        counter(Name.events, [("state", state)]).increment()
    }

    /// An answered request: its route's pattern (never the ids in its path), method and status.
    func answered(route: String, method: String, status: Int, after duration: Duration) {
        histogram(
            Name.requestDuration, [("route", route), ("method", method), ("status", String(status))],
            buckets: Self.durationBuckets
        ).record(duration)
    }

    static let durationBuckets: [Duration] = [
        .milliseconds(1), .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50),
        .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5),
        .seconds(10),
    ]

    /// The text exposition, after reading the values that are states rather than counts: the
    /// outbox per channel (from the database, so it is the same on every instance) and the
    /// streams open on this one.
    func exposition(channels: [String], openStreams: Int, now: Date, on sql: any SQLDatabase) async throws -> String {
        var oldest = Dictionary(uniqueKeysWithValues: channels.map { ($0, 0.0) })
        oldest.merge(try await Outbox.oldestDue(now: now, channels: channels, on: sql)) { _, age in age }
        for (channel, age) in oldest {
            registry.makeGauge(descriptor: Name.outboxOldest, labels: [("channel", channel)]).set(to: age)
        }
        var pending = Dictionary(uniqueKeysWithValues: channels.map { ($0, 0) })
        pending.merge(Outbox.pending(in: try await Outbox.counts(Outbox.pendingStatuses, on: sql))) { _, count in count
        }
        for (channel, count) in pending {
            registry.makeGauge(descriptor: Name.outboxPending, labels: [("channel", channel)]).set(to: Double(count))
        }
        registry.makeGauge(descriptor: Name.streamsOpen).set(to: Double(openStreams))
        // A counter of the process's own; the registry's counters only go up by increments, so
        // this one is a gauge under the conventional name, set from the kernel's figure.
        registry.makeGauge(descriptor: Name.processCPU).set(to: ProcessFigures.cpuSeconds)
        if let resident = ProcessFigures.residentBytes {
            registry.makeGauge(descriptor: Name.processMemory).set(to: resident)
        }
        if let open = ProcessFigures.openFileDescriptors {
            registry.makeGauge(descriptor: Name.processOpenFDs).set(to: Double(open))
        }
        registry.makeGauge(descriptor: Name.processMaxFDs).set(to: ProcessFigures.maxFileDescriptors)
        return registry.emitToString()
    }
}
