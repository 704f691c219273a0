#!/usr/bin/env python3
"""Checks that the OpenAPI document matches the server: every operation documents its request and
response schemas with examples, and Schemathesis, run against a live `belfry serve` on a throwaway
SQLite database, finds no 5xx and no answer whose status, content type or body the document does
not describe.

Each operation gets the credential its `security` names first: the API key (`apiKey`), a user token
minted for a seeded user (`userToken`), that user's page session (`webSession`), or the operator
console's session (`consoleSession`). The seed (a second user, a notification with actions, an
event, a push device, the workspace's ids and the pages' CSRF token) is sent half of the time in
place of generated values, so that requests reach real records. No provider is configured, so
nothing leaves loopback. A fixed seed and `--max-examples` per operation keep a run to about a
minute and a half on two cores.

    python3 scripts/schemathesis_check.py [--binary .build/debug/belfry] [--max-examples 150] [--seed N]
        [-- more `st run` arguments, e.g. --include-path-regex '^/v1/me/']
"""
import argparse
import http.client
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "Sources/BelfryServer/Resources/openapi.yaml"
API_KEY = "schemathesis-key-0123456789abcdef"
USER = "schemathesis-user"
OTHER_USER = "schemathesis-other"
# What fails the run; Schemathesis' other checks judge the API's design, not whether the document is true.
CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"
# A run past this is stuck (a hung server), not slow.
HARD_LIMIT_SECONDS = 300


class Server:
    """`belfry serve` on a free loopback port and a throwaway SQLite file, its log in `directory`."""

    def __init__(self, binary, directory):
        # Only our settings: no provider (APNs, Web Push, webhook, SMTP) is on, so nothing leaves loopback.
        env = {name: value for name, value in os.environ.items() if not name.startswith("BELFRY_")}
        # Thousands of requests a minute with one key, one user and one address: the limits
        # (their 429 is documented, and tested by the Swift suite) would leave most untried.
        env.update(BELFRY_API_KEY=API_KEY, BELFRY_LOG_LEVEL="warning", DATABASE_URL="",
                   BELFRY_RATE_LIMITS="api=off,user=off,signin=off,public=off")
        self.log_path = Path(directory) / "server.log"
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [binary, "serve", "--port", "0", "--database", str(Path(directory) / "belfry.sqlite")],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=directory)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.process.poll() is None:
            match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log_path.read_text())
            if match:
                self.port = int(match.group(1))
                self.base = f"http://127.0.0.1:{self.port}"
                return
            time.sleep(0.1)
        self.stop()
        sys.exit(f"schemathesis_check: belfry serve did not start:\n{self.log_path.read_text()}")

    def call(self, method, path, body=None, bearer=API_KEY, form=None, cookie=None):
        """One request with a JSON body or a web form; returns the status, the headers and the
        answer, decoded when it is JSON."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
        if cookie:
            headers["Cookie"] = cookie
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        elif form is not None:
            data = urllib.parse.urlencode(form).encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        connection.request(method, path, body=data, headers=headers)
        response = connection.getresponse()
        text = response.read().decode()
        connection.close()
        if response.getheader("Content-Type", "").startswith("application/json"):
            return response.status, response.headers, json.loads(text)
        return response.status, response.headers, text

    def errors(self):
        """The log's error lines: a 5xx logs why."""
        return [line for line in self.log_path.read_text().splitlines() if "error" in line.lower()]

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def undocumented(document):
    """Operations whose request body or a response with a body lacks a schema or an example."""
    def resolve(value, kind):
        while isinstance(value, dict) and "$ref" in value:
            value = document["components"][kind][value["$ref"].rsplit("/", 1)[-1]]
        return value

    def lacks(media):
        schema = media.get("schema")
        if schema is None:
            return "schema"
        inline = "$ref" not in schema and ("example" in schema or "examples" in schema)
        return None if "example" in media or "examples" in media or inline else "example"

    problems = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method not in ("get", "put", "post", "patch", "delete"):
                continue
            bodies = [("request", resolve(operation.get("requestBody"), "requestBodies") or {})]
            bodies += [(status, resolve(response, "responses")) for status, response in operation["responses"].items()]
            for where, body in bodies:
                for media_type, media in (body.get("content") or {}).items():
                    if missing := lacks(media):
                        problems.append(f"{method.upper()} {path}: {where} {media_type} has no {missing}")
    return problems


def expect(what, answer, status):
    if answer[0] != status:
        sys.exit(f"schemathesis_check: {what} answered {answer[0]} {answer[2]}, expected {status}")
    return answer


