#!/usr/bin/env python3
"""Interop check of Belfry's Web Push encryption and VAPID against independent Python implementations.

Python makes the subscriber keys; Belfry (`belfry-bench webpush-interop`) encrypts for them
and signs a VAPID header; http_ece (RFC 8188/8291 aes128gcm) decrypts and PyJWT (RFC 8292,
ES256) verifies the token.

Requires: pip install http_ece pyjwt cryptography
Usage:    python3 Tests/interop/webpush_interop.py .build/debug/belfry-bench webpush-interop
Exits non-zero on any mismatch.
"""

import base64
import json
import os
import re
import subprocess
import sys
import time

import http_ece
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

AUDIENCE = "https://push.example.net"
SUBJECT = "mailto:ops@belfry.example"
HEADER_SIZE = 86
OVERHEAD = HEADER_SIZE + 1 + 16
AUTHORIZATION = re.compile(r"vapid t=([\w-]+\.[\w-]+\.[\w-]+), k=([\w-]{87})", re.ASCII)

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print(f"  FAIL: {message}")


def b64url_encode(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def interop_command():
    if len(sys.argv) < 2:
        sys.exit("usage: webpush_interop.py COMMAND [ARGUMENT ...]  (e.g. .build/debug/belfry-bench webpush-interop)")
    return sys.argv[1:]


def new_subscription():
    private_key = ec.generate_private_key(ec.SECP256R1())
    p256dh = private_key.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    return private_key, p256dh, os.urandom(16)


def run_swift(command, p256dh, auth, plaintext, padding):
    request = {
        "p256dh": b64url_encode(p256dh),
        "auth": b64url_encode(auth),
        "plaintext": b64url_encode(plaintext),
        "padding": padding,
        "audience": AUDIENCE,
        "subject": SUBJECT,
    }
    return subprocess.run(command, input=json.dumps(request), capture_output=True, text=True)


def verify_decryption(body, private_key, auth, plaintext, padding):
    check(len(body) == OVERHEAD + len(plaintext) + padding, f"body is {len(body)} bytes")
    check(body[16:20] == (4096).to_bytes(4, "big"), "rs is not 4096")
    check(body[20] == 65, "idlen is not 65")
    try:
        decrypted = http_ece.decrypt(body, private_key=private_key, auth_secret=auth, version="aes128gcm")
        check(decrypted == plaintext, "http_ece decrypted a different plaintext")
    except Exception as error:
        check(False, f"http_ece failed to decrypt: {error!r}")

    tampered = bytearray(body)
    tampered[-1] ^= 1
    try:
        http_ece.decrypt(bytes(tampered), private_key=private_key, auth_secret=auth, version="aes128gcm")
        check(False, "http_ece accepted a tampered body")
    except Exception:
        pass


def verify_vapid(authorization):
    match = AUTHORIZATION.fullmatch(authorization)
    check(match is not None, f"malformed Authorization header: {authorization!r}")
    if match is None:
        return
    token, k = match.groups()
    public_key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b64url_decode(k))

    check(jwt.get_unverified_header(token) == {"typ": "JWT", "alg": "ES256"}, "unexpected JWT header")
    try:
        claims = jwt.decode(
            token, public_key, algorithms=["ES256"], audience=AUDIENCE, options={"require": ["aud", "exp", "sub"]}
        )
        check(claims["sub"] == SUBJECT, f"sub is {claims['sub']!r}")
        check(isinstance(claims["exp"], int), "exp is not an integer")
        check(time.time() < claims["exp"] <= time.time() + 24 * 60 * 60, "exp is not within 24 hours")
    except jwt.PyJWTError as error:
        check(False, f"PyJWT rejected the token: {error!r}")

    try:
        jwt.decode(token, public_key, algorithms=["ES256"], audience="https://other.example")
        check(False, "PyJWT accepted a wrong audience")
    except jwt.InvalidAudienceError:
        pass


def main():
    command = interop_command()
    cases = [
        ("empty", b"", 0),
        ("rfc plaintext", b"When I grow up, I want to be a watermelon", 0),
        ("utf-8 json", json.dumps({"title": "Belfry 🔔", "body": "Ünïcödé"}).encode(), 0),
        ("random binary", os.urandom(1000), 0),
        ("padded", b"short", 200),
        ("max payload", os.urandom(4096 - OVERHEAD), 0),
    ]
    for name, plaintext, padding in cases:
        print(f"{name}: {len(plaintext)} bytes, padding {padding}")
        private_key, p256dh, auth = new_subscription()
        result = run_swift(command, p256dh, auth, plaintext, padding)
        check(result.returncode == 0, f"the encryptor failed: {result.stderr.strip()}")
        if result.returncode != 0:
            continue
        response = json.loads(result.stdout)
        verify_decryption(b64url_decode(response["ciphertext"]), private_key, auth, plaintext, padding)
        verify_vapid(response["authorization"])

    print("record overflow: 4080 bytes must be refused")
    _, p256dh, auth = new_subscription()
    result = run_swift(command, p256dh, auth, bytes(4080), 0)
    check(result.returncode != 0 and "record size" in result.stderr, "oversized record was not refused")

    if failures:
        print(f"FAILED: {len(failures)} check(s)")
        return 1
    print(f"OK: {len(cases)} messages decrypted by http_ece, VAPID verified by PyJWT")
    return 0


if __name__ == "__main__":
    sys.exit(main())
