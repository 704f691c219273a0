"""A webhook receiver for Belfry's tests, written independently of Belfry's Swift code.

Usage: webhook_receiver.py SECRET STATUSES LOG [DELAY_MS [HOLD]]
Listens on 127.0.0.1 on a free port and prints "listening PORT". Answers the n-th POST with
the n-th entry of STATUSES (comma-separated; the last one repeats; "503+120" adds
"Retry-After: 120"). STATUSES "flaky:P:SEED" instead answers P % of requests, at random, with
500 or with 429 and "Retry-After: 1", and the rest with 200; no delivery is failed more than
four times in a row, so that its attempt limit is never what the test measures. Checks each
request's Belfry-Signature with Python's hmac, and its Standard Webhooks headers with the
`standardwebhooks` package, and appends one JSON line per request to LOG:
{"valid": bool, "standard": bool, "delivery": ..., "body": {...}}. Requests are served concurrently, each
answered after DELAY_MS milliseconds (0 unless given). While the file HOLD exists, a request
waits before it is logged and answered: a test holds deliveries in flight, whatever its pace.
"""
import base64
import hashlib
import hmac
import json
import os
import random
import sys
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

secret, statuses, log_path = sys.argv[1].encode(), sys.argv[2].split(","), sys.argv[3]
delay = int(sys.argv[4]) / 1000 if len(sys.argv) > 4 else 0
hold = sys.argv[5] if len(sys.argv) > 5 else None
count = 0
lock = threading.Lock()
flaky = statuses[0].startswith("flaky:")
if flaky:
    _, percent, seed = statuses[0].split(":")
    chance = int(percent) / 100
    generator = random.Random(int(seed))
failures_in_a_row = {}


def answer_for(delivery):
    """The next answer, as "STATUS" or "STATUS+RETRY_AFTER"; called under the lock."""
    global count
    if not flaky:
        entry = statuses[min(count, len(statuses) - 1)]
        count += 1
        return entry
    failed = failures_in_a_row.get(delivery, 0)
    if failed < 4 and generator.random() < chance:
        failures_in_a_row[delivery] = failed + 1
        return generator.choice(["500", "429+1"])
    failures_in_a_row[delivery] = 0
    return "200"


def signature_is_valid(header, body):
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    if "t" not in fields or "v1" not in fields:
        return False
    expected = hmac.new(secret, fields["t"].encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, fields["v1"])


def standard_is_valid(headers, body, delivery):
    """The Standard Webhooks headers, checked by the `standardwebhooks` package. A secret that is
    not `whsec_…` is its bytes, which the package takes as `whsec_` and their base64. The tests
    run on a clock of their own, so a timestamp the package finds too old is checked by signing
    the same message with it."""
    text = secret.decode()
    webhook = Webhook(text if text.startswith("whsec_") else "whsec_" + base64.b64encode(secret).decode())
    fields = {name: headers.get(name, "") for name in ("webhook-id", "webhook-timestamp", "webhook-signature")}
    # The app's webhook names its delivery twice; a status event only in webhook-id.
    if delivery is not None and fields["webhook-id"] != delivery.lower():
        return False
    try:
        webhook.verify(body, fields)
        return True
    except WebhookVerificationError as error:
        if "timestamp" not in str(error).lower():
            return False
    try:
        moment = datetime.fromtimestamp(int(fields["webhook-timestamp"]), tz=timezone.utc)
    except ValueError:
        return False
    expected = webhook.sign(fields["webhook-id"], moment, body.decode())
    return expected in fields["webhook-signature"].split(" ")


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        delivery = self.headers.get("Belfry-Delivery")
        time.sleep(delay)
        while hold and os.path.exists(hold):
            time.sleep(0.05)
        with lock:
            status, _, retry_after = answer_for(delivery).partition("+")
            with open(log_path, "a") as log:
                log.write(json.dumps({
                    "valid": signature_is_valid(self.headers.get("Belfry-Signature", ""), body),
                    "standard": standard_is_valid(self.headers, body, delivery),
                    "delivery": delivery or "",
                    "answered": int(status),
                    "body": json.loads(body),
                }) + "\n")
        self.send_response(int(status))
        if retry_after:
            self.send_header("Retry-After", retry_after)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


class Server(ThreadingHTTPServer):
    # socketserver listens with a backlog of 5: Belfry opens 16 connections at once, and the
    # SYNs past the backlog are dropped and sent again a second later.
    request_queue_size = 128


server = Server(("127.0.0.1", 0), Handler)
print(f"listening {server.server_address[1]}", flush=True)
server.serve_forever()
