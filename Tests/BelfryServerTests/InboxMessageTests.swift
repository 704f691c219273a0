import Foundation
import Testing

@testable import BelfryServer

@Suite("Messages between instances")
struct InboxMessageTests {
    @Test("a message decodes as it always did, and only its sender knows it as its own by its start")
    func ownMessages() throws {
        let sender = UUID()
        let signal = InboxSignal.created(event: UUID(), users: [UUID(), UUID()])
        let payload = try InboxEvents.Message(origin: sender, signal: signal).payload(JSONEncoder())
        let decoded = try JSONDecoder().decode(InboxEvents.Message.self, from: Data(payload.utf8))
        #expect(decoded.origin == sender)
        #expect(decoded.signal == signal)
        #expect(InboxEvents.Message.sentBy(sender, payload))
        #expect(!InboxEvents.Message.sentBy(UUID(), payload), "another instance's message is read")
        // A message written by the encoder alone (as before this form) still decodes, and is
        // never taken for another's own.
        let encoded = String(
            decoding: try JSONEncoder().encode(InboxEvents.Message(origin: sender, signal: signal)), as: UTF8.self)
        #expect(try JSONDecoder().decode(InboxEvents.Message.self, from: Data(encoded.utf8)).signal == signal)
    }
}
