"""Latency benchmark: a steady rate of one-recipient events, from each 202 to its webhook arrival.

Starts a webhook receiver (a small asyncio HTTP/1.1 server in a process of its own, answering
200 and noting when each event's request arrived) and `belfry serve` on a fresh database with a
workspace of one category on the inbox and the webhook. Then it posts one-recipient events at a
steady RATE a second for SECONDS, over 16 keep-alive connections, and notes when each 202 came.
Prints p50, p99 and the largest time from a 202 to its event's webhook request, and how long
after the last 202 the last request arrived: a rate is kept up with when that stays short.

Usage: python3 scripts/benchmark_latency.py --binary .build/release/belfry --database PATH_OR_URL [--rate 200] [--seconds 30]
"""
import asyncio
import json
import multiprocessing
import os
import sys
import tempfile
import time

from benchmark_delivery import WORKSPACE, free_port
from benchmark_support import KEY, arguments, call, start_server

CONNECTIONS = 16
USERS = 1000


def receive(port, out, ready):
    """The webhook receiver: notes `event_id time` for every request, until terminated."""
    arrivals = open(out, "w", buffering=1 << 16)

    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length)
                at = time.time()
                arrivals.write(f"{json.loads(body)['event_id']} {at}\n")
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def serve():
        server = await asyncio.start_server(handle, "127.0.0.1", port)
        ready.set()
        async with server:
            await server.serve_forever()

    import signal
    signal.signal(signal.SIGTERM, lambda *_: (arrivals.flush(), os._exit(0)))
    asyncio.run(serve())


async def post_steadily(port, rate, seconds):
    """Posts rate × seconds events on schedule; returns {event_id: time of its 202} and lateness."""
    count = rate * seconds
    queue = asyncio.Queue()
    accepted = {}
    late = []
    started = time.monotonic() + 0.2

    async def connection():
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while True:
            index = await queue.get()
            if index is None:
                writer.close()
                return
            body = json.dumps({
                "category": "announcement", "recipients": [f"reader-{index % USERS}"],
                "content": {"title": "A new edition is out", "body": f"Number {index}"},
            }).encode()
            writer.write(
                b"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                + f"Authorization: Bearer {KEY}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:")))
            answer = await reader.readexactly(length)
            if not head.startswith(b"HTTP/1.1 202"):
                sys.exit(f"an event was refused: {head[:40]!r} {answer[:200]!r}")
            accepted[json.loads(answer)["event_id"]] = time.time()

    workers = [asyncio.create_task(connection()) for _ in range(CONNECTIONS)]
    for index in range(count):
        delay = started + index / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        else:
            late.append(-delay)
        await queue.put(index)
    for _ in workers:
        await queue.put(None)
    await asyncio.gather(*workers)
    return accepted, (max(late) if late else 0.0)


def percentile(values, share):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main():
    args = arguments(("--rate", int, 200), ("--seconds", int, 30))

    work = tempfile.mkdtemp(prefix="belfry-latency-")
    receiver_port = free_port()
    out = os.path.join(work, "arrivals.txt")
    ready = multiprocessing.Event()
    receiver = multiprocessing.Process(target=receive, args=(receiver_port, out, ready), daemon=True)
    receiver.start()
    ready.wait(10)
    config = os.path.join(work, "workspace.json")
    with open(config, "w") as file:
        json.dump(WORKSPACE, file)
    os.environ["BELFRY_WEBHOOK_URL"] = f"http://127.0.0.1:{receiver_port}/hook"
    os.environ["BELFRY_WEBHOOK_SECRET"] = "benchmark-webhook-secret-0123456789"
    server, base, port = start_server(args.binary, args.database, config)
    try:
        call(base, "PUT", "/v1/topics/readers/subscribers", {"users": [f"reader-{i}" for i in range(USERS)]})
        accepted, late = asyncio.run(post_steadily(port, args.rate, args.seconds))
        last_accepted = max(accepted.values())
        deadline = time.time() + 60
        arrivals = {}
        while time.time() < deadline:
            time.sleep(0.5)
            os.kill(receiver.pid, 0)
            with open(out) as file:
                arrivals = dict(line.split() for line in file if line.strip())
            if len(arrivals) >= len(accepted):
                break
        # The receiver writes through a buffer: stop it to have every line.
        receiver.terminate()
        receiver.join(10)
        with open(out) as file:
            arrivals = {event: float(at) for event, at in (line.split() for line in file if line.strip())}
    finally:
        server.terminate()
        server.wait(timeout=30)
    missing = [event for event in accepted if event not in arrivals]
    latencies = [max(0.0, arrivals[event] - at) for event, at in accepted.items() if event in arrivals]
    print(f"database:        {'PostgreSQL' if args.database.startswith('postgres') else 'SQLite'}")
    print(f"events:          {len(accepted)} at {args.rate}/s for {args.seconds} s "
          f"(the sender fell behind its schedule by {late * 1000:.0f} ms at most)")
    print(f"202 -> webhook:  p50 {percentile(latencies, 0.5) * 1000:.1f} ms, "
          f"p99 {percentile(latencies, 0.99) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms")
    print(f"last arrival:    {(max(arrivals.values()) - last_accepted) * 1000:.0f} ms after the last 202")
    if missing:
        sys.exit(f"{len(missing)} accepted events never reached the webhook")


if __name__ == "__main__":
    main()
