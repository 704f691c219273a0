import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Sends HTTP requests for the SDK. `URLSessionTransport` in apps; tests pass their own.
public protocol HTTPTransport: Sendable {
    /// Sends a request and returns the whole answer.
    func data(for request: URLRequest) async throws -> (Data, HTTPURLResponse)
    /// Sends a request whose answer arrives over time (server-sent events): the response head,
    /// then the body in chunks as they come. Cancelling the consuming task closes the connection.
    func stream(for request: URLRequest) async throws -> (HTTPURLResponse, AsyncThrowingStream<Data, any Error>)
}

/// The transport over `URLSession` (`FoundationNetworking` on Linux).
public final class URLSessionTransport: HTTPTransport {
    private let session: URLSession

    /// - Parameter configuration: the session's configuration (timeouts, caching, proxies).
    public init(configuration: URLSessionConfiguration = .default) {
        session = URLSession(configuration: configuration)
    }

    public func data(for request: URLRequest) async throws -> (Data, HTTPURLResponse) {
        let (data, response) = try await session.data(for: request)
        guard let http = response as? HTTPURLResponse else { throw URLError(.badServerResponse) }
        return (data, http)
    }

    public func stream(for request: URLRequest) async throws -> (HTTPURLResponse, AsyncThrowingStream<Data, any Error>)
    {
        let delegate = StreamingDelegate()
        let session = URLSession(configuration: .default, delegate: delegate, delegateQueue: nil)
        let task = session.dataTask(with: request)
        delegate.chunks.onTermination = { _ in
            task.cancel()
            session.invalidateAndCancel()
        }
        task.resume()
        let response = try await withTaskCancellationHandler {
            try await delegate.response()
        } onCancel: {
            task.cancel()
        }
        return (response, delegate.stream)
    }
}

/// Passes a data task's response and body chunks on as they arrive.
private final class StreamingDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    // @unchecked: the mutable state is guarded by `lock`; URLSession calls back on its own queue.
    private let lock = NSLock()
    private var responseContinuation: CheckedContinuation<HTTPURLResponse, any Error>?
    private var received: Result<HTTPURLResponse, any Error>?
    let stream: AsyncThrowingStream<Data, any Error>
    let chunks: AsyncThrowingStream<Data, any Error>.Continuation

    override init() {
        (stream, chunks) = AsyncThrowingStream.makeStream(of: Data.self, bufferingPolicy: .unbounded)
        super.init()
    }

    func response() async throws -> HTTPURLResponse {
        try await withCheckedThrowingContinuation { continuation in
            lock.lock()
            if let received {
                lock.unlock()
                continuation.resume(with: received)
            } else {
                responseContinuation = continuation
                lock.unlock()
            }
        }
    }

    private func deliver(_ result: Result<HTTPURLResponse, any Error>) {
        lock.lock()
        guard received == nil else {
            lock.unlock()
            return
        }
        received = result
        let continuation = responseContinuation
        responseContinuation = nil
        lock.unlock()
        continuation?.resume(with: result)
    }

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping (URLSession.ResponseDisposition) -> Void
    ) {
        if let http = response as? HTTPURLResponse {
            deliver(.success(http))
        } else {
            deliver(.failure(URLError(.badServerResponse)))
        }
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        chunks.yield(data)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        deliver(.failure(error ?? URLError(.badServerResponse)))
        if let error { chunks.finish(throwing: error) } else { chunks.finish() }
        session.finishTasksAndInvalidate()
    }
}
