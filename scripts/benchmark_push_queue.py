"""Push through the queue: one event to many devices, from the 202 to every push answered.

Starts the push service's test server in a process of its own (`belfry-bench apns-server`: real
TLS and HTTP/2, ES256 provider tokens checked; or `belfry-bench fcm-server`: the same with
OAuth grants from a service account), answering 200 for every push, then `belfry serve` on a
fresh database with a workspace of one category on that push channel, pointed at the server.
N users, each with one authorized device, are subscribed to a topic (not timed); one event to
the topic is posted, and the clock runs from its 202 until the test server has answered the Nth
push with 200 (it prints the moment itself, so that nothing polls the server being measured while it
works): fan-out, the claims, the payloads, the tokens and the HTTP/2 streams. Then until the N
results are recorded as sent (`belfry_deliveries_total`, read every 50 ms from then on; the
event's status confirms it). Then `belfry-bench apns N 100` (or `fcm`) sends as many pushes
through the client alone to its own test server, and the script prints both rates and the
ratio of the first to the client's (the target for APNs: at least 0.5).

With --history K, each user first gets K notifications in their inbox, read and seen, as months
of use leave them (not timed): each push's badge is the user's unread count among them.

Usage: python3 scripts/benchmark_push_queue.py --binary .build/release/belfry --database PATH_OR_URL
       [--platform apns|fcm] [--devices N] [--history K]
"""
import concurrent.futures
import json
import os
import queue
import re
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from benchmark_support import KEY, CPUMeter, arguments, call, memory_mib, start_server, wait_for_fan_out

PLATFORMS = {
    "apns": {"channel": "ios_push", "name": "iOS push"},
    "fcm": {"channel": "android_push", "name": "Android push"},
}


def workspace(platform):
    channel = PLATFORMS[platform]["channel"]
    return {
        "channels": [{"id": channel, "kind": platform, "name": PLATFORMS[platform]["name"]}],
        "categories": [
            {"id": "announcement", "name": "Announcements", "description": "News for every reader.",
             "channels": [channel]},
        ],
        "tenants": [{"id": "main", "name": "Main"}],
    }


def server_settings(platform, settings):
    """The environment `belfry serve` reaches the test server with."""
    if platform == "apns":
        return {
            "BELFRY_APNS_URL": settings["url"], "BELFRY_APNS_KEY_PATH": settings["key_path"],
            "BELFRY_APNS_KEY_ID": settings["key_id"], "BELFRY_APNS_TEAM_ID": settings["team_id"],
            "BELFRY_APNS_TOPIC": "org.example.reader", "BELFRY_EXTRA_CA_FILE": settings["ca_path"],
        }
    return {
        "BELFRY_FCM_URL": settings["url"], "BELFRY_FCM_SERVICE_ACCOUNT_PATH": settings["service_account_path"],
        "BELFRY_EXTRA_CA_FILE": settings["ca_path"],
    }


def register_device(base, platform, user, index):
    """Mints the user's token (API key) and registers one authorized device with it."""
    token = call(base, "POST", f"/v1/users/{user}/tokens")["token"]
    device = ({"platform": "apns", "token": f"{index:064x}", "environment": "production"} if platform == "apns"
              else {"platform": "fcm", "token": f"reader-{index}:APA91b{'x' * 100}"})
    body = json.dumps({**device, "authorization": "authorized"}).encode()
    request = urllib.request.Request(base + "/v1/me/devices", data=body, method="POST")
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=60) as response:
        if response.status not in (200, 201):
            sys.exit(f"registering a device answered {response.status}")


def add_history(base, database, count):
    """Gives every reader `count` notifications in their inbox, read and seen: `count` events to
    another user through the API, then a row for each reader and event, written in SQL straight
    to the database (a million rows through fan-out would take longer than the benchmark)."""
    events = [call(base, "POST", "/v1/events", {
        "category": "announcement", "recipients": ["history"],
        "content": {"title": f"Earlier news {index}", "body": "Read before"},
    })["event_id"] for index in range(count)]
    wait_for_fan_out(base, events)
    postgres = database.startswith("postgres")
    identifier = ("gen_random_uuid()" if postgres else
                  "upper(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2)"
                  " || '-a' || substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6)))")
    statement = (
        "INSERT INTO notifications (id, event_id, user_id, category, tenant, title, body, in_inbox,"
        " created_at, available_at, seen_at, read_at)"
        f" SELECT {identifier}, events.id, users.id, 'announcement', 'main', 'Earlier news', 'Read before',"
        f" {'true' if postgres else '1'}, events.created_at, events.created_at, events.created_at, events.created_at"
        " FROM users CROSS JOIN events WHERE users.external_id LIKE 'reader-%'")
    if postgres:
        subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", database, "-c", statement], check=True)
    else:
        with sqlite3.connect(database, timeout=60) as connection:
            connection.execute(statement)


