/// The names of the tables the stores read and write through SQLKit's builders, each spelled
/// once. (Migrations keep their literals: they record the schema as it was when they ran.
/// Fluent models name their own table in `schema`.)
enum Tables {
    static let events = "events"
    static let eventRecipients = "event_recipients"
    static let eventExclusions = "event_exclusions"
    static let eventSkips = "event_skips"
    static let idempotencyKeys = "idempotency_keys"
    static let notifications = "notifications"
    static let notificationActions = "notification_actions"
    static let deliveries = "deliveries"
    static let deliveryAttempts = "delivery_attempts"
    static let devices = "devices"
    static let statusEvents = "status_events"
    static let apiKeys = "api_keys"
    static let topicSubscriptions = "topic_subscriptions"
    static let throttleState = "throttle_state"
    static let batches = "batches"
    static let batchItems = "batch_items"
    static let queueSamples = "queue_samples"
    static let auditLog = "audit_log"
}
