"""What Belfry's benchmark scripts share: the API key, HTTP calls, memory readings, and starting
`belfry serve` on a free port."""
import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

KEY = "benchmark-key-0123456789abcdef"


def call(base, method, path, body=None):
    """Calls the Belfry API with the benchmark's key; returns the decoded JSON answer (or None)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {KEY}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read() or b"null")


def wait_for_fan_out(base, events):
    """Waits until every event's fan-out is done; returns the notifications they wrote. An
    event that failed ends the benchmark."""
    notifications = 0
    for event in events:
        while True:
            status = call(base, "GET", f"/v1/events/{event}")
            if status["state"] == "failed":
                sys.exit(f"event {event} failed: {status.get('error')}")
            if status["state"] == "done":
                notifications += status["notifications"]
                break
            time.sleep(0.05)
    return notifications


def cpu_seconds(pid):
    """User and system CPU time a process has used so far, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CPUMeter:
    """The CPU a server (and PostgreSQL on this machine, when it runs there) uses from now on."""

    def __init__(self, pid, postgres):
        self.pid, self.postgres = pid, postgres
        self.start = self.now()

    def now(self):
        return cpu_seconds(self.pid), postgres_cpu_seconds() if self.postgres else 0.0

    def used(self):
        """(server seconds, PostgreSQL seconds) since the meter was made."""
        server, postgres = self.now()
        return server - self.start[0], postgres - self.start[1]


def postgres_cpu_seconds():
    """User and system CPU time the PostgreSQL processes on this machine have used so far (those
    running now: a server started for the benchmark keeps its connections), from /proc."""
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm") as comm:
                if comm.read().strip() != "postgres":
                    continue
            total += cpu_seconds(int(entry))
        except OSError:
            continue
    return total


def memory_mib(pid, field):
    """A memory figure of a process from /proc, in MiB: VmRSS (now) or VmHWM (peak)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def start_server(binary, database, config="", options=()):
    """Starts `belfry serve` on a free loopback port (with a workspace config file, if given, and
    `serve`'s other options); returns the process, its base URL and port."""
    env = dict(os.environ, BELFRY_API_KEY=KEY, BELFRY_LOG_LEVEL="warning", DATABASE_URL="", BELFRY_CONFIG=config)
    server = subprocess.Popen(
        [binary, "serve", "--port", "0", "--database", database, *options],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    for line in server.stdout:
        match = re.search(r"listening on (http://127\.0\.0\.1:(\d+))", line)
        if match:
            return server, match.group(1), int(match.group(2))
    server.terminate()
    sys.exit("belfry serve did not start")


def arguments(*options):
    """The arguments every benchmark of a server takes (--binary, --database), and its own,
    each given as (flag, type, default)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--database", required=True)
    for flag, kind, default in options:
        parser.add_argument(flag, type=kind, default=default)
    return parser.parse_args()
