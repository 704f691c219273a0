"""The floor for the fan-out benchmark: the same two rows per recipient that Belfry's fan-out
writes (a new user, their notification; the notification is the inbox's delivery, so an
inbox-only event writes no delivery row), into the same tables and indexes
(the schema is copied from the database Belfry just used), 500 recipients per transaction, with
multi-row INSERTs (COPY on PostgreSQL) and time-ordered (version 7) UUID keys. No preference rule, no reading back:
the database's own cost for the rows, which Belfry cannot beat.

SQLite through Python's sqlite3 (WAL, synchronous FULL, foreign keys on, temporary
store in memory, as Belfry runs it); PostgreSQL through
psycopg's COPY, into a fresh database on the same server.
"""
import os
import subprocess
import sqlite3
import time
import uuid

BATCH = 500
CONTENT = ("mention", "enwiki", "New activity", "Someone mentioned you")


def uuid7():
    """A version 7 UUID (RFC 9562): Unix milliseconds, then random bits."""
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    value = (value & ~(0xF << 76)) | (0x7 << 76)
    value = (value & ~(0x3 << 62)) | (0x2 << 62)
    return uuid.UUID(int=value)


def rows(start, count, event_id, now):
    users, notifications = [], []
    for index in range(start, start + count):
        user = uuid7()
        users.append((user, f"floor-{index}", now, now))
        notifications.append((uuid7(), event_id, user) + CONTENT + (None, None, True, now, now))
    return users, notifications


USER_COLUMNS = "id, external_id, created_at, updated_at"
NOTIFICATION_COLUMNS = "id, event_id, user_id, category, tenant, title, body, url, data, in_inbox, created_at, available_at"
EVENT_INSERT = ("INSERT INTO events (id, category, tenant, title, body, state, not_before, recipients, processed, "
                "failures, created_at) VALUES ({p}, {p}, {p}, {p}, {p}, 'done', {p}, 0, 0, 0, {p})")


def insert(cursor, table, columns, values, placeholder):
    width = columns.count(",") + 1
    group = "(" + ", ".join([placeholder] * width) + ")"
    cursor.execute(f"INSERT INTO {table} ({columns}) VALUES " + ", ".join([group] * len(values)),
                   [field for row in values for field in row])


def sqlite_floor(belfry_path, floor_path, recipients):
    """Seconds for `recipients` into a copy of the schema of the SQLite file at `belfry_path`."""
    source = sqlite3.connect(belfry_path)
    schema = [sql for (sql,) in source.execute(
        "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' ORDER BY type DESC")]
    source.close()
    database = sqlite3.connect(floor_path, isolation_level=None)
    database.execute("PRAGMA journal_mode=WAL")
    database.execute("PRAGMA foreign_keys=ON")
    database.execute("PRAGMA temp_store=MEMORY")
    for sql in schema:
        database.execute(sql)
    # Belfry's SQLite driver stores a UUID as its upper-case text.
    blob = lambda value: str(value).upper() if isinstance(value, uuid.UUID) else value
    now = time.time()
    event_id = uuid7()
    database.execute(EVENT_INSERT.format(p="?"), [blob(event_id), *CONTENT[:4], now, now])
    started = time.monotonic()
    for start in range(0, recipients, BATCH):
        users, notifications = rows(start, min(BATCH, recipients - start), event_id, now)
        cursor = database.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        # At most 32 766 bound parameters per statement: 200 notifications, as Belfry does.
        for table, columns, values, size in (("users", USER_COLUMNS, users, 500),
                                             ("notifications", NOTIFICATION_COLUMNS, notifications, 200)):
            for offset in range(0, len(values), size):
                insert(cursor, table, columns, [tuple(blob(v) for v in row) for row in values[offset:offset + size]], "?")
        cursor.execute("COMMIT")
    elapsed = time.monotonic() - started
    database.close()
    return elapsed


def postgres_floor(belfry_url, recipients):
    """Seconds for `recipients` into a fresh database with the schema of the one at `belfry_url`."""
    import psycopg

    admin_url = belfry_url.rsplit("/", 1)[0] + "/postgres"
    name = "belfry_floor"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")
    floor_url = belfry_url.rsplit("/", 1)[0] + "/" + name
    schema = subprocess.run(["pg_dump", "--schema-only", "--no-owner", belfry_url],
                            check=True, capture_output=True, text=True).stdout
    subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", floor_url], input=schema, check=True,
                   capture_output=True, text=True)
    from datetime import datetime, timezone
    now = datetime.now(timezone.utc)
    event_id = uuid7()
    with psycopg.connect(floor_url) as database:
        database.execute(EVENT_INSERT.format(p="%s"), [event_id, *CONTENT[:4], now, now])
        database.commit()
        started = time.monotonic()
        for start in range(0, recipients, BATCH):
            users, notifications = rows(start, min(BATCH, recipients - start), event_id, now)
            # COPY, PostgreSQL's fastest way in: the floor, not what Belfry does.
            with database.cursor() as cursor:
                for table, columns, values in (("users", USER_COLUMNS, users),
                                               ("notifications", NOTIFICATION_COLUMNS, notifications)):
                    with cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                        for row in values:
                            copy.write_row(row)
            database.commit()
        elapsed = time.monotonic() - started
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name}")
    return elapsed
