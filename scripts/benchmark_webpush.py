#!/usr/bin/env python3
"""Web Push benchmark: Belfry's encryption rate on one core and its end-to-end send rate to a
local HTTP/2 push endpoint (from `belfry-bench webpush`), and pywebpush encrypting the same
payload for the same kind of subscription in the same run, with the ratio.

Usage: scripts/benchmark_webpush.py BELFRY_BENCH [COUNT]
Needs: pip install pywebpush
"""

import base64
import json
import os
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


def main():
    bench = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
    report = json.loads(subprocess.run([bench, "webpush", str(count), "100"], check=True, capture_output=True, text=True).stdout)
    payload = b64url_decode(report["payload"])
    belfry_encrypt = report["count"] / report["encrypt_seconds"]
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
    started = time.perf_counter()
    for _ in range(count):
        pusher.encode(payload, content_encoding="aes128gcm")
    python_encrypt = count / (time.perf_counter() - started)

    print(f"payload: {len(payload)} bytes, {count} messages")
    print(f"belfry encrypt (one core): {belfry_encrypt:,.0f} messages/s")
    print(f"pywebpush encrypt (one core): {python_encrypt:,.0f} messages/s")
    print(f"ratio belfry/pywebpush: {belfry_encrypt / python_encrypt:.2f} (target: at least 2)")
    floor = report["count"] / report["floor_seconds"]
    print(f"floor, the two P-256 operations alone in Swift (one core): {floor:,.0f} messages/s; "
          f"belfry at {belfry_encrypt / floor:.2f} of it")
    print(f"belfry end-to-end to a local HTTP/2 endpoint ({report['concurrency']} in flight): "
          f"{belfry_send:,.0f} sends/s, {report['sent']} of {count} accepted")


if __name__ == "__main__":
    main()
