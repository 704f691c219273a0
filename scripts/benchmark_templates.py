"""Templates benchmark: fan-out of one audience in five locales, content from the category's
templates against the same fan-out with literal content, in the same run on the same server.

Creates N users (locales de-AT, de, fr, ar and none, in turn) on a fresh SQLite file, then
alternates two rounds each: events of up to 10 000 recipients to `reverted` with literal
`content`, and to `mention`, whose content the demo workspace renders from templates in
English, German and Arabic (the event gives only `data`). Each round waits until every
event's fan-out is done. Prints recipients per second for both, the notifications written per
language, and the ratio templates/literal of the best rounds.

Usage: python3 scripts/benchmark_templates.py --binary .build/release/belfry --database PATH [--recipients N]
"""
import sqlite3
import sys
import time
import uuid

from benchmark_support import arguments, call, start_server, wait_for_fan_out

LOCALES = ["de-AT", "de", "fr", "ar", None]


def create_users(binary, database, count):
    """The users, written straight into the file in the form Belfry writes them (read off one
    user made through the API): 100 000 PUTs would take longer than the benchmark."""
    server, base, _ = start_server(binary, database)
    try:
        call(base, "PUT", "/v1/users/probe", {"locale": "en"})
    finally:
        server.terminate()
        server.wait(timeout=30)
    db = sqlite3.connect(database)
    id_type, created = db.execute(
        "SELECT typeof(id), created_at FROM users WHERE external_id = 'probe'").fetchone()
    rows = []
    for index in range(count):
        user = uuid.uuid4()
        rows.append((user.bytes if id_type == "blob" else str(user).upper(), f"reader-{index}",
                     LOCALES[index % len(LOCALES)], created, created))
    with db:
        db.executemany(
            "INSERT INTO users (id, external_id, locale, created_at, updated_at) VALUES (?, ?, ?, ?, ?)", rows)
    db.close()


def fan_out(base, count, templated, round_number):
    """Sends events to every user; returns the seconds until their fan-out was done."""
    started = time.monotonic()
    events = []
    for offset in range(0, count, 10_000):
        recipients = [f"reader-{offset + i}" for i in range(min(10_000, count - offset))]
        # The same data either way: only where the text comes from differs.
        data = {"actor": "Ada", "page": f"Glocke {round_number}", "excerpt": "Siehe oben"}
        if templated:
            event = {"category": "mention", "recipients": recipients, "data": data}
        else:
            event = {"category": "reverted", "recipients": recipients, "data": data,
                     "content": {"title": f"Ada mentioned you on Glocke {round_number}", "body": "“Siehe oben”"}}
        events.append(call(base, "POST", "/v1/events", event)["event_id"])
    notifications = wait_for_fan_out(base, events)
    if notifications != count:
        sys.exit(f"expected {count} notifications, got {notifications}")
    return time.monotonic() - started


def main():
    args = arguments(("--recipients", int, 100_000))
    if args.database.startswith("postgres"):
        sys.exit("this benchmark writes its users into a SQLite file; give a path")

    create_users(args.binary, args.database, args.recipients)
    server, base, _ = start_server(args.binary, args.database)
    times = {False: [], True: []}
    try:
        for round_number in range(2):
            for templated in (False, True):
                seconds = fan_out(base, args.recipients, templated, round_number)
                times[templated].append(seconds)
                kind = "templates" if templated else "literal  "
                print(f"round {round_number + 1} {kind}: {seconds:.1f} s  ->  "
                      f"{args.recipients / seconds:,.0f} recipients/s")
    finally:
        server.terminate()
        server.wait(timeout=30)
    db = sqlite3.connect(args.database)
    languages = db.execute(
        "SELECT COALESCE(locale, 'default'), COUNT(*) FROM notifications WHERE category = 'mention' "
        "GROUP BY COALESCE(locale, 'default') ORDER BY 1").fetchall()
    db.close()
    print("templated notifications by language: " + ", ".join(f"{tag} {n}" for tag, n in languages))
    literal, templated = min(times[False]), min(times[True])
    print(f"best literal:   {literal:.1f} s  ({args.recipients / literal:,.0f} recipients/s)")
    print(f"best templates: {templated:.1f} s  ({args.recipients / templated:,.0f} recipients/s)")
    print(f"ratio templates/literal: {templated / literal:.2f}")


if __name__ == "__main__":
    main()
