import Foundation
import NIOCore
import Vapor

/// One open inbox stream: the hub hands it items from any thread, and it writes them as
/// server-sent events on its connection's event loop.
///
/// It has no task of its own. A task per stream (Vapor's for an async body, and the loop reading
/// the hub's items in it) held about 4 KiB of task memory for each open stream, more than a
/// third of what an idle connection costs.
///
/// Items that come before the response starts (between the subscription and Vapor writing the
/// head) wait, after the first `counts`. A client that stops reading is not buffered without
/// end: once ``InboxHub/bufferPerStream`` writes wait for the socket, the stream ends, and the
/// client reconnects with `Last-Event-ID` and gets what it missed from the hub's replay window.
final class InboxStreamWriter: @unchecked Sendable {
    // Everything below is touched on `eventLoop` only.
    let eventLoop: any EventLoop
    private let instanceTag: String
    private var writer: (any BodyStreamWriter)?
    private var waiting: [InboxHub.Item] = []
    /// Writes handed to the connection and not yet on the socket.
    private var pending = 0
    private var ended = false
    /// Takes the stream off the hub; set once, before any item comes.
    private var unsubscribe: (@Sendable () -> Void)?

    init(eventLoop: any EventLoop, instanceTag: String) {
        self.eventLoop = eventLoop
        self.instanceTag = instanceTag
    }

    /// Sets what ends the subscription when the stream ends. Call once, on any thread, right
    /// after subscribing.
    func onEnd(_ unsubscribe: @escaping @Sendable () -> Void) {
        onLoop {
            if self.ended {
                unsubscribe()
            } else {
                self.unsubscribe = unsubscribe
            }
        }
    }

    /// Writes `item` (from any thread); a token's expiry also ends the stream.
    func send(_ item: InboxHub.Item) {
        onLoop {
            guard !self.ended else { return }
            guard self.writer != nil else {
                self.waiting.append(item)
                if self.waiting.count > InboxHub.bufferPerStream { self.end() }
                return
            }
            self.write(self.text(of: item))
            if case .tokenExpired = item { self.end() }
        }
    }

    /// Ends the stream (from any thread): at shutdown, or when its token expired.
    func finish() {
        onLoop { self.end() }
    }

    /// The response's body: starts with `retry` and the first `counts`, then what waited.
    func body(firstCounts counts: String) -> Response.Body {
        let start = Start(stream: self)
        return Response.Body(stream: { writer in
            start.attach(writer, firstCounts: counts)
        })
    }

    /// Holds the stream for the response body; if the body is dropped unwritten (the connection
    /// closed first), the stream ends, so the hub does not keep it.
    private final class Start: @unchecked Sendable {
        let stream: InboxStreamWriter
        var attached = false

        init(stream: InboxStreamWriter) {
            self.stream = stream
        }

        func attach(_ writer: any BodyStreamWriter, firstCounts counts: String) {
            attached = true
            stream.attach(writer, firstCounts: counts)
        }

        deinit {
            if !attached { stream.finish() }
        }
    }

    private func attach(_ writer: any BodyStreamWriter, firstCounts counts: String) {
        eventLoop.assertInEventLoop()
        self.writer = writer
        if ended {
            writer.write(.end, promise: nil)
            return
        }
        var text = "retry: 3000\nevent: counts\ndata: \(counts)\n\n"
        let waiting = self.waiting
        self.waiting = []
        for item in waiting { text += self.text(of: item) }
        write(text)
        if waiting.contains(where: { if case .tokenExpired = $0 { true } else { false } }) { end() }
    }

    private func text(of item: InboxHub.Item) -> String {
        switch item {
        case .events(let events):
            events.map { "id: \(instanceTag)-\($0.id)\nevent: \($0.name)\ndata: \($0.data)\n\n" }.joined()
        case .heartbeat:
            ": heartbeat\n\n"
        case .tokenExpired(let at):
            "event: token_expired\ndata: \(Self.expiry(at))\n\n"
        }
    }

    private static func expiry(_ at: Date) -> String {
        (try? Response.jsonEncoder.encode(["expired_at": at])).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }

    private func write(_ text: String) {
        guard let writer, !ended else { return }
        guard pending < InboxHub.bufferPerStream else {
            end()
            return
        }
        pending += 1
        let promise = eventLoop.makePromise(of: Void.self)
        promise.futureResult.whenComplete { result in
            self.pending -= 1
            // The client went away: a heartbeat at the latest finds out.
            if case .failure = result { self.end() }
        }
        writer.write(.buffer(ByteBuffer(string: text)), promise: promise)
    }

    private func end() {
        guard !ended else { return }
        ended = true
        waiting = []
        writer?.write(.end, promise: nil)
        unsubscribe?()
        unsubscribe = nil
    }

    private func onLoop(_ body: @escaping @Sendable () -> Void) {
        if eventLoop.inEventLoop {
            body()
        } else {
            eventLoop.execute(body)
        }
    }
}
