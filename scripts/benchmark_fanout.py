"""Fan-out benchmark: one notification event to many recipients, through a real `belfry serve`.

Starts the server on a fresh database, triggers events of up to 10 000 recipients each (the
API's limit per call) until N recipients are reached, waits until every event's fan-out is
done, and prints recipients per second and the server's peak resident memory (VmHWM).

Usage: python3 scripts/benchmark_fanout.py --binary .build/release/belfry --database PATH_OR_URL [--recipients N]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

KEY = "benchmark-key-0123456789abcdef"


def call(method, url, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", f"Bearer {KEY}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--database", required=True)
    parser.add_argument("--recipients", type=int, default=100_000)
    args = parser.parse_args()

    env = dict(os.environ, BELFRY_API_KEY=KEY, BELFRY_LOG_LEVEL="warning", DATABASE_URL="", BELFRY_CONFIG="")
    server = subprocess.Popen(
        [args.binary, "serve", "--port", "0", "--database", args.database],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    try:
        base = None
        for line in server.stdout:
            match = re.search(r"listening on (http://\S+)", line)
            if match:
                base = match.group(1)
                break
        if base is None:
            sys.exit("belfry serve did not start")
        idle_rss = peak_rss_mib(server.pid)

        started = time.monotonic()
        events = []
        for offset in range(0, args.recipients, 10_000):
            count = min(10_000, args.recipients - offset)
            recipients = [f"reader-{offset + i}" for i in range(count)]
            accepted = call("POST", f"{base}/v1/events", {
                "category": "mention", "recipients": recipients,
                "content": {"title": "New activity", "body": "Someone mentioned you"},
            })
            events.append(accepted["event_id"])
        accepted_after = time.monotonic() - started

        pending = list(events)
        notifications = 0
        while pending:
            status = call("GET", f"{base}/v1/events/{pending[0]}")
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
        print(f"server memory:   {idle_rss:.0f} MiB at start, {peak_rss_mib(server.pid):.0f} MiB peak")
        if notifications != args.recipients:
            sys.exit(f"expected {args.recipients} notifications, got {notifications}")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
