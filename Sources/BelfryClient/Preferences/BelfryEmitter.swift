import BelfryCore
import Foundation

/// What happened to the user's preferences in the background.
public enum PreferencesEvent: Sendable, Equatable {
    /// The server confirmed a write, or another device changed them: the new preferences
    /// (with any write still pending applied on top) of `tenant` (`nil`: the default tenant).
    case preferencesUpdated(PreferenceData, tenant: String?)
    /// A write failed and was rolled back, or a change was refused locally.
    case preferencesError(BelfryClientError)
}

/// Delivers `PreferencesEvent`s to callbacks (`on`) and async sequences (`events()`), as
/// seed 004's `emitter` does:
///
/// ```swift
/// belfry.emitter.on(.preferencesUpdated) { data in store.preferences = data }
/// belfry.emitter.on(.preferencesError) { error in showToast(error.message) }
/// ```
@MainActor
public final class BelfryEmitter {
    /// An event to listen for, typed by what its callback receives.
    public struct EventName<Payload>: Sendable {
        let id: String
    }

    /// A registered callback; pass it to `off` to stop it.
    public struct Listener: Hashable, Sendable {
        let id: UUID
    }

    private var listeners: [UUID: (name: String, call: (Any) -> Void)] = [:]
    private var streams: [UUID: AsyncStream<PreferencesEvent>.Continuation] = [:]

    init() {}

    /// Calls `handler` for every event named `name`, on the main actor.
    @discardableResult
    public func on<Payload>(_ name: EventName<Payload>, _ handler: @escaping @MainActor (Payload) -> Void) -> Listener {
        let listener = Listener(id: UUID())
        listeners[listener.id] = (name.id, { value in if let payload = value as? Payload { handler(payload) } })
        return listener
    }

    /// Stops a callback registered with `on`.
    public func off(_ listener: Listener) {
        listeners[listener.id] = nil
    }

    /// Every event from now on, as an async sequence; it ends when the consumer stops iterating.
    public func events() -> AsyncStream<PreferencesEvent> {
        let (stream, continuation) = AsyncStream<PreferencesEvent>.makeStream(bufferingPolicy: .bufferingNewest(64))
        let id = UUID()
        streams[id] = continuation
        continuation.onTermination = { [weak self] _ in
            Task { @MainActor in self?.streams[id] = nil }
        }
        return stream
    }

    func emit(_ event: PreferencesEvent) {
        let (name, payload): (String, Any) =
            switch event {
            case .preferencesUpdated(let data, _): (EventName.preferencesUpdated.id, data)
            case .preferencesError(let error): (EventName.preferencesError.id, error)
            }
        for listener in listeners.values where listener.name == name { listener.call(payload) }
        streams.values.forEach { $0.yield(event) }
    }
}

extension BelfryEmitter.EventName where Payload == PreferenceData {
    /// The preferences changed: a write was confirmed or another device changed them.
    public static var preferencesUpdated: Self { Self(id: "preferencesUpdated") }
}

extension BelfryEmitter.EventName where Payload == BelfryClientError {
    /// A write failed (and was rolled back), or a change was refused locally.
    public static var preferencesError: Self { Self(id: "preferencesError") }
}