def seed(server, with_console):
    """Two users, a user token and a page session for the first, a notification with actions, an
    event, a device, and a console session when the document has the console. Returns the
    credentials by security scheme, and by binding (`path.event_id`, `body.tenants[*]`) the real
    values Schemathesis sends half of the time instead of generated ones."""
    for user in (USER, OTHER_USER):
        expect(f"creating {user}", server.call("PUT", f"/v1/users/{user}", {"tenants": ["enwiki"]}), 201)
    token = expect("minting a user token", server.call("POST", f"/v1/users/{USER}/tokens", {}), 201)[2]["token"]
    workspace = expect("reading the workspace", server.call("GET", "/v1/config"), 200)[2]
    category = next(c for c in workspace["categories"] if c["actions"] and c["channels"])
    event = {"category": category["id"], "recipients": [USER],
             "content": {"title": "Seeded for Schemathesis", "body": "A notification to act on."}}
    event_id = expect("triggering an event", server.call("POST", "/v1/events", event), 202)[2]["event_id"]
    device = {"platform": "apns", "token": "ab" * 32, "environment": "sandbox", "authorization": "denied"}
    registered = expect("registering a device", server.call("POST", "/v1/me/devices", device, bearer=token), 201)
    device_id = registered[2]["id"]
    notifications = []
    deadline = time.monotonic() + 30
    while not notifications and time.monotonic() < deadline:
        time.sleep(0.1)
        inbox = expect("listing the inbox", server.call("GET", "/v1/me/notifications", bearer=token), 200)[2]
        notifications = inbox["notifications"]
    if not notifications:
        sys.exit("schemathesis_check: the seeded event reached no inbox in 30 s")
    # The page session: the token's "continue as" page answered as a person would, for its cookie;
    # the page holds the CSRF token.
    status, headers, text = server.call("GET", "/preferences?" + urllib.parse.urlencode({"token": token}), bearer=None)
    nonce = re.search(r"belfry_signin=([^;]+)", " ".join(headers.get_all("Set-Cookie") or []))
    if status != 200 or not nonce:
        sys.exit(f"schemathesis_check: /preferences?token= answered {status} without a sign-in page")
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', text))
    status, headers, _ = server.call("POST", "/web/session", bearer=None, form=fields,
                                     cookie=f"belfry_signin={nonce.group(1)}")
    cookie = re.search(r"belfry_session=([^;]+)", " ".join(headers.get_all("Set-Cookie") or []))
    if status != 303 or not cookie:
        sys.exit(f"schemathesis_check: POST /web/session answered {status} without a session cookie")
    session = cookie.group(1)
    page = expect("opening the inbox page",
                  server.call("GET", "/inbox", bearer=None, cookie=f"belfry_session={session}"), 200)[2]
    csrf = re.search(r'name="_csrf" value="([^"]+)"', page).group(1)
    categories = [c["id"] for c in workspace["categories"]]
    channels = [c["id"] for c in workspace["channels"]]
    tenants = [t["id"] for t in workspace["tenants"]]
    seeded = {
        "credentials": {
            "apiKey": {"bearer": API_KEY}, "userToken": {"bearer": token}, "webSession": {"api_key": session},
        },
        "bindings": {
            # Not the first user: erasing them would end the user token for the rest of the run.
            "path.user_id": [OTHER_USER],
            "path.event_id": [event_id],
            "path.device_id": [device_id],
            "path.notification_id": [notifications[0]["id"]],
            "path.action_id": [action["id"] for action in category["actions"]],
            "path.category": categories,
            "path.channel": channels,
            "path.file": ["belfry.css", "inbox.js"],
            "query.tenant": tenants,
            "body.category": categories,
            "body.tenant": tenants,
            "body.tenants[*]": tenants,
            "body.changes[*].category": categories,
            "body.changes[*].channel": channels,
            "body._csrf": [csrf],
            "body.id": [notifications[0]["id"]],
            "header.X-CSRF-Token": [csrf],
        },
    }
    if with_console:
        # The operator console's session: the API key posted to its sign-in form.
        status, headers, _ = server.call("POST", "/admin/session", bearer=None, form={"api_key": API_KEY})
        cookie = re.search(r"belfry_console=([^;]+)", headers.get("Set-Cookie", ""))
        if status != 303 or not cookie:
            sys.exit(f"schemathesis_check: /admin/session answered {status} without a console cookie")
        seeded["credentials"]["consoleSession"] = {"api_key": cookie.group(1)}
    return seeded


