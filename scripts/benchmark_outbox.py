"""A `/metrics` scrape with a long outbox, against the database counting the same rows itself.

Starts `belfry serve` on a fresh database (a workspace of one iOS push channel), stops it,
writes N queued deliveries due now straight into the database (a backlog, as after an outage
or a large announcement), starts it again serving the API only (`--no-workers`, so that every
scrape reads the same outbox) and times GET /metrics (the outbox's pending count and the age of
its oldest due delivery, per channel) several times. The floor is the database
counting the queued rows of the channel through the claim index, asked directly in the same run
(Python's `sqlite3`, or one `psql` session); the script prints both, the ratio, and the
exposition's outbox lines.

Usage: python3 scripts/benchmark_outbox.py --binary .build/release/belfry --database PATH_OR_URL
       [--deliveries N] [--scrapes K]
"""
import json
import os
import re
import sqlite3
import statistics
import subprocess
import tempfile
import time
import urllib.request

from benchmark_support import KEY, arguments, start_server

WORKSPACE = {
    "channels": [{"id": "ios_push", "kind": "apns", "name": "iOS push"}],
    "categories": [{"id": "announcement", "name": "Announcements", "description": "News for every reader.",
                    "channels": ["ios_push"]}],
    "tenants": [{"id": "main", "name": "Main"}],
}

COUNT = "SELECT COUNT(*) FROM deliveries WHERE status = 'queued' AND channel = 'ios_push'"


def fill_sqlite(path, count):
    """Writes `count` queued deliveries, due over the last hour, into the SQLite file."""
    now = time.time()
    with sqlite3.connect(path) as db:
        db.execute("""
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
            INSERT INTO deliveries (id, notification_id, event_id, user_id, channel, kind, status, attempts,
                                    next_attempt_at, created_at, updated_at)
            SELECT printf('%08X-0000-4000-8000-%012X', i, i), printf('%08X-0000-4000-8000-000000000001', i),
                   '00000000-0000-4000-8000-000000000002', printf('%08X-0000-4000-8000-000000000003', i),
                   'ios_push', 'apns', 'queued', 0, ? - 3600 + i * 3600.0 / ?, ?, ?
            FROM n""", (count, now, count, now, now))


def fill_postgres(url, count):
    """The same on PostgreSQL, in one statement the server runs itself (foreign keys not checked:
    the rows point at no notification)."""
    subprocess.run(["psql", url, "-qv", "ON_ERROR_STOP=1", "-c", f"""
        SET session_replication_role = replica;
        INSERT INTO deliveries (id, notification_id, event_id, user_id, channel, kind, status, attempts,
                                next_attempt_at, created_at, updated_at)
        SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'ios_push', 'apns',
               'queued', 0, now() - interval '1 hour' + i * interval '3600 seconds' / {count}, now(), now()
        FROM generate_series(1, {count}) AS i;
        ANALYZE deliveries;"""], check=True)


def floor_sqlite(path, scrapes):
    """Milliseconds the database takes to count the channel's queued rows, asked directly."""
    times = []
    with sqlite3.connect(path) as db:
        for _ in range(scrapes):
            started = time.perf_counter()
            db.execute(COUNT).fetchone()
            times.append((time.perf_counter() - started) * 1000)
    return times


def floor_postgres(url, scrapes):
    script = "\\timing on\n" + "\n".join([COUNT + ";"] * scrapes) + "\n"
    output = subprocess.run(["psql", url, "-qAt"], input=script, capture_output=True, text=True, check=True).stdout
    return [float(ms) for ms in re.findall(r"Time: ([\d.]+) ms", output)]


def scrape(base):
    request = urllib.request.Request(base + "/metrics", headers={"Authorization": f"Bearer {KEY}"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=120) as response:
        text = response.read().decode()
    return (time.perf_counter() - started) * 1000, text


def main():
    args = arguments(("--deliveries", int, 1_000_000), ("--scrapes", int, 5))
    postgres = args.database.startswith("postgres")
    work = tempfile.mkdtemp(prefix="belfry-outbox-")
    config = os.path.join(work, "workspace.json")
    with open(config, "w") as file:
        json.dump(WORKSPACE, file)
    server, _, _ = start_server(args.binary, args.database, config)  # creates the tables
    server.terminate()
    server.wait(timeout=30)
    started = time.monotonic()
    (fill_postgres if postgres else fill_sqlite)(args.database, args.deliveries)
    filled = time.monotonic() - started
    server, base, _ = start_server(args.binary, args.database, config, ["--no-workers"])
    try:
        scrape(base)  # the first one pays for connections and pages the others find ready
        runs = [scrape(base) for _ in range(args.scrapes)]
    finally:
        server.terminate()
        server.wait(timeout=30)
    floor = (floor_postgres if postgres else floor_sqlite)(args.database, args.scrapes + 1)[1:]
    times = [elapsed for elapsed, _ in runs]
    outbox = [line for line in runs[-1][1].splitlines() if line.startswith("belfry_outbox_")]
    print(f"database:        {'PostgreSQL' if postgres else 'SQLite'}")
    print(f"outbox:          {args.deliveries:,} queued deliveries due (written in {filled:.1f} s)")
    print(f"GET /metrics:    {' '.join(f'{t:.0f}' for t in times)} ms, median {statistics.median(times):.0f} ms")
    print(f"the database counting the queued rows itself: {' '.join(f'{t:.0f}' for t in floor)} ms,"
          f" median {statistics.median(floor):.0f} ms")
    print(f"ratio:           {statistics.median(times) / statistics.median(floor):.2f} of the count alone")
    for line in sorted(outbox):
        print(f"  {line}")


if __name__ == "__main__":
    main()
