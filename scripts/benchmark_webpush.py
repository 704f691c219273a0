#!/usr/bin/env python3
"""Web Push benchmark: Belfry's encryption rate on one core and its end-to-end send rate to a
local HTTP/2 push endpoint (from `belfry-bench webpush`), and pywebpush encrypting the same
payload for the same kind of subscription in the same run, with the ratio.

The encryption is timed in ROUNDS rounds of Belfry's and pywebpush's, Belfry first in odd
rounds and second in even ones, so that both sides see the same moments of the machine; the
ratio is taken of the two medians, and each round's own ratio is printed beside it.

Usage: scripts/benchmark_webpush.py BELFRY_BENCH [COUNT] [ROUNDS]
Needs: pip install pywebpush
"""

import base64
import json
import os
import statistics
import subprocess
import sys
import time

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from pywebpush import WebPusher


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def belfry(bench, mode, count, *extra):
    run = subprocess.run([bench, mode, str(count), *extra], check=True, capture_output=True, text=True)
    return json.loads(run.stdout)


def main():
    bench = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    if rounds < 1:
        sys.exit("ROUNDS must be at least 1")
    report = belfry(bench, "webpush", count, "100")
    payload = b64url_decode(report["payload"])
    belfry_send = report["sent"] / report["send_seconds"]

    key = ec.generate_private_key(ec.SECP256R1())
    subscription = {
        "endpoint": "https://push.example.net/push/bench",
        "keys": {
            "p256dh": b64url(key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)),
            "auth": b64url(os.urandom(16)),
        },
    }
    pusher = WebPusher(subscription)

    belfry_rates, python_rates, floor_rates = [], [], []

    def belfry_round():
        encryption = belfry(bench, "webpush-encrypt", count)
        belfry_rates.append(count / encryption["encrypt_seconds"])
        floor_rates.append(count / encryption["floor_seconds"])

    def python_round():
        started = time.perf_counter()
        for _ in range(count):
            pusher.encode(payload, content_encoding="aes128gcm")
        python_rates.append(count / (time.perf_counter() - started))

    for round_index in range(rounds):
        for run in (belfry_round, python_round) if round_index % 2 == 0 else (python_round, belfry_round):
            run()
    belfry_encrypt = statistics.median(belfry_rates)
    python_encrypt = statistics.median(python_rates)
    floor = statistics.median(floor_rates)
    ratios = [b / p for b, p in zip(belfry_rates, python_rates)]

    print(f"payload: {len(payload)} bytes, {count} messages, {rounds} rounds")
    print(f"belfry encrypt (one core): {belfry_encrypt:,.0f} messages/s (median; {min(belfry_rates):,.0f}–{max(belfry_rates):,.0f})")
    print(f"pywebpush encrypt (one core): {python_encrypt:,.0f} messages/s (median; {min(python_rates):,.0f}–{max(python_rates):,.0f})")
    print(f"ratio belfry/pywebpush: {belfry_encrypt / python_encrypt:.2f} (target: at least 2); "
          f"by round: {', '.join(f'{ratio:.2f}' for ratio in ratios)}")
    print(f"floor, the two P-256 operations alone in Swift (one core): {floor:,.0f} messages/s; "
          f"belfry at {belfry_encrypt / floor:.2f} of it")
    print(f"belfry end-to-end to a local HTTP/2 endpoint ({report['concurrency']} in flight): "
          f"{belfry_send:,.0f} sends/s, {report['sent']} of {count} accepted")


if __name__ == "__main__":
    main()
