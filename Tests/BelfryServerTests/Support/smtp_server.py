"""A mail server for Belfry's tests: aiosmtpd, with Python's own email package reading what arrives.

Usage: smtp_server.py LOG [--cert C --key K] [--implicit-tls] [--user U --password P]
Listens on 127.0.0.1 on a free port and prints "listening PORT". With a certificate it offers
STARTTLS and requires it before anything else (or, with --implicit-tls, speaks TLS from the
first byte); with a user it requires AUTH (PLAIN or LOGIN). Recipients decide the answers:
"reject-..." is refused at RCPT TO with 550; "retry-..." has its first message answered 451
at the end of DATA, then accepted. Every accepted message is appended to LOG as one JSON
line: the envelope, the login, every header decoded, the longest raw line, and each MIME
part's type, charset, transfer encoding and decoded content.
"""
import argparse
import warnings
import json
import socket
import ssl
import sys
import threading
import signal
import time
from email import policy
from email.parser import BytesParser

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

parser = argparse.ArgumentParser()
parser.add_argument("log")
parser.add_argument("--cert")
parser.add_argument("--key")
parser.add_argument("--implicit-tls", action="store_true")
parser.add_argument("--user")
parser.add_argument("--password")
parser.add_argument("--count-only", action="store_true", help="log nothing; print the number received at exit")
arguments = parser.parse_args()

# The warning about AUTH without TLS is for implicit TLS, which the SMTP layer cannot see.
warnings.filterwarnings("ignore", message="Requiring AUTH")
lock = threading.Lock()
retried = set()
received = 0


class Handler:
    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address.startswith("reject-"):
            return "550 5.1.1 <%s>: no such user here" % address
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        global received
        if arguments.count_only:
            received += 1
            return "250 2.0.0 OK queued"
        with lock:
            for recipient in envelope.rcpt_tos:
                if recipient.startswith("retry-") and recipient not in retried:
                    retried.add(recipient)
                    return "451 4.3.0 Mailbox busy, try again later"
        raw = envelope.original_content
        message = BytesParser(policy=policy.default).parsebytes(raw)
        parts = []
        for part in message.walk():
            if part.is_multipart():
                continue
            parts.append({
                "type": part.get_content_type(),
                "charset": part.get_content_charset(),
                "encoding": part.get("Content-Transfer-Encoding"),
                "content": part.get_content(),
            })
        login = session.auth_data.login.decode() if isinstance(session.auth_data, LoginPassword) else None
        entry = {
            "mail_from": envelope.mail_from,
            "rcpt_tos": envelope.rcpt_tos,
            "login": login,
            "tls": session.ssl is not None or arguments.implicit_tls,
            "headers": {name: str(value) for name, value in message.items()},
            "content_type": message.get_content_type(),
            "longest_line": max(len(line) for line in raw.split(b"\r\n")),
            "parts": parts,
        }
        with lock, open(arguments.log, "a") as log:
            log.write(json.dumps(entry) + "\n")
        return "250 2.0.0 OK queued"


def authenticate(server, session, envelope, mechanism, auth_data):
    ok = (isinstance(auth_data, LoginPassword) and auth_data.login.decode() == arguments.user
          and auth_data.password.decode() == arguments.password)
    return AuthResult(success=ok, auth_data=auth_data if ok else None)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


context = None
if arguments.cert:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(arguments.cert, arguments.key)

options = {}
if arguments.user:
    # With implicit TLS the SMTP layer cannot see the TLS under it; the connection is TLS all the same.
    options.update(
        authenticator=authenticate, auth_required=True,
        auth_require_tls=context is not None and not arguments.implicit_tls)
if context is not None and arguments.implicit_tls:
    controller_tls = {"ssl_context": context}
elif context is not None:
    controller_tls = {"tls_context": context, "require_starttls": True}
else:
    controller_tls = {}

# SIGTERM ends the server like Ctrl-C, so that the count is printed.
signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
port = free_port()
controller = Controller(
    Handler(), hostname="127.0.0.1", port=port, server_hostname="localhost", ready_timeout=10,
    **controller_tls, **options)
controller.start()
print("listening %d" % port, flush=True)
try:
    while True:
        time.sleep(3600)
except KeyboardInterrupt:
    pass
finally:
    controller.stop()
    if arguments.count_only:
        print("received %d" % received, flush=True)
