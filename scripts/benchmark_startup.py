"""How long `belfry serve` takes to be ready (its "listening on" line) on a database that is
already migrated, on SQLite and, given a URL, PostgreSQL. The floor, measured in the same run:
the same binary printing its help (starting the process and loading the program, no more).

    python3 scripts/benchmark_startup.py --binary .build/release/belfry --database /tmp/s.sqlite [--postgres URL]
"""
import argparse
import os
import statistics
import subprocess
import time

from benchmark_support import KEY


def ready_seconds(binary, database):
    env = dict(os.environ, BELFRY_API_KEY=KEY, BELFRY_LOG_LEVEL="warning", DATABASE_URL="", BELFRY_CONFIG="")
    started = time.monotonic()
    server = subprocess.Popen([binary, "serve", "--port", "0", "--database", database],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    try:
        for line in server.stdout:
            if "listening on" in line:
                return time.monotonic() - started
        raise SystemExit("belfry serve did not start")
    finally:
        server.terminate()
        server.wait()


def help_seconds(binary):
    started = time.monotonic()
    subprocess.run([binary, "--help"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.monotonic() - started


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--database", required=True)
    parser.add_argument("--postgres")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    floor = statistics.median(help_seconds(args.binary) for _ in range(args.runs))
    print(f"floor: `belfry --help` {floor * 1000:.1f} ms (median of {args.runs})")
    for name, database in [("SQLite", args.database), ("PostgreSQL", args.postgres)]:
        if not database:
            continue
        first = ready_seconds(args.binary, database)  # creates and migrates
        runs = sorted(ready_seconds(args.binary, database) for _ in range(args.runs))
        median = statistics.median(runs)
        print(f"{name}: first start (migrating) {first * 1000:.0f} ms; ready on a migrated database: median "
              f"{median * 1000:.1f} ms, slowest {runs[-1] * 1000:.1f} ms (target: at most 500 ms); "
              f"ratio to the floor {median / floor:.1f}")


if __name__ == "__main__":
    main()
