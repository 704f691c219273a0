"""Delivery benchmark: one event to many recipients, from the 202 to the webhook's receiver.

Starts a local nginx (Debian's nginx-light, installed when missing) that answers every POST with
200 and logs the time of each request, then `belfry serve` on a fresh database with a workspace
of one category on the inbox and the webhook, its webhook pointed at that nginx. N users are
subscribed to a topic (not timed); one event to the topic is posted, and the clock runs from its
202 until nginx has logged N webhook requests: fan-out, the queue, the signed POST and the
recorded result, all of it. Then h2load (Debian's nghttp2-client) sends the same number of POSTs
of the same body size to the same nginx over HTTP/1.1, and the script prints both rates, their
ratio, and when the first request arrived. When `belfry-bench` is built beside `belfry`, it also
sends as many deliveries through the webhook channel alone (the outbound client, signing and
body, no queue or database) and prints that rate, its CPU per request, and how much of it the
queue reached.

With `--status-events 1` it measures twice, on fresh SQLite files (`PATH` and `PATH-status`):
first as above, then with a status endpoint (the workspace file's `webhooks`) taking
`message.sent`, posted to the same nginx: one for each webhook delivery and one for each inbox
notification, 2 N in all; it prints both times, when the last
status event arrived, and the overhead of the status events on the webhook deliveries. With
`--status-events R` (R > 1) it measures R rounds of both, in alternating order (the status events
first in even rounds), each on fresh files, and prints each round and the overhead of the medians.

Usage: python3 scripts/benchmark_delivery.py --binary .build/release/belfry --database PATH_OR_URL [--recipients N]
       [--status-events ROUNDS]
"""
import json
import os
import re
import shutil
import statistics
import socket
import subprocess
import sys
import tempfile
import time

from benchmark_support import CPUMeter, arguments, call, memory_mib, start_server

WORKSPACE = {
    "channels": [
        {"id": "inbox", "kind": "inbox", "name": "In-app inbox"},
        {"id": "webhook", "kind": "webhook", "name": "Integrations"},
    ],
    "categories": [
        {"id": "announcement", "name": "Announcements", "description": "News for every reader.",
         "channels": ["inbox", "webhook"]},
    ],
    "tenants": [{"id": "main", "name": "Main"}],
}

NGINX_CONFIG = """
daemon off;
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {work}/body;
    proxy_temp_path {work}/proxy;
    fastcgi_temp_path {work}/fastcgi;
    uwsgi_temp_path {work}/uwsgi;
    scgi_temp_path {work}/scgi;
    log_format arrival '$msec $request_length';
    keepalive_requests 1000000;
    server {{
        listen 127.0.0.1:{port};
        location /hook {{
            access_log {work}/arrivals.log arrival buffer=256k flush=100ms;
            client_body_buffer_size 64k;
            return 200;
        }}
        location /status {{
            access_log {work}/status.log arrival buffer=256k flush=100ms;
            client_body_buffer_size 64k;
            return 200;
        }}
        location /bench {{ client_body_buffer_size 64k; return 200; }}
    }}
}}
"""


