"""Stream benchmark: many open inbox streams on one instance, one event to all of them.

Starts `belfry serve` on a fresh database, creates N users and a user token for each,
opens N server-sent-event streams (`GET /v1/me/stream`), then triggers one event to all N
users and measures, for each stream, the time from the trigger's 202 until its
`notification.created` arrives. Prints p50, p99 and the last arrival, and the server's
memory per open stream (resident memory with the streams open, minus before, divided by N).
Then the floor: N keep-alive connections that made one request each (`GET /healthz`) and stay
open, on a new server, and their memory per connection: what any open HTTP/1.1 connection
costs this server, under each stream.

Usage: python3 scripts/benchmark_streams.py --binary .build/release/belfry --database PATH [--streams N]
"""
import argparse
import asyncio
import os
import resource
import signal
import statistics
import subprocess
import sys
import time

from benchmark_support import call, memory_mib, start_server


class StreamClient(asyncio.Protocol):
    """One stream, read with a protocol callback rather than line by line: 10 000 streams in one
    Python process must cost the client little, or the client sets the figures."""

    def __init__(self, request, ready, arrivals, key, done):
        self.request, self.ready, self.arrivals, self.key, self.done = request, ready, arrivals, key, done
        self.buffer = b""
        self.seen_counts = False

    def connection_made(self, transport):
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data):
        self.buffer += data
        if not self.seen_counts and b"event: counts" in self.buffer:
            self.seen_counts = True
            self.ready.release()
            self.buffer = self.buffer[self.buffer.index(b"event: counts") + 13:]
        if self.seen_counts and b"event: notification.created" in self.buffer:
            self.arrivals[self.key] = time.monotonic()
            self.transport.close()
        elif len(self.buffer) > 65536:
            self.buffer = self.buffer[-64:]

    def connection_lost(self, exc):
        if not self.done.done():
            self.done.set_result(None)


async def open_stream(port, token, ready, arrivals, key):
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    request = f"GET /v1/me/stream?token={token} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    await loop.create_connection(
        lambda: StreamClient(request, ready, arrivals, key, done), "127.0.0.1", port)
    await done


class IdleConnection(asyncio.Protocol):
    """One keep-alive connection that makes one request (`GET /healthz`) and then stays open:
    what the server holds for any open HTTP/1.1 connection, the floor under a stream."""

    def __init__(self, answered):
        self.answered = answered
        self.buffer = b""

    def connection_made(self, transport):
        self.transport = transport
        transport.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")

    def data_received(self, data):
        self.buffer += data
        if b"\r\n\r\n" in self.buffer and not self.answered.done():
            self.answered.set_result(None)


async def open_idle(port, count):
    loop = asyncio.get_running_loop()
    connections = []
    for start in range(0, count, 200):
        answers = []
        for _ in range(start, min(count, start + 200)):
            answered = loop.create_future()
            transport, _ = await loop.create_connection(lambda: IdleConnection(answered), "127.0.0.1", port)
            connections.append(transport)
            answers.append(answered)
        await asyncio.wait_for(asyncio.gather(*answers), timeout=120)
    return connections


def idle_connection_floor(binary, database, count):
    """KiB per idle keep-alive connection, on a server of its own (memory freed by closed
    connections would otherwise be reused by the streams and hide their cost)."""
    server, _, port = start_server(binary, database)
    try:
        before = memory_mib(server.pid, "VmRSS")
        loop = asyncio.new_event_loop()
        connections = loop.run_until_complete(open_idle(port, count))
        time.sleep(1)
        after = memory_mib(server.pid, "VmRSS")
        for transport in connections:
            transport.close()
        loop.close()
        return (after - before) * 1024 / count
    finally:
        server.terminate()
        server.wait(timeout=30)


# The client opens streams BURST at a time, PAUSE seconds apart: at most 4 000 a second.
BURST = 200
PAUSE = 0.05


async def run(base, port, tokens):
    ready = asyncio.Semaphore(0)
    arrivals = {}
    tasks = []
    for index, token in enumerate(tokens):
        tasks.append(asyncio.create_task(open_stream(port, token, ready, arrivals, index)))
        if index % BURST == BURST - 1:
            await asyncio.sleep(PAUSE)
    for _ in tokens:
        await asyncio.wait_for(ready.acquire(), timeout=120)
    return tasks, arrivals


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--database", required=True)
    parser.add_argument("--streams", type=int, default=2000)
    args = parser.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, max(soft, 4 * args.streams + 1024))
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))

    server, base, port = start_server(args.binary, args.database)
    try:
        users = [f"streamer-{i}" for i in range(args.streams)]
        tokens = []
        for user in users:
            call(base, "PUT", f"/v1/users/{user}", {})
            tokens.append(call(base, "POST", f"/v1/users/{user}/tokens")["token"])
        before = memory_mib(server.pid, "VmRSS")

        loop = asyncio.new_event_loop()
        opening = time.monotonic()
        tasks, arrivals = loop.run_until_complete(run(base, port, tokens))
        opened = time.monotonic() - opening
        with_streams = memory_mib(server.pid, "VmRSS")

        # BELFRY_PERF=FILE records the server's profile from the trigger until the last arrival.
        profiler = None
        if os.environ.get("BELFRY_PERF"):
            profiler = subprocess.Popen(
                ["perf", "record", "-g", "-F", "999", "-p", str(server.pid), "-o", os.environ["BELFRY_PERF"]],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1)
        accepted = call(base, "POST", "/v1/events", {
            "category": "mention", "recipients": users,
            "content": {"title": "To everyone", "body": "One event, every stream"},
        })
        sent = time.monotonic()
        loop.run_until_complete(asyncio.wait_for(asyncio.gather(*tasks), timeout=120))
        latencies = sorted(arrivals[key] - sent for key in arrivals)
        if profiler:
            profiler.send_signal(signal.SIGINT)
            profiler.wait(timeout=60)
        if len(latencies) != args.streams:
            sys.exit(f"only {len(latencies)} of {args.streams} streams received the notification")
        p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
        print(f"streams:            {args.streams} open on one instance (event {accepted['event_id']})")
        # A server slower than the client holds the waiting requests' memory at the burst's peak,
        # and the memory figure shows it.
        print(f"opened in:          {opened:.2f} s ({args.streams / opened:.0f} a second; "
              f"the client asks for at most {BURST / PAUSE:.0f} a second)")
        print(f"time to arrive:     p50 {statistics.median(latencies) * 1000:.0f} ms, "
              f"p99 {p99 * 1000:.0f} ms, last {latencies[-1] * 1000:.0f} ms after the 202")
        per_stream = (with_streams - before) * 1024 / args.streams
        print(f"server memory:      {before:.0f} MiB before, {with_streams:.0f} MiB with the streams open, "
              f"{per_stream:.0f} KiB per stream")
    finally:
        server.terminate()
        server.wait(timeout=30)
    floor = idle_connection_floor(args.binary, args.database + "-idle", args.streams)
    print(f"floor:              {floor:.0f} KiB per idle keep-alive connection after one request "
          f"({args.streams} on a server of their own); streams at {per_stream / floor:.2f} of it "
          f"(target: at most 16 KiB per stream)")


if __name__ == "__main__":
    main()
