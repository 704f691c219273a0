"""Batches (digests): N events for one user into one open batch, then the time the batch takes
to close once its window ends. Beside each figure, its floor measured in the same run: the same
N events of a category without a batch (each its own notification), and one plain event's time
from its 202 to the inbox.

    python3 scripts/benchmark_batch.py --binary .build/release/belfry --database /tmp/b.sqlite [--events 10000]
"""
import argparse
import http.client
import json
import os
import tempfile
import time
import urllib.parse
import urllib.request

from benchmark_support import KEY, call, memory_mib, start_server

DEMO = os.path.join(os.path.dirname(__file__), "..", "Sources", "BelfryServer", "Resources", "demo-workspace.json")


def post_events(base, category, user, count):
    """Posts `count` events over one kept-alive connection; returns the last event's id."""
    url = urllib.parse.urlparse(base)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    last = None
    for index in range(count):
        body = json.dumps({"category": category, "recipients": [user], "data": {"page": "Bell"},
                           "content": {"title": f"Thanks {index}", "body": "for Bell"}})
        connection.request("POST", "/v1/events", body, headers)
        response = connection.getresponse()
        answer = response.read()
        if response.status != 202:
            raise SystemExit(f"event {index}: {response.status} {answer[:200]!r}")
        last = json.loads(answer)["event_id"]
    connection.close()
    return last


def wait_done(base, event_id):
    while call(base, "GET", f"/v1/events/{event_id}")["state"] != "done":
        time.sleep(0.02)


def inbox(base, token):
    request = urllib.request.Request(base + "/v1/me/notifications", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())["notifications"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--database", required=True)
    parser.add_argument("--events", type=int, default=10000)
    parser.add_argument("--window", type=int, default=240, help="seconds; longer than both runs of N events")
    args = parser.parse_args()

    with open(DEMO) as f:
        workspace = json.load(f)
    workspace["categories"] += [
        {"id": "bench-batched", "name": "Batched", "channels": ["inbox"],
         "batch": {"window_seconds": args.window, "max_items": 10}},
        {"id": "bench-plain", "name": "Plain", "channels": ["inbox"]},
    ]
    config = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(workspace, config)
    config.close()
    server, base, _ = start_server(args.binary, args.database, config.name)
    try:
        for user in ("ada", "bob"):
            call(base, "PUT", f"/v1/users/{user}", {})
        tokens = {user: call(base, "POST", f"/v1/users/{user}/tokens", {})["token"] for user in ("ada", "bob")}

        started = time.monotonic()
        last = post_events(base, "bench-batched", "ada", args.events)
        accepted = time.monotonic()
        wait_done(base, last)
        batched = time.monotonic()
        opened_at = started  # the batch opened with the first event's fan-out, a little after this
        status = call(base, "GET", f"/v1/events/{last}")
        assert status["batched"] == 1 and status["notifications"] == 0, status

        floor_started = time.monotonic()
        last_plain = post_events(base, "bench-plain", "bob", args.events)
        floor_accepted = time.monotonic()
        wait_done(base, last_plain)
        floor_done = time.monotonic()
        assert len(inbox(base, tokens["bob"])) > 0

        # One plain event, from its 202 to the inbox: the floor of any notification's latency.
        call(base, "PUT", "/v1/users/carol", {})
        carol = call(base, "POST", "/v1/users/carol/tokens", {})["token"]
        single = time.monotonic()
        post_events(base, "bench-plain", "carol", 1)
        while not inbox(base, carol):
            time.sleep(0.005)
        single_latency = time.monotonic() - single

        closes = opened_at + args.window
        if time.monotonic() > closes:
            raise SystemExit(f"the window ended before the floor run finished: raise --window above {args.window}")
        time.sleep(max(0, closes - time.monotonic() - 0.5))
        while True:
            items = inbox(base, tokens["ada"])
            if items:
                break
            time.sleep(0.005)
        closed = time.monotonic()
        digest = items[0]
        assert digest["batch"]["count"] == args.events and len(digest["batch"]["items"]) == 10, digest["batch"]["count"]
        assert len(items) == 1
        rss = memory_mib(server.pid, "VmHWM")
    finally:
        server.terminate()
        server.wait()
        os.unlink(config.name)

    n = args.events
    print(f"events: {n} for one user; batch window {args.window} s, max_items 10")
    print(f"batched:  accepted {n / (accepted - started):8.0f} events/s; all in the batch after {batched - started:6.2f} s"
          f" ({n / (batched - started):6.0f} events/s)")
    print(f"floor:    accepted {n / (floor_accepted - floor_started):8.0f} events/s; all in the inbox after"
          f" {floor_done - floor_started:6.2f} s ({n / (floor_done - floor_started):6.0f} events/s)")
    print(f"ratio batched/floor (time to take N events): {(batched - started) / (floor_done - floor_started):.2f}")
    # The batch opened when the first event fanned out, at most a poll after `started`: this
    # overstates the close time by that much.
    print(f"close: the digest of {n} events was in the inbox {closed - closes:.3f} s after its window ended"
          f" (counted from the first POST, so including the first event's fan-out)")
    print(f"floor: one plain event from its 202 to the inbox: {single_latency:.3f} s")
    print(f"peak memory of belfry serve: {rss:.0f} MiB")


if __name__ == "__main__":
    main()