def ensure_tools():
    missing = [package for command, package in [("nginx", "nginx-light"), ("h2load", "nghttp2-client")]
               if shutil.which(command) is None and not os.path.exists(f"/usr/sbin/{command}")]
    if missing:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        install = ["apt-get", "install", "-y", "-qq", *missing]
        if subprocess.run(install, env=env, stdout=subprocess.DEVNULL).returncode != 0:
            # A fresh machine's package lists may be missing or old.
            subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
            subprocess.run(install, check=True, env=env, stdout=subprocess.DEVNULL)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_nginx(work):
    port = free_port()
    config = os.path.join(work, "nginx.conf")
    with open(config, "w") as file:
        file.write(NGINX_CONFIG.format(work=work, port=port))
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    process = subprocess.Popen([nginx, "-c", config, "-p", work], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, port
        except OSError:
            time.sleep(0.05)
    process.terminate()
    sys.exit("nginx did not start")


class Arrivals:
    """The times (Unix seconds) and request sizes nginx logs for a location, read as they come:
    each poll reads only what was written since the last, so that on two cores the benchmark's
    own polling does not take CPU from the server as the log grows (parsing the whole log every
    tenth of a second took 6 % of the machine by the end of a 100 000-delivery run)."""

    def __init__(self, path):
        self.path = path
        self.offset = 0
        self.partial = b""
        self.seen = []

    def poll(self):
        """Every request logged since this follower was made or last skipped."""
        if os.path.exists(self.path):
            with open(self.path, "rb") as log:
                log.seek(self.offset)
                chunk = log.read()
            self.offset += len(chunk)
            # nginx writes its buffer as it fills: the last line may not be whole yet.
            *lines, self.partial = (self.partial + chunk).split(b"\n")
            for fields in map(bytes.split, lines):
                if len(fields) == 2:
                    self.seen.append((float(fields[0]), int(fields[1])))
        return self.seen

    def skip(self):
        """Forgets what was logged so far: nginx keeps its logs open across runs."""
        self.poll()
        self.seen = []
        return self


def h2load_rate(port, count, body_size, work):
    body = os.path.join(work, "body.json")
    with open(body, "wb") as file:
        file.write(b"x" * body_size)
    output = subprocess.run(
        ["h2load", "--h1", "-n", str(count), "-c", "16", "-d", body, "-H", "Content-Type: application/json",
         f"http://127.0.0.1:{port}/bench"], check=True, capture_output=True, text=True).stdout
    match = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", output)
    succeeded = re.search(r"(\d+) succeeded", output)
    if not match or not succeeded or int(succeeded.group(1)) != count:
        sys.exit("h2load did not finish cleanly:\n" + output)
    return float(match.group(1))


def channel_rate(binary, port, count):
    """The webhook channel alone (`belfry-bench webhook`, beside `belfry`): signed POSTs of a
    typical notification to the same nginx, 128 at a time, without the queue. None when that
    binary is not built."""
    bench = os.path.join(os.path.dirname(os.path.abspath(binary)), "belfry-bench")
    if not os.path.exists(bench):
        return None
    output = subprocess.run([bench, "webhook", f"http://127.0.0.1:{port}/bench", str(count), "128"],
                            check=True, capture_output=True, text=True).stdout
    result = json.loads(output)
    if result["sent"] != count:
        sys.exit(f"belfry-bench webhook: {result['sent']} of {count} answered 200")
    return count / result["seconds"], result["cpu_seconds"] / count


def measure(args, database, port, work, status_events):
    """One run on `database`: the time from the 202 to the last webhook request, to every result
    recorded and (with status events) to the last status event; the body size; peak memory."""
    config = os.path.join(work, "workspace.json")
    workspace = dict(WORKSPACE)
    if status_events:
        secret = os.path.join(work, "status.secret")
        with open(secret, "w") as file:
            file.write("benchmark-status-secret-0123456789")
        workspace["webhooks"] = [{"id": "status", "url": f"http://127.0.0.1:{port}/status",
                                  "events": ["message.sent"], "secret_path": secret}]
    with open(config, "w") as file:
        json.dump(workspace, file)
    # nginx keeps its logs open: a second run counts the lines after the first run's.
    log = Arrivals(os.path.join(work, "arrivals.log")).skip()
    status_log = Arrivals(os.path.join(work, "status.log")).skip()
    server = None
    status_last = None
    try:
        server, base, _ = start_server(args.binary, database, config)
        for offset in range(0, args.recipients, 10_000):
            count = min(10_000, args.recipients - offset)
            call(base, "PUT", "/v1/topics/everyone/subscribers",
                 {"users": [f"reader-{offset + i}" for i in range(count)]})
        meter = CPUMeter(server.pid, database.startswith("postgres"))
        started = time.time()
        accepted = call(base, "POST", "/v1/events", {
            "category": "announcement", "topic": "everyone",
            "content": {"title": "A new edition is out", "body": "Read what changed this week"},
        })
        deadline = time.monotonic() + 600
        seen = []
        while time.monotonic() < deadline:
            seen = log.poll()
            if len(seen) >= args.recipients:
                break
            time.sleep(0.1)
        if len(seen) < args.recipients:
            sys.exit(f"only {len(seen)} of {args.recipients} webhook requests arrived in 600 s")
        elapsed = max(at for at, _ in seen) - started
        first = min(at for at, _ in seen) - started
        # Every result is recorded, not only sent: the event's status counts them.
        while True:
            status = call(base, "GET", f"/v1/events/{accepted['event_id']}")
            sent = status["deliveries"].get("webhook", {}).get("sent", 0)
            if sent >= args.recipients or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        recorded = time.time() - started
        cpu = meter.used()
        if status_events:
            # message.sent for each webhook delivery and for each inbox notification.
            expected = 2 * args.recipients
            while time.monotonic() < deadline and len(status_log.poll()) < expected:
                time.sleep(0.1)
            reported = status_log.poll()
            if len(reported) < expected:
                sys.exit(f"only {len(reported)} of {expected} status events arrived in 600 s")
            status_last = max(at for at, _ in reported) - started
        body_size = round(sum(size for _, size in seen) / len(seen))
        peak = memory_mib(server.pid, "VmHWM")
    finally:
        if server:
            server.terminate()
            server.wait(timeout=30)
    return elapsed, recorded, sent, body_size, peak, status_last, cpu, first


def main():
    args = arguments(("--recipients", int, 20_000), ("--status-events", int, 0))
    ensure_tools()
    if args.status_events and args.database.startswith("postgres"):
        sys.exit("--status-events compares two fresh SQLite files; give a file path")

    work = tempfile.mkdtemp(prefix="belfry-delivery-")
    nginx, port = start_nginx(work)
    os.environ["BELFRY_WEBHOOK_URL"] = f"http://127.0.0.1:{port}/hook"
    os.environ["BELFRY_WEBHOOK_SECRET"] = "benchmark-webhook-secret-0123456789"
    rounds = []
    try:
        elapsed, recorded, sent, body_size, peak, _, cpu, first = measure(args, args.database, port, work, False)
        with_status = None
        if args.status_events:
            with_status = measure(args, args.database + "-status", port, work, True)
            rounds.append((elapsed, with_status[0]))
        # More rounds, in alternating order (status events first in even rounds), so that a
        # slow moment of the machine does not fall on one side only.
        for n in range(2, args.status_events + 1):
            sides = [False, True] if n % 2 else [True, False]
            times = {}
            for status in sides:
                name = f"{args.database}-{n}{'-status' if status else ''}"
                times[status] = measure(args, name, port, work, status)[0]
            rounds.append((times[False], times[True]))
        reference = h2load_rate(port, args.recipients, body_size, work)
        channel = channel_rate(args.binary, port, args.recipients)
    finally:
        nginx.terminate()
        nginx.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)

    rate = args.recipients / elapsed
    print(f"database:        {'PostgreSQL' if args.database.startswith('postgres') else 'SQLite'}")
    print(f"deliveries:      {args.recipients} webhook requests of ~{body_size} bytes (and as many inbox items)")
    print(f"202 to last arrival: {elapsed:.2f} s  ->  {rate:,.0f} deliveries/s "
          f"(all {sent} recorded as sent after {recorded:.2f} s)")
    print(f"first arrival:   {first * 1000:.0f} ms after the 202")
    print(f"server CPU:      {cpu[0] * 1e6 / args.recipients:.0f} µs a delivery (user and system, 202 to every result "
          "recorded; steadier than the rate on a busy machine)"
          + (f"; PostgreSQL {cpu[1] * 1e6 / args.recipients:.0f} µs" if args.database.startswith("postgres") else ""))
    print(f"h2load --h1 -c 16, same count and size: {reference:,.0f} requests/s")
    print(f"ratio:           {rate / reference:.3f} of h2load")
    if channel:
        print(f"the webhook channel alone (belfry-bench webhook, 128 at a time): {channel[0]:,.0f} requests/s, "
              f"{channel[1] * 1e6:.0f} µs of CPU each; the queue reached {rate / channel[0]:.2f} of it")
    print(f"server memory:   {peak:.0f} MiB peak")
    if with_status:
        status_elapsed, status_recorded, _, _, status_peak, status_last, _, _ = with_status
        print(f"with {2 * args.recipients} message.sent status events (webhook and inbox) to a second endpoint: last webhook arrival {status_elapsed:.2f} s, "
              f"all recorded {status_recorded:.2f} s, last status event {status_last:.2f} s, "
              f"{status_peak:.0f} MiB peak")
        print(f"status events' overhead on the webhook deliveries: {status_elapsed / elapsed - 1:+.1%}; "
              f"until the last status event: {status_last / elapsed - 1:+.1%}")
    if len(rounds) > 1:
        for n, (plain, status) in enumerate(rounds, 1):
            print(f"round {n}: {plain:.2f} s without, {status:.2f} s with status events ({status / plain - 1:+.1%})")
        plain = statistics.median(p for p, _ in rounds)
        status = statistics.median(s for _, s in rounds)
        print(f"medians of {len(rounds)} rounds: {plain:.2f} s without, {status:.2f} s with: "
              f"overhead {status / plain - 1:+.1%}")


if __name__ == "__main__":
    main()
