"""A webhook receiver for Belfry's tests, written independently of Belfry's Swift code.

Usage: webhook_receiver.py SECRET STATUSES LOG
Listens on 127.0.0.1 on a free port and prints "listening PORT". Answers the n-th POST with
the n-th entry of STATUSES (comma-separated; the last one repeats; "503+120" adds
"Retry-After: 120"). Checks each request's Belfry-Signature with Python's hmac and appends
one JSON line per request to LOG: {"valid": bool, "delivery": ..., "body": {...}}.
"""
import hashlib
import hmac
import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

secret, statuses, log_path = sys.argv[1].encode(), sys.argv[2].split(","), sys.argv[3]
count = 0


def signature_is_valid(header, body):
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    if "t" not in fields or "v1" not in fields:
        return False
    expected = hmac.new(secret, fields["t"].encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, fields["v1"])


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        global count
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        entry = statuses[min(count, len(statuses) - 1)]
        count += 1
        status, _, retry_after = entry.partition("+")
        with open(log_path, "a") as log:
            log.write(json.dumps({
                "valid": signature_is_valid(self.headers.get("Belfry-Signature", ""), body),
                "delivery": self.headers.get("Belfry-Delivery"),
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


server = HTTPServer(("127.0.0.1", 0), Handler)
print(f"listening {server.server_address[1]}", flush=True)
server.serve_forever()
