"""Stream benchmark: many open inbox streams on one instance, one event to all of them.

Starts `belfry serve` on a fresh database, creates N users and a user token for each,
opens N server-sent-event streams (`GET /v1/me/stream`), then triggers one event to all N
users and measures, for each stream, the time from the trigger's 202 until its
`notification.created` arrives. Prints p50, p99 and the last arrival, and the server's
memory per open stream (resident memory with the streams open, minus before, divided by N).

Usage: python3 scripts/benchmark_streams.py --binary .build/release/belfry --database PATH [--streams N]
"""
import argparse
import asyncio
import resource
import statistics
import sys
import time

from benchmark_support import call, memory_mib, start_server


async def open_stream(port, token, ready, arrivals, key):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /v1/me/stream?token={token} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    await writer.drain()
    seen_counts = False
    while True:
        line = await reader.readline()
        if not line:
            return
        text = line.decode(errors="replace").strip()
        if text == "event: counts" and not seen_counts:
            seen_counts = True
            ready.release()
        elif text == "event: notification.created":
            arrivals[key] = time.monotonic()
            writer.close()
            return


async def run(base, port, tokens):
    ready = asyncio.Semaphore(0)
    arrivals = {}
    tasks = []
    for index, token in enumerate(tokens):
        tasks.append(asyncio.create_task(open_stream(port, token, ready, arrivals, index)))
        if index % 200 == 199:
            await asyncio.sleep(0.05)
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
        tasks, arrivals = loop.run_until_complete(run(base, port, tokens))
        with_streams = memory_mib(server.pid, "VmRSS")

        accepted = call(base, "POST", "/v1/events", {
            "category": "mention", "recipients": users,
            "content": {"title": "To everyone", "body": "One event, every stream"},
        })
        sent = time.monotonic()
        loop.run_until_complete(asyncio.wait_for(asyncio.gather(*tasks), timeout=120))
        latencies = sorted(arrivals[key] - sent for key in arrivals)
        if len(latencies) != args.streams:
            sys.exit(f"only {len(latencies)} of {args.streams} streams received the notification")
        p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
        print(f"streams:            {args.streams} open on one instance (event {accepted['event_id']})")
        print(f"time to arrive:     p50 {statistics.median(latencies) * 1000:.0f} ms, "
              f"p99 {p99 * 1000:.0f} ms, last {latencies[-1] * 1000:.0f} ms after the 202")
        print(f"server memory:      {before:.0f} MiB before, {with_streams:.0f} MiB with the streams open, "
              f"{(with_streams - before) * 1024 / args.streams:.0f} KiB per stream")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
