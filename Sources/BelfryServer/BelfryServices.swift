import Vapor

/// The composition root: every store and service of the server, each built once, here, with what
/// it depends on. `configure` builds it after the shared parts (``BelfryContext``: the
/// configuration, the database, the clock, the signals) and gives each controller, worker and
/// command the services it calls; nothing else constructs them.
struct BelfryServices: Sendable {
    let statusEvents: StatusEvents
    let auditLog: AuditLog
    let topics: TopicStore
    let devices: DeviceStore
    let deadLetters: DeadLetters
    let messageLog: MessageLog
    let eventStatuses: EventStatusQuery
    let consoleData: ConsoleData
    let inboxStore: InboxStore
    let inboxEvents: InboxEvents
    let inboxChanges: InboxChanges
    let inboxRetention: InboxRetention
    let preferenceStore: PreferenceStore
    let preferenceChanges: PreferenceChanges
    let eventIntake: EventIntake
    let fanout: Fanout

    init(_ context: BelfryContext) {
        let database = context.database
        let now = context.now
        let settings = context.settings
        let workspace = context.workspace
        let statusSignal = context.statusSignal
        statusEvents = StatusEvents(
            endpoints: settings.statusEndpoints, storage: database, now: now, wake: { statusSignal.wake() })
        auditLog = AuditLog(storage: database, now: now)
        topics = TopicStore(storage: database, now: now)
        devices = DeviceStore(storage: database, now: now)
        deadLetters = DeadLetters(storage: database, now: now)
        messageLog = MessageLog()
        eventStatuses = EventStatusQuery(workspace: workspace)
        consoleData = ConsoleData(storage: database, events: eventStatuses, now: now)
        inboxStore = InboxStore(
            storage: database, workspace: workspace, now: now, wakeDeliveries: context.deliveryWake,
            statusEvents: statusEvents)
        inboxEvents = InboxEvents(
            hub: context.inboxHub, store: inboxStore, relays: database.kind == .postgres, instance: context.instance,
            logger: context.logger)
        inboxChanges = InboxChanges(store: inboxStore, events: inboxEvents)
        inboxRetention = InboxRetention(storage: database, now: now, days: settings.retentionDays)
        preferenceStore = PreferenceStore(
            storage: database, workspace: workspace, workspaceFingerprint: context.workspaceFingerprint, now: now,
            statusEvents: statusEvents)
        preferenceChanges = PreferenceChanges(store: preferenceStore, events: inboxEvents)
        eventIntake = EventIntake(
            storage: database, workspace: workspace, now: now, wake: context.fanoutWake, metrics: context.metrics,
            topics: topics)
        fanout = Fanout(
            storage: database, workspace: workspace, now: now, events: inboxEvents,
            isFollowed: context.inboxHub.isFollowed, wakeDeliveries: context.deliveryWake, metrics: context.metrics,
            devices: devices, statusEvents: settings.statusEndpoints.isEmpty ? nil : statusEvents)
    }
}

extension Application {
    private struct ServicesKey: StorageKey {
        typealias Value = BelfryServices
    }

    /// The composition root's services, for the commands and the tests that drive them.
    var belfryServices: BelfryServices {
        get {
            guard let services = storage[ServicesKey.self] else {
                preconditionFailure("configure(_:settings:) must run before Belfry's services are used")
            }
            return services
        }
        set { storage[ServicesKey.self] = newValue }
    }
}
