"""Intake benchmark: concurrent clients posting one-recipient events, against `GET /healthz`.

Starts `belfry serve` on a fresh database (the demo workspace, no provider configured), then
h2load (Debian's nghttp2-client) keeps 32 HTTP/1.1 connections busy posting N one-recipient
events to `POST /v1/events`, each answered 202 only once its event is committed; fan-out runs
beside it, as in production. Once fan-out has caught up (every event in the inbox), the same
h2load asks `GET /healthz` N times at the same concurrency: the cost of the HTTP server alone.
Prints both rates and their ratio, the server's CPU an event (and PostgreSQL's, when it runs
on this machine), and checks that the database holds every event that was
answered 202.

Usage: python3 scripts/benchmark_intake.py --binary .build/release/belfry --database PATH_OR_URL [--events N]
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

from benchmark_support import KEY, CPUMeter, arguments, call, start_server


def h2load(url, count, clients, body=None):
    """Runs h2load; returns requests a second and the count of 2xx answers."""
    command = ["h2load", "--h1", "-n", str(count), "-c", str(clients), "-H", f"Authorization: Bearer {KEY}"]
    if body is not None:
        command += ["-d", body, "-H", "Content-Type: application/json"]
    output = subprocess.run(command + [url], check=True, capture_output=True, text=True).stdout
    rate = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", output)
    ok = re.search(r"status codes: (\d+) 2xx", output)
    if not rate or not ok:
        sys.exit("h2load printed no rate:\n" + output)
    return float(rate.group(1)), int(ok.group(1))


def main():
    args = arguments(("--events", int, 20_000), ("--clients", int, 32))

    server, base, _ = start_server(args.binary, args.database)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as body:
        json.dump({"category": "edit-user-talk", "recipients": ["ada"],
                   "content": {"title": "New message", "body": "On your talk page"}}, body)
    try:
        call(base, "PUT", "/v1/users/ada", {"time_zone": "UTC"})
        # A short warm-up, so that neither side pays for connections and caches the other did not.
        h2load(f"{base}/v1/events", 500, args.clients, body.name)
        h2load(f"{base}/healthz", 500, args.clients)
        postgres = args.database.startswith("postgres")
        meter = CPUMeter(server.pid, postgres)
        started = time.monotonic()
        events_rate, accepted = h2load(f"{base}/v1/events", args.events, args.clients, body.name)
        if accepted != args.events:
            sys.exit(f"only {accepted} of {args.events} events were accepted")
        # Every event answered 202 is stored: the user's inbox receives each once fanned out.
        # /healthz is asked only then, so that fan-out catching up does not slow it.
        expected = args.events + 500
        unread = inbox_unread(base, expected)
        drained = time.monotonic() - started
        server_cpu, postgres_cpu = meter.used()
        health_rate, _ = h2load(f"{base}/healthz", args.events, args.clients)
        print(f"database:        {'PostgreSQL' if postgres else 'SQLite'}")
        print(f"POST /v1/events: {events_rate:,.0f} events/s ({accepted} of {args.events} answered 202, "
              f"{args.clients} connections)")
        print(f"GET /healthz:    {health_rate:,.0f} requests/s (same connections and count, once fan-out is done)")
        print(f"ratio:           {events_rate / health_rate:.3f} of /healthz")
        print(f"in the inbox:    {unread} of {expected} accepted events, {drained:.1f} s after the first")
        # CPU an event, from its request to its inbox row: steadier than the rates on a busy machine.
        print(f"server CPU:      {server_cpu * 1e6 / args.events:.0f} µs an event (user and system, the first POST "
              f"until fan-out was done)" + (f"; PostgreSQL {postgres_cpu * 1e6 / args.events:.0f} µs" if postgres else ""))
        if unread != expected:
            sys.exit("an accepted event is missing from the inbox")
    finally:
        os.unlink(body.name)
        server.terminate()
        server.wait(timeout=30)


def inbox_unread(base, expected):
    """Waits (up to 300 s) until the demo user's inbox holds `expected` unread notifications;
    returns how many it holds."""
    token = call(base, "POST", "/v1/users/ada/tokens")["token"]
    deadline = time.monotonic() + 300
    while True:
        request = urllib.request.Request(f"{base}/v1/me/notifications/counts",
                                         headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request) as response:
            unread = json.loads(response.read())["unread"]
        if unread >= expected or time.monotonic() > deadline:
            return unread
        time.sleep(0.5)


if __name__ == "__main__":
    main()
