#if canImport(UIKit) && !os(watchOS)
    import UIKit
#elseif canImport(AppKit)
    import AppKit
#endif

#if (canImport(UIKit) && !os(watchOS)) || canImport(AppKit)
    /// ``DeviceTokenSource`` over the system's application object: ``register()`` asks the system
    /// for remote notifications, and the app delegate hands every token it receives to
    /// ``received(_:)`` (from `application(_:didRegisterForRemoteNotificationsWithDeviceToken:)`).
    public final class SystemDeviceTokenSource: DeviceTokenSource {
        private let stream: AsyncStream<Data>
        private let continuation: AsyncStream<Data>.Continuation

        public init() {
            (stream, continuation) = AsyncStream.makeStream()
        }

        public func register() async {
            await MainActor.run {
                #if canImport(UIKit) && !os(watchOS)
                    UIApplication.shared.registerForRemoteNotifications()
                #else
                    NSApplication.shared.registerForRemoteNotifications()
                #endif
            }
        }

        public func tokens() -> AsyncStream<Data> { stream }

        /// A token the system gave the app delegate.
        public func received(_ token: Data) {
            continuation.yield(token)
        }
    }
#endif
