"""Fan-out benchmark: one notification event to many recipients, through a real `belfry serve`.

Starts the server on a fresh database, triggers events of up to 10 000 recipients each (the
API's limit per call) until N recipients are reached, waits until every event's fan-out is
done, and prints recipients per second and the server's peak resident memory (VmHWM). Then it
writes the same rows without Belfry (benchmark_floor.py) and prints the ratio of the two times.

With --topic, the N users are first subscribed to one topic (10 000 per call, not timed), and
one event names the topic: fan-out then reads the subscribers from the database a page at a time.

Usage: python3 scripts/benchmark_fanout.py --binary .build/release/belfry --database PATH_OR_URL [--recipients N] [--topic]
"""
import argparse
import sys
import time

import benchmark_floor
from benchmark_support import call, memory_mib, start_server, wait_for_fan_out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--database", required=True)
    parser.add_argument("--recipients", type=int, default=100_000)
    parser.add_argument("--topic", action="store_true", help="one event to a topic of N subscribers")
    args = parser.parse_args()

    server, base, _ = start_server(args.binary, args.database)
    try:
        idle_rss = memory_mib(server.pid, "VmHWM")

        if args.topic:
            for offset in range(0, args.recipients, 10_000):
                count = min(10_000, args.recipients - offset)
                call(base, "PUT", "/v1/topics/benchmark/subscribers",
                     {"users": [f"reader-{offset + i}" for i in range(count)]})
        started = time.monotonic()
        events = []
        if args.topic:
            accepted = call(base, "POST", "/v1/events", {
                "category": "mention", "topic": "benchmark",
                "content": {"title": "New activity", "body": "Someone mentioned you"},
            })
            events.append(accepted["event_id"])
        for offset in range(0, 0 if args.topic else args.recipients, 10_000):
            count = min(10_000, args.recipients - offset)
            recipients = [f"reader-{offset + i}" for i in range(count)]
            accepted = call(base, "POST", "/v1/events", {
                "category": "mention", "recipients": recipients,
                "content": {"title": "New activity", "body": "Someone mentioned you"},
            })
            events.append(accepted["event_id"])
        accepted_after = time.monotonic() - started

        notifications = wait_for_fan_out(base, events)
        elapsed = time.monotonic() - started
        print(f"database:        {'PostgreSQL' if args.database.startswith('postgres') else 'SQLite'}")
        audience = "one event to a topic" if args.topic else f"{len(events)} events"
        print(f"recipients:      {args.recipients} in {audience} (all accepted after {accepted_after:.1f} s)")
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
