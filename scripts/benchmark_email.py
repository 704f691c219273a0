"""Email throughput: Belfry's email channel (templates, MIME, its SMTP client) against Python's
smtplib sending the same message, both to one aiosmtpd relay on loopback (no TLS), in one run.

Usage: benchmark_email.py BELFRY_BENCH [COUNT]
Prints messages/s for Belfry over one connection and over four (each message composed:
templates, signed links, MIME), for Belfry's SMTP client alone sending one rendered message,
for smtplib over one connection, and the ratios. The relay (Tests/BelfryServerTests/Support/smtp_server.py
--count-only) runs in its own process and checks the count it received.
"""
import json
import pathlib
import re
import smtplib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
bench = sys.argv[1]
count = int(sys.argv[2]) if len(sys.argv) > 2 else 2000

server = subprocess.Popen(
    [sys.executable, str(ROOT / "Tests/BelfryServerTests/Support/smtp_server.py"), "/dev/null", "--count-only"],
    stdout=subprocess.PIPE, text=True)
port = None
for line in server.stdout:
    match = re.match(r"listening (\d+)", line)
    if match:
        port = int(match.group(1))
        break
assert port, "the relay did not start"


def belfry(connections, *mode):
    output = subprocess.run([bench, "email", str(port), str(count), str(connections), *mode],
                            check=True, capture_output=True, text=True).stdout
    result = json.loads(output.strip().splitlines()[-1])
    assert result["failed"] == 0, result
    return result["sent"] / result["seconds"], result["sample"]


try:
    one, sample_path = belfry(1)
    four, _ = belfry(4)
    prepared, _ = belfry(1, "prepared")
    sample = pathlib.Path(sample_path).read_bytes()
    client = smtplib.SMTP("127.0.0.1", port)
    client.ehlo()
    client.sendmail("notify@example.org", ["grace@example.org"], sample)  # warm up, as Belfry does
    started = time.perf_counter()
    for _ in range(count):
        client.sendmail("notify@example.org", ["grace@example.org"], sample)
    python = count / (time.perf_counter() - started)
    client.quit()
finally:
    server.terminate()
    received = int(re.search(r"received (\d+)", server.communicate(timeout=10)[0]).group(1))

expected = 4 * (count + 1)
assert received == expected, f"the relay received {received} messages, expected {expected}"
print(f"message: {len(sample)} bytes (text and HTML parts, quoted-printable)")
print(f"belfry, 1 connection:  {one:8.0f} messages/s (templates rendered and MIME built per message)")
print(f"belfry, 4 connections: {four:8.0f} messages/s")
print(f"belfry, 1 connection:  {prepared:8.0f} messages/s (one message rendered once: the SMTP client alone)")
print(f"smtplib, 1 connection: {python:8.0f} messages/s (the same bytes, prepared once)")
print(f"ratio belfry/smtplib: {one / python:.2f} (1 connection), {four / python:.2f} (4 connections), "
      f"{prepared / python:.2f} (SMTP client alone, 1 connection)")
print(f"the relay received all {received} messages")
