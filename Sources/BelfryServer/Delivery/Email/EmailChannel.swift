import BelfryMail
import Foundation

/// Delivers notifications as email through the configured SMTP relay.
struct EmailChannel: DeliveryProvider {
    let client: SMTPClient
    let composer: EmailComposer
    /// How long one attempt may take in all, waiting for a connection included: within the
    /// delivery's lease, so that no other worker takes it while it is being sent.
    var timeout: Duration = .seconds(60)
    var maxAttempts: Int { 8 }
    /// One message per pooled connection.
    var concurrency: Int { client.configuration.maxConnections }

    func deliver(_ delivery: Delivery) async -> DeliveryResult {
        guard case .email(let address, let locale) = delivery.payload else {
            return .failed(reason: "an email channel got a delivery of another kind")
        }
        // Fan-out skips users without an address; one removed since then ends here.
        guard let address else { return .failed(reason: "the user has no email address") }
        let message: MailMessage
        do {
            message = try composer.message(for: delivery, to: address, locale: locale)
        } catch {
            return .failed(reason: "could not compose the email: \(error)")
        }
        do {
            try await client.send(message, timeout: timeout)
            return .delivered(status: 250)
        } catch let error as SMTPError {
            return Self.result(of: error)
        } catch {
            return .retry(reason: "sending the email failed: \(error)")
        }
    }

    /// A refusal of the recipient or the message (5yz on RCPT TO or DATA) is final, with the
    /// server's reply kept on the delivery; anything else (4yz, a lost connection, TLS, a
    /// timeout, a refused sign-in) is worth another attempt later.
    static func result(of error: SMTPError) -> DeliveryResult {
        let reason = "the mail server: \(error)"
        if error.isPermanentRejection { return .failed(reason: reason, status: error.reply?.code) }
        return .retry(reason: reason, status: error.reply?.code)
    }
}
