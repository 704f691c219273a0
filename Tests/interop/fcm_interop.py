#!/usr/bin/env python3
"""Interop check of Belfry's FCM provider against an independent stand-in written in Python.

Python makes the service account (an RSA key from `cryptography`) and a TLS certificate, and
serves Google's OAuth token endpoint and FCM's send API over HTTP/2 (`h2`), verifying Belfry's
RS256 assertion with PyJWT (signature, `iss`, `aud`, `scope`, an hour at most) and the access
token on every send. It then runs `belfry serve` with that service account, registers an
Android device, triggers an event and checks the message that arrives.

Requires: pip install h2 pyjwt cryptography
Usage:    python3 Tests/interop/fcm_interop.py .build/debug/belfry
Exits non-zero on any mismatch.
"""

import asyncio
import datetime
import ipaddress
import json
import os
import secrets
import ssl
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

import h2.config
import h2.connection
import h2.events
import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
from benchmark_support import call, start_server  # noqa: E402

PROJECT = "interop-project"
CLIENT_EMAIL = "belfry@interop-project.iam.gserviceaccount.com"
KEY_ID = secrets.token_hex(20)
SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
DEVICE_TOKEN = "interop-device:APA91b" + "x" * 120


def certificates(directory):
    """A CA and a certificate it signed for 127.0.0.1: the files for the server and for Belfry."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "FCM interop CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
        .sign(ca_key, hashes.SHA256()))
    paths = {name: os.path.join(directory, name) for name in ("ca.pem", "cert.pem", "key.pem")}
    with open(paths["ca.pem"], "wb") as f:
        f.write(ca.public_bytes(serialization.Encoding.PEM))
    with open(paths["cert.pem"], "wb") as f:
        f.write(leaf.public_bytes(serialization.Encoding.PEM))
    with open(paths["key.pem"], "wb") as f:
        f.write(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return paths


class StandIn:
    """Google's token endpoint and FCM's send API, as one HTTP/2 server's routes."""

    def __init__(self, public_key, token_uri):
        self.public_key = public_key
        self.token_uri = token_uri
        self.access_tokens = set()
        self.messages = []
        self.problems = []
        self.arrived = threading.Event()

    def answer(self, method, path, headers, body):
        if path == "/token":
            return self.grant(method, headers, body)
        if path == f"/v1/projects/{PROJECT}/messages:send":
            return self.send(method, headers, body)
        return 404, {"error": {"code": 404, "status": "NOT_FOUND", "message": path}}

    def grant(self, method, headers, body):
        form = urllib.parse.parse_qs(body.decode())
        if method != "POST" or headers.get("content-type") != "application/x-www-form-urlencoded":
            self.problems.append(f"token request: {method} {headers.get('content-type')}")
        if form.get("grant_type") != ["urn:ietf:params:oauth:grant-type:jwt-bearer"]:
            self.problems.append(f"grant_type: {form.get('grant_type')}")
            return 400, {"error": "unsupported_grant_type"}
        assertion = form.get("assertion", [""])[0]
        try:
            header = jwt.get_unverified_header(assertion)
            claims = jwt.decode(
                assertion, self.public_key, algorithms=["RS256"], audience=self.token_uri, issuer=CLIENT_EMAIL,
                options={"require": ["iss", "aud", "iat", "exp", "scope"]})
        except jwt.PyJWTError as error:
            self.problems.append(f"assertion: {error}")
            return 400, {"error": "invalid_grant", "error_description": str(error)}
        if header.get("kid") != KEY_ID or header.get("alg") != "RS256":
            self.problems.append(f"assertion header: {header}")
        if SCOPE not in claims["scope"].split() or not 0 < claims["exp"] - claims["iat"] <= 3600:
            self.problems.append(f"assertion claims: {claims}")
        token = "ya29.interop-" + secrets.token_urlsafe(24)
        self.access_tokens.add(token)
        return 200, {"access_token": token, "expires_in": 3599, "token_type": "Bearer"}

    def send(self, method, headers, body):
        bearer = headers.get("authorization", "")
        if method != "POST" or not bearer.startswith("Bearer ") or bearer[7:] not in self.access_tokens:
            self.problems.append(f"send without a granted access token: {bearer[:20]}")
            return 401, {"error": {"code": 401, "status": "UNAUTHENTICATED", "message": "bad token"}}
        self.messages.append(json.loads(body))
        self.arrived.set()
        return 200, {"name": f"projects/{PROJECT}/messages/0:{secrets.randbelow(10**12)}"}