def config(seeded):
    """Schemathesis' configuration: a credential per security scheme, and the seeded values half of the time."""
    lines = [
        # Streams never end: judge the first event, which both streams send at once.
        "max-stream-events = 1",
    ]
    for scheme, fields in seeded["credentials"].items():
        lines.append(f"[auth.openapi.{scheme}]")
        lines += [f"{name} = {json.dumps(value)}" for name, value in fields.items()]
    names = {binding: f"seeded_{index}" for index, binding in enumerate(seeded["bindings"])}
    for binding, values in seeded["bindings"].items():
        lines += [f"[dictionaries.{names[binding]}]", f"values = {json.dumps(values)}"]
    lines.append("[parameters]")
    for binding, name in names.items():
        lines.append(f"{json.dumps(binding)} = {{ dictionary = {json.dumps(name)}, probability = 0.5 }}")
    return "\n".join(lines) + "\n"


def summary(junit_path):
    """Operations (and the stateful run) passed and failed, from Schemathesis' JUnit report."""
    if not junit_path.exists():
        return None
    cases = ElementTree.parse(junit_path).getroot().findall(".//testcase")
    failed = sum(1 for case in cases if case.find("failure") is not None or case.find("error") is not None)
    return len(cases) - failed, failed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", default=str(ROOT / ".build/debug/belfry"), help="the belfry executable")
    parser.add_argument("--spec", default=str(SPEC), help="the OpenAPI document to check")
    parser.add_argument("--max-examples", type=int, default=150, help="test cases per operation and phase")
    parser.add_argument("--seed", type=int, default=20251114)
    # One worker: Schemathesis's workers are threads, and CPython 3.11 before 3.11.8 can fail an
    # `ast.parse` that runs beside another (gh-106905, "AST constructor recursion depth
    # mismatch"), which Hypothesis calls to describe filters: a failure of the tool, not of
    # the API.
    parser.add_argument("--workers", default="1")
    parser.add_argument("st_args", nargs=argparse.REMAINDER, help="after --: more `st run` arguments")
    arguments = parser.parse_args()
    arguments.binary = str(Path(arguments.binary).resolve())
    extra = arguments.st_args[1:] if arguments.st_args[:1] == ["--"] else arguments.st_args
    if importlib.util.find_spec("schemathesis") is None:
        sys.exit("schemathesis_check: Schemathesis is not installed; pip install schemathesis")
    with open(arguments.spec) as file:
        document = yaml.safe_load(file)
    if problems := undocumented(document):
        print("\n".join(problems))
        print(f"schemathesis: 0 passed, {len(problems)} failed (undocumented schemas or examples)")
        return 1
    # `finally` must stop the server on a kill too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    started = time.monotonic()
    directory = tempfile.mkdtemp(prefix="belfry-schemathesis.")
    server = None
    try:
        server = Server(arguments.binary, directory)
        config_path = Path(directory) / "schemathesis.toml"
        config_path.write_text(config(seed(server, with_console="/admin/session" in document["paths"])))
        junit_path = Path(directory) / "junit.xml"
        command = [
            # The same Python's Schemathesis, whatever `st` on the PATH is.
            sys.executable, "-m", "schemathesis.cli", "--config-file", str(config_path), "run", arguments.spec,
            "--url", server.base,
            "--checks", CHECKS, "--phases", "examples,coverage,fuzzing,stateful",
            # Hard-to-generate inputs and a busy machine say nothing about the document.
            "--suppress-health-check", "filter_too_much,too_slow",
            "--max-examples", str(arguments.max_examples), "--seed", str(arguments.seed),
            "--workers", arguments.workers, "--request-timeout", "10", "--generation-database", "none",
            "--no-color", "--report", "junit", "--report-junit-path", str(junit_path), *extra,
        ]
        try:
            code = subprocess.run(command, cwd=directory, timeout=HARD_LIMIT_SECONDS, check=False).returncode
        except subprocess.TimeoutExpired:
            print(f"schemathesis_check: Schemathesis ran past {HARD_LIMIT_SECONDS} s; stopped")
            code = 1
        if code != 0 and (errors := server.errors()):
            print("server errors:\n" + "\n".join(errors[-20:]))
        counts = summary(junit_path) or (0, 1)
        print(f"schemathesis_check: {time.monotonic() - started:.0f} s, seed {arguments.seed}, "
              f"{arguments.max_examples} examples per operation")
        print(f"schemathesis: {counts[0]} passed, {counts[1] if code == 0 else max(counts[1], 1)} failed")
        return 0 if code == 0 else 1
    finally:
        if server:
            server.stop()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
