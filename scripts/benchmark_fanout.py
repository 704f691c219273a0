"""Fan-out benchmark: one notification event to many recipients, through a real `belfry serve`.

Starts the server on a fresh database, triggers events of up to 10 000 recipients each (the
API's limit per call) until N recipients are reached, waits until every event's fan-out is
done, and prints recipients per second and the server's peak resident memory (VmHWM). Then it
writes the same rows without Belfry (benchmark_floor.py) and prints the ratio of the two times.

Usage: python3 scripts/benchmark_fanout.py --binary .build/release/belfry --database PATH_OR_URL [--recipients N]
"""
import argparse
import sys
import time

import benchmark_floor
from benchmark_support import call, memory_mib, start_server


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--database", required=True)
    parser.add_argument("--recipients", type=int, default=100_000)
    args = parser.parse_args()

    server, base, _ = start_server(args.binary, args.database)
    try:
        idle_rss = memory_mib(server.pid, "VmHWM")

        started = time.monotonic()
        events = []
        for offset in range(0, args.recipients, 10_000):
            count = min(10_000, args.recipients - offset)
            recipients = [f"reader-{offset + i}" for i in range(count)]
            accepted = call(base, "POST", "/v1/events", {
                "category": "mention", "recipients": recipients,
                "content": {"title": "New activity", "body": "Someone mentioned you"},
            })
            events.append(accepted["event_id"])
        accepted_after = time.monotonic() - started

        pending = list(events)
        notifications = 0
        while pending:
            status = call(base, "GET", f"/v1/events/{pending[0]}")
            if status["state"] == "failed":
                sys.exit(f"event {pending[0]} failed: {status.get('error')}")
            if status["state"] == "done":
                notifications += status["notifications"]
                pending.pop(0)
            else:
                time.sleep(0.05)
        elapsed = time.monotonic() - started
        print(f"database:        {'PostgreSQL' if args.database.startswith('postgres') else 'SQLite'}")
        print(f"recipients:      {args.recipients} in {len(events)} events (all accepted after {accepted_after:.1f} s)")
        print(f"notifications:   {notifications} written to inboxes")
        print(f"fan-out time:    {elapsed:.1f} s  ->  {args.recipients / elapsed:,.0f} recipients/s")
        print(f"server memory:   {idle_rss:.0f} MiB at start, {memory_mib(server.pid, 'VmHWM'):.0f} MiB peak")
        if notifications != args.recipients:
            sys.exit(f"expected {args.recipients} notifications, got {notifications}")
    finally:
        server.terminate()
        server.wait(timeout=30)
    if args.database.startswith("postgres"):
        floor = benchmark_floor.postgres_floor(args.database, args.recipients)
    else:
        floor = benchmark_floor.sqlite_floor(args.database, args.database + ".floor", args.recipients)
    print(f"floor:           {floor:.1f} s  ->  {args.recipients / floor:,.0f} recipients/s "
          "(the same rows, without Belfry: benchmark_floor.py)")
    print(f"ratio belfry/floor: {elapsed / floor:.2f}")


if __name__ == "__main__":
    main()