def sent_count(base, channel):
    """Pushes this server has recorded as sent, from `/metrics`."""
    request = urllib.request.Request(base + "/metrics")
    request.add_header("Authorization", f"Bearer {KEY}")
    with urllib.request.urlopen(request, timeout=60) as response:
        text = response.read().decode()
    match = re.search(r'^belfry_deliveries_total\{channel="%s",outcome="sent"\} (\d+)' % channel, text, re.M)
    return int(match.group(1)) if match else 0


def client_rate(bench, platform, count):
    """`belfry-bench apns|fcm COUNT 100`: the client alone, pushes a second."""
    output = subprocess.run([bench, platform, str(count), "100"], check=True, capture_output=True, text=True).stdout
    match = re.search(r"belfry: (\d+) sent, (\d+) failed in ([0-9.]+) s", output)
    if not match or int(match.group(2)) != 0:
        sys.exit(f"belfry-bench {platform} did not send every push:\n" + output)
    return int(match.group(1)) / float(match.group(3))


def main():
    args = arguments(("--devices", int, 20_000), ("--platform", str, "apns"), ("--history", int, 0))
    if args.platform not in PLATFORMS:
        sys.exit("--platform takes apns or fcm")
    bench = os.path.join(os.path.dirname(os.path.abspath(args.binary)), "belfry-bench")
    if not os.path.exists(bench):
        sys.exit(f"build belfry-bench beside {args.binary} (swift build -c release --product belfry-bench)")
    work = tempfile.mkdtemp(prefix="belfry-push-queue-")
    service = subprocess.Popen(
        [bench, f"{args.platform}-server", str(args.devices)], stdout=subprocess.PIPE, text=True)
    server = None
    try:
        os.environ.update(server_settings(args.platform, json.loads(service.stdout.readline())))
        # Its next line says when the last push arrived.
        arrived = queue.Queue()
        threading.Thread(target=lambda: arrived.put(service.stdout.readline()), daemon=True).start()
        config = os.path.join(work, "workspace.json")
        with open(config, "w") as file:
            json.dump(workspace(args.platform), file)
        server, base, _ = start_server(args.binary, args.database, config)
        users = [f"reader-{i}" for i in range(args.devices)]
        for offset in range(0, len(users), 10_000):
            call(base, "PUT", "/v1/topics/everyone/subscribers", {"users": users[offset:offset + 10_000]})
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda pair: register_device(base, args.platform, pair[1], pair[0]), enumerate(users)))
        if args.history:
            add_history(base, args.database, args.history)

        meter = CPUMeter(server.pid, postgres=False)
        started = time.time()
        accepted = call(base, "POST", "/v1/events", {
            "category": "announcement", "topic": "everyone",
            "content": {"title": "A new edition is out", "body": "Read what changed this week"},
        })
        channel = PLATFORMS[args.platform]["channel"]
        try:
            line = arrived.get(timeout=600)
        except queue.Empty:
            sys.exit(f"the {args.platform} test server did not answer {args.devices} pushes in 600 s")
        if not line:
            sys.exit(f"belfry-bench {args.platform}-server stopped before the last push (exit {service.poll()})")
        last = json.loads(line)
        elapsed = last["at"] - started
        deadline = time.monotonic() + 60
        while sent_count(base, channel) < args.devices:
            if time.monotonic() > deadline:
                sys.exit(f"only {sent_count(base, channel)} of {args.devices} pushes recorded 60 s after the last")
            time.sleep(0.05)
        recorded = time.time() - started
        cpu, _ = meter.used()
        counts = call(base, "GET", f"/v1/events/{accepted['event_id']}")["deliveries"].get(channel, {})
        if counts.get("sent", 0) != args.devices:
            sys.exit(f"the event's status counts {counts}, not {args.devices} sent")
        peak = memory_mib(server.pid, "VmHWM")
    finally:
        if server:
            server.terminate()
            server.wait(timeout=30)
        service.terminate()
        service.wait(timeout=10)

    rate = args.devices / elapsed
    reference = client_rate(bench, args.platform, args.devices)
    print(f"database:        {'PostgreSQL' if args.database.startswith('postgres') else 'SQLite'}")
    print(f"202 to the last of {args.devices} pushes answered: {elapsed:.2f} s  ->  {rate:,.0f} pushes/s"
          f" (all recorded as sent after {recorded:.2f} s)")
    print(f"server CPU:      {cpu * 1e6 / args.devices:.0f} µs a push (user and system, 202 to the last recorded;"
          " steadier than the rate on a busy machine)")
    print(f"platform:        {args.platform}")
    if args.history:
        print(f"history:         {args.history} read notifications in each user's inbox")
    print(f"the client alone (belfry-bench {args.platform} {args.devices} 100): {reference:,.0f} pushes/s")
    print(f"ratio:           {rate / reference:.3f} of the client alone"
          + (" (target: at least 0.5)" if args.platform == "apns" else ""))
    print(f"server memory:   {peak:.0f} MiB peak")


if __name__ == "__main__":
    main()