class Protocol(asyncio.Protocol):
    """One HTTP/2 connection: collects each stream's request and answers it from the stand-in."""

    def __init__(self, stand_in):
        self.stand_in = stand_in
        self.streams = {}

    def connection_made(self, transport):
        self.transport = transport
        self.connection = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        self.connection.initiate_connection()
        transport.write(self.connection.data_to_send())

    def data_received(self, data):
        for event in self.connection.receive_data(data):
            if isinstance(event, h2.events.RequestReceived):
                self.streams[event.stream_id] = (dict(event.headers), bytearray())
            elif isinstance(event, h2.events.DataReceived):
                self.streams[event.stream_id][1].extend(event.data)
                self.connection.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                headers, body = self.streams.pop(event.stream_id)
                status, answer = self.stand_in.answer(headers[":method"], headers[":path"], headers, bytes(body))
                payload = json.dumps(answer).encode()
                self.connection.send_headers(event.stream_id, [
                    (":status", str(status)), ("content-type", "application/json; charset=UTF-8"),
                    ("content-length", str(len(payload)))])
                self.connection.send_data(event.stream_id, payload, end_stream=True)
        self.transport.write(self.connection.data_to_send())


def serve(stand_in, paths, ready):
    """Runs the stand-in on a free loopback port in this thread; puts the port in `ready`."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(paths["cert.pem"], paths["key.pem"])
    context.set_alpn_protocols(["h2"])
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(
        loop.create_server(lambda: Protocol(stand_in), "127.0.0.1", 0, ssl=context))
    ready.append(server.sockets[0].getsockname()[1])
    loop.run_forever()


def main():
    binary = sys.argv[1]
    directory = tempfile.mkdtemp(prefix="belfry-fcm-interop-")
    paths = certificates(directory)
    # The port is chosen when the server starts; the token URI names it, so the account is
    # written once the server listens.
    ready = []
    stand_in = StandIn(None, None)
    threading.Thread(target=serve, args=(stand_in, paths, ready), daemon=True).start()
    while not ready:
        time.sleep(0.01)
    base_url = f"https://127.0.0.1:{ready[0]}"
    private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    stand_in.public_key = private_key.public_key()
    stand_in.token_uri = base_url + "/token"
    account_path = os.path.join(directory, "service-account.json")
    with open(account_path, "w") as f:
        json.dump({
            "type": "service_account", "project_id": PROJECT, "private_key_id": KEY_ID,
            "private_key": private_key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption()).decode(),
            "client_email": CLIENT_EMAIL, "client_id": "1", "token_uri": stand_in.token_uri,
        }, f)

    os.environ.update(
        BELFRY_FCM_SERVICE_ACCOUNT_PATH=account_path, BELFRY_FCM_URL=base_url, BELFRY_EXTRA_CA_FILE=paths["ca.pem"])
    server, base, _ = start_server(binary, os.path.join(directory, "belfry.sqlite"))
    try:
        call(base, "PUT", "/v1/users/ada", {})
        user_token = call(base, "POST", "/v1/users/ada/tokens")["token"]
        request = urllib.request.Request(
            base + "/v1/me/devices", method="POST",
            data=json.dumps({"platform": "fcm", "token": DEVICE_TOKEN, "app_version": "1.0"}).encode(),
            headers={"Authorization": f"Bearer {user_token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 201, response.status
        call(base, "POST", "/v1/events", {
            "category": "reverted", "recipients": ["ada"], "data": {"revision": 7},
            "content": {"title": "Edit reverted", "body": "Your edit to Bell was undone",
                        "url": "https://example.org/diff/7"}})
        if not stand_in.arrived.wait(30):
            sys.exit(f"no message arrived in 30 s; problems: {stand_in.problems}")
    finally:
        server.terminate()
        server.wait()
    if stand_in.problems:
        sys.exit(f"the stand-in found problems: {stand_in.problems}")
    message = stand_in.messages[0]["message"]
    expected = {
        "token": DEVICE_TOKEN,
        "notification": {"title": "Edit reverted", "body": "Your edit to Bell was undone"},
    }
    for key, value in expected.items():
        if message.get(key) != value:
            sys.exit(f"message.{key}: {message.get(key)!r}, expected {value!r}")
    data = message["data"]
    if not all(isinstance(value, str) for value in data.values()):
        sys.exit(f"data values must all be strings: {data}")
    if data.get("category") != "reverted" or json.loads(data.get("data", "null")) != {"revision": 7}:
        sys.exit(f"data: {data}")
    if message["android"]["notification"]["channel_id"] != "reverted":
        sys.exit(f"android: {message['android']}")
    print(f"OK: assertion verified by PyJWT, {len(stand_in.access_tokens)} access token granted, "
          f"message received over HTTP/2 by h2")


if __name__ == "__main__":
    main()
