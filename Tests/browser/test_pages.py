"""Belfry's web pages in a real browser: a real `belfry serve` (SQLite in a temporary
directory, the demo workspace, a free loopback port) driven through Debian's headless
Chromium with chromium-driver and Selenium.

Run with `python3 -m unittest discover -s Tests/browser -v` (scripts/test does, after
`swift test`). BELFRY_BINARY names the `belfry` executable (default: the debug build).
BELFRY_SCREENSHOTS=<dir> also writes the screenshots docs/web-pages.md shows there.
"""
import json
import os
import pathlib
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import Select, WebDriverWait

ROOT = pathlib.Path(__file__).resolve().parents[2]
WAIT = 15  # seconds for any condition; the debounce is 1 s


def belfry_binary():
    if os.environ.get("BELFRY_BINARY"):
        return os.environ["BELFRY_BINARY"]
    bin_path = subprocess.run(
        ["swift", "build", "--show-bin-path"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()
    binary = os.path.join(bin_path, "belfry")
    if not os.path.exists(binary):
        subprocess.run(["swift", "build", "--product", "belfry"], cwd=ROOT, check=True)
    return binary


def axe_source():
    """axe-core as bundled by the axe-core-python wheel (there is no npm here)."""
    import axe_core_python

    return (pathlib.Path(axe_core_python.__file__).parent / "axe.min.js").read_text()


class Server:
    """`belfry serve` on a free port, with its own SQLite file, stopped at the end."""

    def __init__(self, environment=None):
        self.directory = tempfile.mkdtemp(prefix="belfry-browser-")
        self.database = os.path.join(self.directory, "belfry.sqlite")
        self.api_key = "browser-test-" + secrets.token_hex(16)
        self.binary = belfry_binary()
        self.environment = {
            **os.environ,
            "BELFRY_API_KEY": self.api_key,
            "BELFRY_VAPID_SUBJECT": "mailto:browser-tests@example.org",
            # Email configured (to a relay nobody answers), so that the pages offer the channel:
            # they show only channels the server can deliver.
            "BELFRY_SMTP_URL": "smtp://127.0.0.1:9?tls=none",
            "BELFRY_EMAIL_FROM": "Belfry <notify@example.org>",
            # Every test signs in from 127.0.0.1: more than one address's default share a minute.
            "BELFRY_RATE_LIMITS": "public=1000/min,signin=100/min",
            "BELFRY_LOG_LEVEL": "warning",
            **(environment or {}),
        }
        self.process = subprocess.Popen(
            [self.binary, "serve", "--hostname", "127.0.0.1", "--port", "0", "--database", self.database],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.environment,
        )
        self.log = []
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        self.base = None
        for line in self.process.stdout:
            match = re.search(r"Belfry listening on (http://\S+)", line)
            if match:
                self.base = match.group(1)
                break
        if self.base is None:
            self.stop()
            raise RuntimeError("belfry serve did not start:\n" + "".join(self.log))
        threading.Thread(target=lambda: [None for _ in self.process.stdout], daemon=True).start()

    def _drain_stderr(self):
        for line in self.process.stderr:
            self.log.append(line)

    def request(self, method, path, body=None, token=None):
        headers = {"Authorization": f"Bearer {token or self.api_key}"}
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                text = response.read().decode()
                return response.status, json.loads(text) if text else None
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read().decode() or "null")

    def user(self, user_id, tenants=("enwiki", "dewiki")):
        status, _ = self.request("PUT", f"/v1/users/{user_id}", {"tenants": list(tenants)})
        assert status in (200, 201), status
        status, grant = self.request("POST", f"/v1/users/{user_id}/tokens")
        assert status in (200, 201), (status, grant)
        return grant["token"]

    def preferences(self, token, tenant="enwiki"):
        status, data = self.request("GET", f"/v1/me/preferences?tenant={tenant}", token=token)
        assert status == 200, (status, data)
        return data

    def send(self, user_id, title, category="mention", body="Someone mentioned you."):
        status, answer = self.request("POST", "/v1/events", {
            "category": category, "tenant": "enwiki", "recipients": [user_id],
            "content": {"title": title, "body": body, "url": "https://en.wikipedia.org/wiki/Talk:Belfry"},
        })
        assert status == 202, (status, answer)
        # Fan-out is asynchronous: wait until the notification is in the inbox.
        deadline = time.monotonic() + WAIT
        while True:
            status, event = self.request("GET", f"/v1/events/{answer['event_id']}")
            if event.get("state") == "done":
                return answer["event_id"]
            assert time.monotonic() < deadline, f"the event was not fanned out: {event}"
            time.sleep(0.05)

    def run(self, *arguments):
        return subprocess.run(
            [self.binary, *arguments, "--database", self.database], env=self.environment,
            check=True, capture_output=True, text=True,
        ).stdout.strip()

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
        shutil.rmtree(self.directory, ignore_errors=True)


def chromium(javascript=True):
    options = webdriver.ChromeOptions()
    for path in ("/usr/bin/chromium", "/usr/bin/chromium-browser"):
        if os.path.exists(path):
            options.binary_location = path
            break
    options.add_argument("--headless=new")
    options.add_argument("--no-sandbox")
    options.add_argument("--disable-dev-shm-usage")
    options.add_argument("--window-size=1100,1400")
    if not javascript:
        options.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
    driver_path = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver_path))


def category_preference(data, category):
    for section in data["sections"]:
        for item in section.get("subcategories") or []:
            if item["category"] == category:
                return item
    raise KeyError(category)


class PagesTestCase(unittest.TestCase):
    server = None
    driver = None

    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.driver = chromium()

    @classmethod
    def tearDownClass(cls):
        if cls.driver:
            cls.driver.quit()
        if cls.server:
            cls.server.stop()

    def wait(self, condition, message=""):
        # While a page is being replaced, Chromium may also answer that a node "does not belong
        # to the document": a transient error like a stale element, and the wait goes on.
        return WebDriverWait(
            self.driver, WAIT, ignored_exceptions=[StaleElementReferenceException, WebDriverException]
        ).until(condition, message)

    def sign_in(self, page, token, driver=None):
        driver = driver or self.driver
        before = driver.get_cookie("belfry_session")
        driver.get(f"{self.server.base}/{page}?token={token}")
        # Nobody is signed in by following a link alone: the page asks first, unless the browser
        # is already signed in as that user.
        if driver.find_element(By.CSS_SELECTOR, "h1").text.startswith("Continue as"):
            driver.find_element(By.ID, "continue").click()
        else:
            self.assertIsNotNone(before)
        # The token is traded for a cookie and leaves the address.
        WebDriverWait(driver, WAIT).until(lambda d: d.current_url == f"{self.server.base}/{page}")
        cookie = driver.get_cookie("belfry_session")
        self.assertIsNotNone(cookie)
        self.assertTrue(cookie["httpOnly"])
        self.assertTrue(cookie["secure"])
        self.assertEqual(cookie["sameSite"], "Lax")

    def find(self, css, driver=None):
        return (driver or self.driver).find_element(By.CSS_SELECTOR, css)

    def axe(self):
        self.driver.execute_script(axe_source())
        result = self.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "axe.run(document, {resultTypes: ['violations']}).then(r => done(r.violations), e => done(String(e)));")
        self.assertIsInstance(result, list, result)
        return [(v["id"], v["help"], [n["target"] for n in v["nodes"]][:5]) for v in result]

    def check_both_schemes(self, path, name=None):
        for scheme in ("light", "dark"):
            self.driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {
                "features": [{"name": "prefers-color-scheme", "value": scheme}]})
            self.driver.get(self.server.base + path)
            self.assertEqual(self.driver.execute_script(
                f"return matchMedia('(prefers-color-scheme: {scheme})').matches"), True)
            with self.subTest(page=path, scheme=scheme):
                self.assertEqual(self.axe(), [])
            shots = os.environ.get("BELFRY_SCREENSHOTS")
            if shots:
                os.makedirs(shots, exist_ok=True)
                height = self.driver.execute_script("return document.documentElement.scrollHeight")
                self.driver.set_window_size(960, min(height, 3200))
                self.driver.save_screenshot(os.path.join(shots, f"{name or path.strip('/')}-{scheme}.png"))
                self.driver.set_window_size(1100, 1400)

    def saved(self):
        self.wait(lambda d: self.find("#save-status").text == "Saved.", "the change was not saved")

    def check_narrow(self, path):
        """The page at a phone's 375 px: nothing wider than the screen, every control on it, no
        axe violation."""
        self.driver.set_window_size(375, 800)
        try:
            self.driver.get(self.server.base + path)
            width = self.driver.execute_script("return document.documentElement.clientWidth")
            scroll = self.driver.execute_script("return document.documentElement.scrollWidth")
            self.assertLessEqual(scroll, width, f"{path} scrolls sideways at 375 px")
            outside = self.driver.execute_script(
                "return Array.from(document.querySelectorAll('button, input, select, a'))"
                ".filter(e => e.offsetParent !== null && e.getBoundingClientRect().right > innerWidth + 1)"
                ".map(e => e.outerHTML.slice(0, 80));")
            self.assertEqual(outside, [], f"{path}: controls off the screen")
            self.assertEqual(self.axe(), [])
        finally:
            self.driver.set_window_size(1280, 1400)


class PreferenceCenterTests(PagesTestCase):
    def test_category_switch_saves_after_the_debounce_and_stays_off_after_reload(self):
        token = self.server.user("ada")
        self.sign_in("preferences", token)
        switch = self.find('input[name="category:mention"]')
        self.assertEqual(switch.get_attribute("role"), "switch")
        self.assertTrue(switch.is_selected())
        self.assertEqual(switch.get_attribute("aria-checked"), "true")
        switch.click()
        # Optimistic: the switch is off at once, and the write waits for the debounce.
        self.assertFalse(switch.is_selected())
        self.assertEqual(switch.get_attribute("aria-checked"), "false")
        self.assertEqual(self.find("#save-status").text, "Changes are saved automatically…")
        self.saved()
        self.assertEqual(category_preference(self.server.preferences(token), "mention")["preference"], "opt_out")
        self.driver.refresh()
        switch = self.find('input[name="category:mention"]')
        self.assertFalse(switch.is_selected())
        self.assertEqual(switch.get_attribute("aria-checked"), "false")

    def test_switch_works_from_the_keyboard(self):
        token = self.server.user("kay")
        self.sign_in("preferences", token)
        switch = self.find('input[name="category:reverted"]')
        self.driver.execute_script("arguments[0].focus()", switch)
        self.assertEqual(self.driver.switch_to.active_element, switch)
        switch.send_keys(Keys.SPACE)
        self.assertFalse(switch.is_selected())
        self.saved()
        self.assertEqual(category_preference(self.server.preferences(token), "reverted")["preference"], "opt_out")

    def test_channel_checkbox_and_overall_radio(self):
        token = self.server.user("grace")
        self.sign_in("preferences", token)
        email = self.find('input[name="channel:mention:email"]')
        self.assertFalse(email.is_selected())
        email.click()
        required = self.find('input[name="overall:email"][value="required"]')
        self.assertFalse(required.is_selected())
        required.click()
        self.saved()
        data = self.server.preferences(token)
        channels = {c["channel"]: c["preference"] for c in category_preference(data, "mention")["channels"]}
        self.assertEqual(channels["email"], "opt_in")
        overall = {c["channel"]: c["is_restricted"] for c in data["channel_preferences"]}
        self.assertTrue(overall["email"])
        self.driver.refresh()
        self.assertTrue(self.find('input[name="channel:mention:email"]').is_selected())
        self.assertTrue(self.find('input[name="overall:email"][value="required"]').is_selected())
        self.assertFalse(self.find('input[name="overall:email"][value="all"]').is_selected())

    def test_only_channels_the_server_delivers_are_offered(self):
        # This server has Web Push and email, no APNs key, no FCM account, and a webhook that is
        # the backend's own.
        token = self.server.user("oli")
        self.sign_in("preferences", token)
        labels = {label.text for label in self.driver.find_elements(By.CSS_SELECTOR, "#category-mention label")}
        self.assertTrue({"In-app inbox", "Browser push", "Email"} <= labels, labels)
        text = self.find("main").text
        for absent in ("iOS push", "Android push", "Integrations", "BELFRY_"):
            self.assertNotIn(absent, text)

    def test_a_category_of_no_section_stands_on_its_own(self):
        token = self.server.user("una")
        self.sign_in("preferences", token)
        unnamed = self.find(".pref-section.unnamed")
        self.assertEqual(unnamed.find_elements(By.CSS_SELECTOR, "h2"), [], "seed 004: no heading for it")
        self.assertIn("New activity digest", unnamed.text)
        self.assertTrue(unnamed.find_element(By.CSS_SELECTOR, 'input[name="category:new-activity-digest"]'))

    def test_a_category_switched_off_disables_its_channels(self):
        token = self.server.user("cat")
        self.sign_in("preferences", token)
        email = self.find('input[name="channel:mention:email"]')
        self.assertTrue(email.is_enabled())
        self.find('input[name="category:mention"]').click()
        self.assertFalse(email.is_enabled(), "off: nothing of the type is sent, whatever the channel says")
        self.saved()
        self.driver.refresh()
        self.assertFalse(self.find('input[name="channel:mention:email"]').is_enabled(), "and after a reload")
        self.find('input[name="category:mention"]').click()
        self.assertTrue(self.find('input[name="channel:mention:email"]').is_enabled())
        # A channel users cannot change stays disabled, category on or off.
        self.assertFalse(self.find('input[name="channel:login-fail:email"]').is_enabled())

    def test_items_users_cannot_change_stay_as_they_are(self):
        token = self.server.user("linus")
        self.sign_in("preferences", token)
        switch = self.find('input[name="category:login-fail"]')
        channel = self.find('input[name="channel:login-fail:email"]')
        for control in (switch, channel):
            self.assertFalse(control.is_enabled())
            self.assertTrue(control.is_selected())
        # The reason is shown and tied to the switch.
        reason = self.find("#" + switch.get_attribute("aria-describedby").split()[-1])
        self.assertIn("can't be turned off", reason.text)
        self.driver.execute_script("arguments[0].click()", switch)
        self.assertTrue(switch.is_selected())
        # Even a control re-enabled by hand is refused by the server, and the page puts it back.
        self.driver.execute_script("arguments[0].disabled = false; arguments[0].click()", switch)
        self.wait(lambda d: "not saved" in self.find("#alerts").text, "no error toast")
        self.wait(lambda d: switch.is_selected(), "the switch was not put back")
        self.assertEqual(switch.get_attribute("aria-checked"), "true")
        self.assertIn("cannot be changed", self.find("#save-status").text)
        self.assertEqual(category_preference(self.server.preferences(token), "login-fail")["preference"], "opt_in")

    def test_tenant_switch_shows_the_other_site(self):
        token = self.server.user("mira")
        self.sign_in("preferences", token)
        options = [o.get_attribute("value") for o in self.driver.find_elements(By.CSS_SELECTOR, "#tenant-select option")]
        self.assertEqual(options, ["enwiki", "dewiki"])
        self.driver.execute_script("document.getElementById('tenant-select').value = 'dewiki'")
        self.find(".tenant-switch button").click()
        self.wait(lambda d: d.current_url.endswith("/preferences?tenant=dewiki"))
        self.assertIn("German Wikipedia", self.find(".lede").text)
        self.find('input[name="category:edit-thank"]').click()
        self.saved()
        self.assertEqual(
            category_preference(self.server.preferences(token, "dewiki"), "edit-thank")["preference"], "opt_out")
        self.assertEqual(
            category_preference(self.server.preferences(token, "enwiki"), "edit-thank")["preference"], "opt_in")
        # "Apply to all my sites" copies this site's choices to enwiki too.
        self.find("#apply-all").click()
        self.wait(lambda d: self.find("#save-status").text == "Applied to all your sites.")
        self.assertEqual(
            category_preference(self.server.preferences(token, "enwiki"), "edit-thank")["preference"], "opt_out")

    def test_signed_link_from_the_command_line_signs_in(self):
        self.server.user("nora")
        link = self.server.run("link", "--user", "nora", "--page", "preferences", "--expires", "1h",
                               "--base-url", self.server.base)
        self.assertIn("/preferences?link=", link)
        driver = chromium()
        try:
            driver.get(link)
            self.assertIn("Continue as nora?", driver.find_element(By.CSS_SELECTOR, "h1").text)
            driver.find_element(By.ID, "continue").click()
            WebDriverWait(driver, WAIT).until(lambda d: d.current_url == f"{self.server.base}/preferences")
            self.assertIn("nora", driver.find_element(By.CSS_SELECTOR, ".user").text)
            driver.get(link.replace("/preferences?", "/inbox?"))
            self.assertIn("This link is for another page.", driver.find_element(By.CSS_SELECTOR, "main").text)
        finally:
            driver.quit()


class NoScriptTests(PagesTestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.driver = chromium(javascript=False)

    def test_plain_form_saves_on_submit(self):
        token = self.server.user("ada")
        self.sign_in("preferences", token)
        self.assertNotIn("js", self.find("html").get_attribute("class") or "")
        self.find('input[name="category:mention"]').click()
        self.find('input[name="channel:reverted:email"]').click()
        self.find('input[name="overall:email"][value="required"]').click()
        self.find("button.save-button").click()
        self.wait(lambda d: d.current_url == f"{self.server.base}/preferences?tenant=enwiki&saved=tenant",
                  "the form did not save")
        self.assertEqual(self.find(".flash").text, "Saved.")
        self.driver.get(f"{self.server.base}/preferences")
        self.assertFalse(self.find('input[name="category:mention"]').is_selected())
        self.assertTrue(self.find('input[name="channel:reverted:email"]').is_selected())
        self.assertTrue(self.find('input[name="overall:email"][value="required"]').is_selected())
        data = self.server.preferences(token)
        self.assertEqual(category_preference(data, "mention")["preference"], "opt_out")
        # Disabled boxes are not in the post; the server leaves those items alone.
        self.assertEqual(category_preference(data, "login-fail")["preference"], "opt_in")

    def test_inbox_buttons_work_without_script(self):
        token = self.server.user("ben")
        self.server.send("ben", "Plain form notification")
        self.sign_in("inbox", token)
        self.assertEqual(self.find("#bell-badge .badge-count").text, "1")
        item = self.find(".notification.unread")
        item.find_element(By.CSS_SELECTOR, 'button[value="read"]').click()
        self.wait(lambda d: not d.find_elements(By.CSS_SELECTOR, ".notification.unread"), "still unread")
        self.assertEqual(self.driver.current_url, f"{self.server.base}/inbox")
        self.assertFalse(self.find("#bell-badge").is_displayed())


class InboxTests(PagesTestCase):
    def test_live_notification_arrives_and_the_badge_drops_when_read(self):
        token = self.server.user("ada")
        self.server.send("ada", "Already there")
        self.sign_in("inbox", token)
        self.assertEqual(self.find("#bell-badge .badge-count").text, "1")
        self.assertTrue(self.driver.title.startswith("(1) Inbox"))
        self.wait(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-stream") == "open",
                  "the stream did not open")
        self.server.send("ada", "Linus mentioned you")
        self.wait(lambda d: any("Linus mentioned you" in e.text
                                for e in d.find_elements(By.CSS_SELECTOR, ".notification.unread")),
                  "the new notification did not appear")
        self.wait(lambda d: "New notification: Linus mentioned you" in self.find("#toasts").text, "no toast")
        self.wait(lambda d: self.find("#bell-badge .badge-count").text == "2", "the badge did not go up")
        self.assertTrue(self.driver.title.startswith("(2) Inbox"))
        newest = self.driver.find_elements(By.CSS_SELECTOR, "#inbox-list > li")[0]
        self.assertIn("Linus mentioned you", newest.text)
        newest.find_element(By.CSS_SELECTOR, 'button[value="read"]').click()
        self.wait(lambda d: self.find("#bell-badge .badge-count").text == "1", "the badge did not drop")
        self.wait(lambda d: d.title.startswith("(1) Inbox"))
        newest = self.driver.find_elements(By.CSS_SELECTOR, "#inbox-list > li")[0]
        self.assertNotIn("unread", newest.get_attribute("class"))
        self.find("#read-all").click()
        self.wait(lambda d: not self.find("#bell-badge").is_displayed(), "the badge did not go away")
        self.assertEqual(self.driver.title, "Inbox · Belfry")
        status, counts = self.server.request("GET", "/v1/me/notifications/counts", token=token)
        self.assertEqual(counts["unread"], 0)

    def test_arabic_notification_reads_right_to_left(self):
        token = self.server.user("amal")
        status, _ = self.server.request("PUT", "/v1/users/amal", {"tenants": ["enwiki", "dewiki"], "locale": "ar"})
        self.assertEqual(status, 200)

        def mention(page):
            # No content: the demo's mention renders from its templates, in Arabic for her.
            status, answer = self.server.request("POST", "/v1/events", {
                "category": "mention", "tenant": "enwiki", "recipients": ["amal"],
                "data": {"actor": "Linus", "page": page}})
            self.assertEqual(status, 202, answer)
            return answer["event_id"]

        mention("Belfry")
        self.wait(lambda d: self.server.request("GET", "/v1/me/notifications/counts", token=token)[1]["unread"] == 1,
                  "the first notification was not fanned out")
        self.sign_in("inbox", token)
        self.wait(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-stream") == "open",
                  "the stream did not open")
        mention("Glocke")  # arrives live: inbox.js builds its markup
        self.wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#inbox-list > li")) == 2, "no live notification")
        for item, page in zip(self.driver.find_elements(By.CSS_SELECTOR, "#inbox-list > li"), ["Glocke", "Belfry"]):
            title = item.find_element(By.CSS_SELECTOR, ".notification-title")
            body = item.find_element(By.CSS_SELECTOR, ".notification-body")
            self.assertIn(f"أشار إليك Linus في {page}", title.text)
            for element in (title, body):
                self.assertEqual(element.get_attribute("lang"), "ar")
                self.assertEqual(element.get_attribute("dir"), "rtl")
                self.assertEqual(self.driver.execute_script(
                    "return getComputedStyle(arguments[0]).direction", element), "rtl")
            # The rest of the page stays in its own language and direction.
            meta = item.find_element(By.CSS_SELECTOR, ".notification-meta")
            self.assertEqual(self.driver.execute_script("return getComputedStyle(arguments[0]).direction", meta), "ltr")
        self.check_both_schemes("/inbox", name="inbox-arabic")

    def test_custom_action_is_recorded(self):
        token = self.server.user("eve")
        self.server.send("eve", "A message on your talk page", category="edit-user-talk")
        self.sign_in("inbox", token)
        item = self.find(".notification.unread")
        item.find_element(By.CSS_SELECTOR, 'button[data-action="reply"]').click()
        self.wait(lambda d: "“Reply” done." in self.find("#toasts").text)
        self.wait(lambda d: not self.find("#bell-badge").is_displayed())

    def test_action_chosen_in_a_system_notification_is_recorded_by_the_inbox(self):
        # Where the service worker sends a click on a notification's action.
        token = self.server.user("ivy")
        self.server.send("ivy", "Someone wrote to you", category="edit-user-talk")
        self.sign_in("inbox", token)
        status, page = self.server.request("GET", "/v1/me/notifications", token=token)
        notification = page["notifications"][0]["id"]
        self.driver.get(f"{self.server.base}/inbox?notification={notification}&action=reply")
        self.wait(lambda d: "“Reply” done." in self.find("#toasts").text, "the action was not recorded")
        self.assertEqual(self.driver.current_url, f"{self.server.base}/inbox")
        status, page = self.server.request("GET", "/v1/me/notifications", token=token)
        self.assertIsNotNone(page["notifications"][0]["read_at"])

    def test_older_notifications_load_on_scroll(self):
        token = self.server.user("otto")
        for index in range(25):
            self.server.send("otto", f"Notification {index:02d}")
        self.sign_in("inbox", token)
        self.assertEqual(len(self.driver.find_elements(By.CSS_SELECTOR, "#inbox-list > li")), 20)
        self.driver.execute_script("window.scrollTo(0, document.body.scrollHeight)")
        self.wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#inbox-list > li")) == 25, "no second page")
        self.wait(lambda d: not d.find_elements(By.ID, "inbox-more"))


class PushTests(PagesTestCase):
    def set_permission(self, setting):
        self.driver.execute_cdp_cmd("Browser.setPermission", {
            "permission": {"name": "notifications"}, "setting": setting, "origin": self.server.base,
        })

    def test_denied_permission_shows_how_to_allow_it(self):
        token = self.server.user("ada")
        self.set_permission("denied")
        self.sign_in("preferences", token)
        self.wait(lambda d: self.find("#push").get_attribute("data-state") == "denied", "not in the denied state")
        self.assertTrue(self.find("#push-denied").is_displayed())
        self.assertIn("blocked", self.find("#push-denied").text)
        self.assertFalse(self.find("#push-toggle").is_selected())
        self.assertFalse(self.find("#push-types").is_displayed())

    def test_permission_change_is_noticed_when_the_page_is_shown_again(self):
        token = self.server.user("ida")
        self.set_permission("prompt")
        self.sign_in("preferences", token)
        self.wait(lambda d: self.find("#push").get_attribute("data-state") == "off")
        self.assertFalse(self.find("#push-denied").is_displayed())
        self.set_permission("denied")
        self.driver.execute_script("document.dispatchEvent(new Event('visibilitychange'))")
        self.wait(lambda d: self.find("#push").get_attribute("data-state") == "denied")

    def test_granted_permission_subscribes_or_offers_a_retry(self):
        # Headless Chromium here has no push service to reach, so subscribing fails; the page
        # must then say so and offer to try again. Where a push service answers, it turns on.
        token = self.server.user("zoe")
        self.set_permission("granted")
        self.sign_in("preferences", token)
        toggle = self.find("#push-toggle")
        self.assertFalse(self.find("#push-types").is_displayed())
        toggle.click()
        WebDriverWait(self.driver, 30).until(
            lambda d: self.find("#push").get_attribute("data-state") in ("failed", "on"), "no outcome")
        state = self.find("#push").get_attribute("data-state")
        if state == "failed":
            self.assertTrue(self.find("#push-retry").is_displayed())
            self.assertNotEqual(self.find("#push-error").text, "")
            self.assertFalse(toggle.is_selected())
            self.assertFalse(self.find("#push-types").is_displayed())
            # "Try again" starts a new attempt.
            self.find("#push-retry").click()
            self.assertEqual(self.find("#push").get_attribute("data-state"), "busy")
            self.assertFalse(self.find("#push-failed").is_displayed())
        else:
            self.assertTrue(self.find("#push-types").is_displayed())
            status, devices = self.server.request("GET", "/v1/me/devices", token=token)
            self.assertEqual(len(devices["devices"]), 1)


class PushSubscribedTests(PagesTestCase):
    """The subscribed path of push on this browser. Chromium here cannot reach a push service,
    so the browser's `PushManager` is replaced, before the page loads, by a stand-in that
    answers like one: it records the `applicationServerKey` it was given and returns a
    subscription with a real P-256 key and auth secret. Everything after it is real: the
    service worker, the page's script, the device API and the server's checks of the keys."""

    STAND_IN = """
    (() => {
      window.__pushCalls = [];
      const b64 = (bytes) => btoa(String.fromCharCode(...new Uint8Array(bytes)))
        .replace(/\\+/g, "-").replace(/\\//g, "_").replace(/=+$/, "");
      // Like a browser, it keeps the subscription across page loads.
      const subscription = () => {
        const keys = JSON.parse(localStorage.getItem("test.push.keys"));
        return {
          endpoint: keys.endpoint,
          toJSON: () => ({ endpoint: keys.endpoint, expirationTime: null, keys: { p256dh: keys.p256dh, auth: keys.auth } }),
          unsubscribe: async () => {
            localStorage.removeItem("test.push.subscribed");
            window.__pushCalls.push({ unsubscribed: true });
            return true;
          },
        };
      };
      PushManager.prototype.subscribe = async function (options) {
        window.__pushCalls.push({ userVisibleOnly: options.userVisibleOnly, key: b64(options.applicationServerKey) });
        localStorage.setItem("test.push.subscribed", "1");
        return subscription();
      };
      PushManager.prototype.getSubscription = async function () {
        return localStorage.getItem("test.push.subscribed") ? subscription() : null;
      };
    })();
    """

    @staticmethod
    def subscription_keys():
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        def b64(data):
            import base64
            return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

        point = ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
        return {
            "endpoint": "https://push.example.test/send/" + secrets.token_hex(8),
            "p256dh": b64(point), "auth": b64(secrets.token_bytes(16)),
        }

    def test_turning_push_on_registers_this_browser_and_shows_the_types(self):
        self.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": self.STAND_IN})
        self.driver.execute_cdp_cmd("Browser.setPermission", {
            "permission": {"name": "notifications"}, "setting": "granted", "origin": self.server.base,
        })
        token = self.server.user("una")
        keys = self.subscription_keys()
        self.sign_in("preferences", token)
        self.driver.execute_script("localStorage.setItem('test.push.keys', arguments[0])", json.dumps(keys))
        self.wait(lambda d: self.find("#push").get_attribute("data-state") == "off")
        self.assertFalse(self.find("#push-types").is_displayed(), "types are hidden while push is off")

        self.find("#push-toggle").click()
        self.wait(lambda d: self.find("#push").get_attribute("data-state") == "on", "push did not turn on")
        self.assertTrue(self.find("#push-types").is_displayed(), "types show once push is on")
        self.assertEqual(self.find("#push-toggle").get_attribute("aria-checked"), "true")

        # The browser was asked with the server's VAPID key, for visible notifications only.
        status, vapid = self.server.request("GET", "/v1/webpush/vapid-public-key")
        self.assertEqual(status, 200)
        calls = self.driver.execute_script("return window.__pushCalls")
        self.assertEqual(calls, [{"userVisibleOnly": True, "key": vapid["public_key"]}])
        # The server has the subscription as this user's device.
        status, listed = self.server.request("GET", "/v1/me/devices", token=token)
        self.assertEqual(status, 200)
        devices = listed["devices"]
        self.assertEqual([(d["platform"], d["endpoint"]) for d in devices], [("web_push", keys["endpoint"])])

        # A push type turned off here is off for this browser on every site of the user (seed 000
        # step 7), not only the one shown.
        self.find("#pt-mention").click()
        self.wait(lambda d: self.find("#save-status").text == "Saved.", "the type was not saved")
        for site in ("enwiki", "dewiki"):
            channels = {c["channel"]: c["preference"]
                        for c in category_preference(self.server.preferences(token, site), "mention")["channels"]}
            self.assertEqual(channels["web_push"], "opt_out", site)

        # Shown again later, the page still knows push is on.
        self.driver.refresh()
        self.wait(lambda d: self.find("#push").get_attribute("data-state") == "on", "not on after reload")

        self.find("#push-toggle").click()
        self.wait(lambda d: self.find("#push").get_attribute("data-state") == "off", "push did not turn off")
        self.assertFalse(self.find("#push-types").is_displayed())
        status, listed = self.server.request("GET", "/v1/me/devices", token=token)
        self.assertEqual(listed["devices"], [], "turning push off removes the device")
        self.assertIn({"unsubscribed": True}, self.driver.execute_script("return window.__pushCalls"))


    def test_signing_out_unsubscribes_this_browser(self):
        self.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": self.STAND_IN})
        self.driver.execute_cdp_cmd("Browser.setPermission", {
            "permission": {"name": "notifications"}, "setting": "granted", "origin": self.server.base,
        })
        token = self.server.user("sol")
        keys = self.subscription_keys()
        self.sign_in("preferences", token)
        self.driver.execute_script("localStorage.setItem('test.push.keys', arguments[0])", json.dumps(keys))
        self.wait(lambda d: self.find("#push").get_attribute("data-state") == "off")
        self.find("#push-toggle").click()
        self.wait(lambda d: self.find("#push").get_attribute("data-state") == "on", "push did not turn on")
        self.assertEqual(len(self.server.request("GET", "/v1/me/devices", token=token)[1]["devices"]), 1)

        self.find("#signout button").click()
        self.wait(lambda d: d.find_element(By.CSS_SELECTOR, "h1").text == "Signed out", "no signed-out page")
        self.assertIsNone(self.driver.get_cookie("belfry_session"))
        # The device is removed in the background (seed 000 step 9).
        self.wait(lambda d: self.server.request("GET", "/v1/me/devices", token=token)[1]["devices"] == [],
                  "the browser's device was not removed")
        self.driver.get(self.server.base + "/preferences")
        self.assertNotEqual(self.find("h1").text, "Notification preferences", "signed out: the page asks first")


class ServiceWorkerTests(PagesTestCase):
    """The service worker's handlers, run in Chromium's JavaScript engine with stand-ins for
    the worker's `registration` and `clients` (no push service can deliver a real push here)."""

    def setUp(self):
        self.sign_in("preferences", self.server.user("sam"))
        loaded = self.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "const script = document.createElement('script'); script.src = '/sw.js';"
            "script.onload = () => done(true); script.onerror = () => done(false);"
            "document.head.append(script);")
        self.assertTrue(loaded)
        self.origin = self.server.base

    def test_push_shows_the_notification_with_its_actions(self):
        shown = self.driver.execute_async_script("""
            const done = arguments[arguments.length - 1];
            const shown = [];
            window.registration = { showNotification: (title, options) => { shown.push({ title, options }); return Promise.resolve(); } };
            const event = new Event("push");
            event.data = { json: () => ({
                title: "Linus mentioned you", body: "On Talk:Belfry", notification_id: "n1",
                url: "https://en.wikipedia.org/wiki/Talk:Belfry",
                actions: [{ action: "view", title: "View" }, { action: "reply", title: "Reply" }, { action: "x", title: "X" }] }) };
            let work = null;
            event.waitUntil = (promise) => { work = promise; };
            window.dispatchEvent(event);
            work.then(() => done(shown));""")
        self.assertEqual(len(shown), 1)
        self.assertEqual(shown[0]["title"], "Linus mentioned you")
        options = shown[0]["options"]
        self.assertEqual(options["body"], "On Talk:Belfry")
        self.assertEqual(options["tag"], "n1")
        self.assertEqual(options["data"], {"url": "https://en.wikipedia.org/wiki/Talk:Belfry", "notification_id": "n1"})
        self.assertGreaterEqual(len(options["actions"]), 1)
        self.assertEqual(options["actions"][0], {"action": "view", "title": "View"})

    def test_background_push_shows_nothing_and_refreshes(self):
        did = self.driver.execute_async_script("""
            const done = arguments[arguments.length - 1];
            const did = { shown: [], posted: [], badges: [] };
            window.registration = { showNotification: (title, options) => { did.shown.push(title); return Promise.resolve(); } };
            window.clients = { matchAll: async () => [{ postMessage: (message) => did.posted.push(message) }] };
            Object.defineProperty(navigator, "setAppBadge", {
                value: async (count) => { did.badges.push(count); }, configurable: true });
            const event = new Event("push");
            event.data = { json: () => ({ background: true, notification_id: "n2", badge: 3, category: "reverted" }) };
            let work = null;
            event.waitUntil = (promise) => { work = promise; };
            window.dispatchEvent(event);
            work.then(() => done(did));""")
        self.assertEqual(did["shown"], [], "a background message is not shown")
        self.assertEqual(did["badges"], [3])
        self.assertEqual(did["posted"], [{"type": "belfry.background", "notification_id": "n2"}])

    def click(self, tabs, data, action="", controlled=True):
        """Runs the notificationclick handler with `tabs` open; answers what it did."""
        return self.driver.execute_async_script("""
            const [tabs, data, action, controlled, done] = arguments;
            const did = { closed: false, focused: [], navigated: [], opened: [] };
            const tab = (url) => ({
                url,
                async focus() { did.focused.push(url); return this; },
                async navigate(target) {
                    if (!controlled) throw new TypeError("not controlled by this worker");
                    did.navigated.push(target); return { url: target };
                },
            });
            window.clients = {
                matchAll: async () => tabs.map(tab),
                openWindow: async (url) => { did.opened.push(url); return { url }; },
            };
            const event = new Event("notificationclick");
            event.action = action;
            event.notification = { data, close() { did.closed = true; } };
            let work = null;
            event.waitUntil = (promise) => { work = promise; };
            window.dispatchEvent(event);
            work.then(() => done(did), (error) => done(String(error)));""", tabs, data, action, controlled)

    def test_click_opens_the_notification_address_when_no_tab_is_open(self):
        did = self.click([], {"url": "https://en.wikipedia.org/wiki/Talk:Belfry", "notification_id": "n1"})
        self.assertTrue(did["closed"])
        self.assertEqual(did["opened"], ["https://en.wikipedia.org/wiki/Talk:Belfry"])
        self.assertEqual(did["focused"], [])

    def test_click_focuses_an_open_belfry_tab_and_shows_the_notification(self):
        did = self.click([f"{self.origin}/preferences"], {"url": None, "notification_id": "n1"})
        self.assertEqual(did["focused"], [f"{self.origin}/preferences"])
        self.assertEqual(did["navigated"], [f"{self.origin}/inbox#n-n1"])
        self.assertEqual(did["opened"], [])

    def test_click_on_an_action_goes_to_the_inbox_that_records_it(self):
        did = self.click([f"{self.origin}/inbox"], {"url": "https://example.org/x", "notification_id": "n1"}, "reply")
        self.assertEqual(did["navigated"], [f"{self.origin}/inbox?notification=n1&action=reply"])

    def test_click_reuses_a_tab_already_at_the_address(self):
        did = self.click([f"{self.origin}/preferences", f"{self.origin}/inbox#n-n2"], {"notification_id": "n2"})
        self.assertEqual(did["focused"], [f"{self.origin}/inbox#n-n2"])
        self.assertEqual(did["navigated"], [])
        self.assertEqual(did["opened"], [])

    def test_click_opens_a_window_when_the_open_tab_cannot_be_navigated(self):
        did = self.click([f"{self.origin}/preferences"], {"notification_id": "n3"}, controlled=False)
        self.assertEqual(did["focused"], [f"{self.origin}/preferences"])
        self.assertEqual(did["opened"], [f"{self.origin}/inbox#n-n3"])


class AccessibilityTests(PagesTestCase):
    def test_keyboard_starts_at_the_skip_link_and_shows_focus(self):
        self.driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
        self.sign_in("preferences", self.server.user("tab"))
        body = self.find("body")
        body.send_keys(Keys.TAB)
        active = self.driver.switch_to.active_element
        self.assertEqual(active.get_attribute("class"), "skip-link")
        self.assertTrue(active.is_displayed())
        active.send_keys(Keys.ENTER)
        self.wait(lambda d: d.switch_to.active_element.get_attribute("id") == "main")
        switch = self.find('input[name="category:mention"]')
        # Reach the switch with the Tab key, so that the browser treats the focus as keyboard focus.
        self.driver.execute_script("arguments[0].focus()", switch)
        self.driver.switch_to.active_element.send_keys(Keys.SHIFT, Keys.TAB)
        self.driver.switch_to.active_element.send_keys(Keys.TAB)
        self.assertEqual(self.driver.switch_to.active_element, switch)
        outline = self.driver.execute_script(
            "const s = getComputedStyle(arguments[0]); return [s.outlineStyle, s.outlineWidth];", switch)
        self.assertNotEqual(outline[0], "none")
        self.assertNotEqual(outline[1], "0px")

    def test_reduced_motion_turns_transitions_off(self):
        self.sign_in("preferences", self.server.user("still"))
        duration = "return getComputedStyle(document.querySelector('input.switch')).transitionDuration"
        self.driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
        self.assertNotEqual(self.driver.execute_script(duration), "0s")
        self.driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {
            "features": [{"name": "prefers-reduced-motion", "value": "reduce"}]})
        self.assertEqual(self.driver.execute_script(duration), "0s")
        self.driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})

    def test_axe_finds_a_planted_violation(self):
        # The check below can fail: an unlabelled field is reported.
        token = self.server.user("axel")
        self.sign_in("preferences", token)
        self.driver.execute_script("document.querySelector('main').append(document.createElement('input'))")
        self.assertIn("label", [violation[0] for violation in self.axe()])

    def test_preference_center_has_no_axe_violations(self):
        token = self.server.user("ada")
        self.sign_in("preferences", token)
        self.check_both_schemes("/preferences")

    def test_pages_fit_a_phone(self):
        token = self.server.user("nia")
        self.server.send("nia", "A message on your talk page", category="edit-user-talk",
                         body="Linus left a message on your talk page with a rather long title to wrap.")
        self.sign_in("preferences", token)
        self.check_narrow("/preferences")
        self.check_narrow("/inbox")

    def test_inbox_has_no_axe_violations(self):
        token = self.server.user("bo")
        self.server.send("bo", "A message on your talk page", category="edit-user-talk",
                         body="Linus left a message on your talk page.")
        self.server.send("bo", "Your edit was reverted", category="reverted", body="Your edit on Belfry was reverted.")
        self.server.send("bo", "Linus mentioned you", body="Linus mentioned you on Talk:Belfry.")
        self.sign_in("inbox", token)
        # The talk message's own "Mark as read" action stands in for the built-in button.
        talk = self.driver.find_elements(By.CSS_SELECTOR, "#inbox-list > li")[-1]
        self.assertEqual(len(talk.find_elements(By.CSS_SELECTOR, 'button[value="read"]')), 0)
        self.driver.find_elements(By.CSS_SELECTOR, '#inbox-list button[value="read"]')[-1].click()
        self.wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".notification.unread")) == 2)
        self.check_both_schemes("/inbox")


class ConsoleTests(PagesTestCase):
    """The operator console at /admin: signed in with an API key, live over server-sent events."""

    def console_sign_in(self, key=None):
        self.driver.get(self.server.base + "/admin")
        field = self.find("#api-key")
        self.assertEqual(field.get_attribute("type"), "password")
        field.send_keys(key or self.server.api_key)
        self.find("form.signin button").click()
        self.wait(expected_conditions.staleness_of(field), "the sign-in form was not sent")

    def live_updates(self):
        return int(self.find("body").get_attribute("data-live-updates") or 0)

    def wait_for_live_feed(self):
        """The feed's first message brings every section; what follows are changes."""
        self.wait(lambda d: self.live_updates() >= 1, "the live feed did not start")

    def database(self, query, *parameters):
        import sqlite3

        with sqlite3.connect(self.server.database, timeout=10) as db:
            rows = db.execute(query, parameters).fetchall()
        db.close()
        return rows

    def kill_webhook_deliveries(self, user):
        """Marks the user's webhook deliveries dead, as if every attempt had failed (that takes hours for real)."""
        self.database(
            "UPDATE deliveries SET status = 'dead', attempts = 8, last_error = 'the webhook answered 503' "
            "WHERE channel = 'webhook' AND user_id = (SELECT id FROM users WHERE external_id = ?)", user)

    def test_sign_in_refuses_a_wrong_key_then_opens_with_the_right_one(self):
        self.driver.delete_all_cookies()
        self.console_sign_in("not-a-key-of-this-server")
        self.assertIn("not one of this server's admin API keys", self.find(".flash-error").text)
        self.assertIsNone(self.driver.get_cookie("belfry_console"))
        self.console_sign_in()
        self.assertEqual(self.driver.current_url, self.server.base + "/admin")
        self.assertEqual(self.find("h1").text, "Overview")
        cookie = self.driver.get_cookie("belfry_console")
        self.assertTrue(cookie["httpOnly"])
        self.assertTrue(cookie["secure"])
        self.assertEqual(cookie["sameSite"], "Strict")
        # A change without the page's CSRF token is refused, even with the cookie.
        status = self.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "fetch('/admin/signout', {method: 'POST', credentials: 'same-origin',"
            " headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: '_csrf=forged'})"
            ".then(r => done(r.status));")
        self.assertEqual(status, 403)
        self.find("form.signout button").click()
        self.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#api-key"), "signing out did not show the sign-in form")

    def test_events_deliveries_and_retrying_the_dead(self):
        self.server.user("dora")
        self.server.send("dora", "Failed login attempts", category="login-fail", body="From an unknown device")
        deadline = time.monotonic() + WAIT
        while self.database("SELECT COUNT(*) FROM deliveries WHERE status IN ('queued', 'running')")[0][0]:
            self.assertLess(time.monotonic(), deadline, "deliveries were not attempted")
            time.sleep(0.1)
        self.kill_webhook_deliveries("dora")
        self.console_sign_in()
        self.wait_for_live_feed()
        dead = int(self.find("#stat-dead").text)
        self.assertGreaterEqual(dead, 1)
        rows = [row for row in self.driver.find_elements(By.CSS_SELECTOR, "#console-dead tbody tr") if "dora" in row.text]
        self.assertEqual(len(rows), 1)
        row = rows[0]
        self.assertIn("webhook", row.text)
        self.assertIn("dora", row.text)
        self.assertIn("the webhook answered 503", row.text)
        # The event's own page: its deliveries, their attempts and last errors.
        row.find_element(By.CSS_SELECTOR, "a").click()
        self.assertTrue(self.find("h1").text.startswith("Event "))
        text = self.find("table.data").text
        self.assertIn("webhook dora dead 8 the webhook answered 503", text)
        self.assertIn("failed: no provider for webhook channels is configured", text, "the attempt log")
        button = self.find('form[action^="/admin/events/"][action$="/retry"] button')
        button.click()
        self.wait(expected_conditions.staleness_of(button), "the retry was not sent")
        self.assertEqual(self.find(".flash").text, "1 delivery queued again.")
        # Queued again, it is attempted at once: no webhook provider here, so it fails for good.
        self.wait(lambda d: "failed" in self.find("table.data").text and "dead" not in self.find("table.data").text
                  or d.refresh(), "the retried delivery was not attempted")
        self.driver.get(self.server.base + "/admin")
        self.wait_for_live_feed()
        self.assertEqual(int(self.find("#stat-dead").text), dead - 1)
        # It shows again, as failed, with why in words and a Retry of its own.
        rows = [row for row in self.driver.find_elements(By.CSS_SELECTOR, "#console-dead tbody tr") if "dora" in row.text]
        self.assertEqual(len(rows), 1)
        self.assertIn("failed", rows[0].text)
        self.assertIn("no provider for webhook channels is configured", rows[0].text)
        self.assertGreaterEqual(int(self.find("#stat-failed").text), 1)
        self.assertTrue(rows[0].find_elements(By.CSS_SELECTOR, 'form[action^="/admin/deliveries/"] button'))

    def test_the_overview_updates_live(self):
        self.console_sign_in()
        self.wait_for_live_feed()
        updates = self.live_updates()
        self.server.user("lively")
        event = self.server.send("lively", "Linus mentioned you", body="Linus mentioned you on Talk:Belfry.").lower()
        # No reload: the feed swaps the events table in.
        self.wait(lambda d: event in self.find("#console-events").text, "the new event did not appear")
        self.assertGreater(self.live_updates(), updates)
        charts = self.driver.find_elements(By.CSS_SELECTOR, "#console-charts svg[role=img]")
        self.assertEqual(len(charts), 2)
        self.assertIn("sent", self.find("#chart-throughput desc").get_attribute("textContent"))

    def test_console_pages_have_no_axe_violations(self):
        self.server.user("axa")
        self.server.send("axa", "Failed login attempts", category="login-fail", body="From an unknown device")
        self.kill_webhook_deliveries("axa")
        self.console_sign_in()
        self.check_both_schemes("/admin", name="console")
        link = self.find("#console-events tbody a").get_attribute("href")
        self.check_both_schemes(link.replace(self.server.base, ""), name="console-event")
        # Previews in English, German and Arabic (right to left) from the sample data.
        self.check_both_schemes("/admin/templates?category=edit-thank", name="console-templates")
        self.assertEqual(len(self.driver.find_elements(By.CSS_SELECTOR, 'dd[lang="ar"][dir="rtl"]')), 2)
        self.driver.delete_cookie("belfry_console")
        self.check_both_schemes("/admin", name="console-sign-in")

    def test_a_test_notification_reaches_the_user_and_shows_its_event(self):
        token = self.server.user("tess")
        self.addCleanup(self.driver.delete_cookie, "belfry_console")
        self.console_sign_in()
        self.find("#test-user").send_keys("tess")
        Select(self.find("#test-category")).select_by_value("mention")
        title = self.find("#test-title")
        title.clear()
        title.send_keys("Is the inbox working?")
        self.find("form.test-form button").click()
        self.wait(lambda d: d.find_element(By.CSS_SELECTOR, "h1").text.startswith("Event "), "no event page")
        self.assertIn("Is the inbox working?", self.find("main").text)
        def inbox():
            return self.server.request("GET", "/v1/me/notifications", token=token)[1]["notifications"]
        self.wait(lambda d: inbox(), "the test notification did not reach the inbox")
        self.assertEqual([n["title"] for n in inbox()], ["Is the inbox working?"])
        _, audit = self.server.request("GET", "/v1/audit")
        self.assertIn("test_notification.sent", [entry["action"] for entry in audit["entries"]])
        # An unknown user is refused, and no user is made for the typo.
        self.driver.get(self.server.base + "/admin")
        self.find("#test-user").send_keys("tesss")
        self.find("form.test-form button").click()
        self.wait(lambda d: "no user" in d.find_element(By.CSS_SELECTOR, "main").text, "no error page")
        self.driver.delete_cookie("belfry_console")

    def test_a_user_page_shows_devices_preferences_and_messages(self):
        self.addCleanup(self.driver.delete_cookie, "belfry_console")
        token = self.server.user("uma")
        status, _ = self.server.request("POST", "/v1/me/devices", {
            "platform": "apns", "token": "ab" * 32, "environment": "production", "authorization": "authorized",
        }, token=token)
        self.assertEqual(status, 201)
        status, _ = self.server.request(
            "PATCH", "/v1/me/preferences/categories/reverted?tenant=enwiki", {"preference": "opt_out"}, token=token)
        self.assertEqual(status, 200)
        self.server.send("uma", "Someone mentioned Uma")
        self.console_sign_in()
        self.find('nav a[href="/admin/users"]').click()
        self.find("#user-id").send_keys("umma")
        self.find("form.search-form button").click()
        self.wait(lambda d: "There is no user" in d.find_element(By.CSS_SELECTOR, "main").text, "no answer")
        self.find("#user-id").send_keys("uma")
        self.find("form.search-form button").click()
        self.wait(lambda d: d.find_element(By.CSS_SELECTOR, "h1").text == "User uma", "no user page")
        main = self.find("main").text
        self.assertIn("apns", main)
        self.assertIn("active", main)
        self.assertIn("off: reverted", main)
        # The push to the iPhone: this server has no APNs key, so it failed, with its attempt.
        rows = self.driver.find_elements(By.CSS_SELECTOR, "main table.data")[-1].find_elements(By.CSS_SELECTOR, "tbody tr")
        self.assertTrue(any("ios_push" in row.text and "failed" in row.text for row in rows), [r.text for r in rows])
        self.assertTrue(any("Someone mentioned Uma" in row.text for row in rows))
        self.check_narrow("/admin/users/uma")

    def test_events_are_searched_by_id_category_and_time_a_page_at_a_time(self):
        self.addCleanup(self.driver.delete_cookie, "belfry_console")
        self.server.user("evan")
        ids = []
        for number in range(27):
            status, answer = self.server.request("POST", "/v1/events", {
                "category": "edit-thank", "recipients": ["evan"], "content": {"title": f"Thanks {number}", "body": "b"}})
            self.assertEqual(status, 202)
            ids.append(answer["event_id"])
        self.console_sign_in()
        self.find('nav a[href="/admin/events"]').click()
        Select(self.find("#event-category")).select_by_value("edit-thank")
        Select(self.find("#event-since")).select_by_value("1h")
        self.find("form.search-form button").click()
        self.wait(lambda d: "category=edit-thank" in d.current_url, "the search did not run")
        first = [a.text for a in self.driver.find_elements(By.CSS_SELECTOR, "#main table.data tbody a")]
        self.assertEqual(len(first), 25)
        self.find("main p a").click()
        self.wait(lambda d: "before=" in d.current_url, "no older page")
        older = [a.text for a in self.driver.find_elements(By.CSS_SELECTOR, "#main table.data tbody a")]
        # No repeats and no gaps across the pages; events accepted in one millisecond keep an
        # order of their own, so the pages are compared as sets.
        self.assertEqual(len(set(first) | set(older)), len(first) + len(older), "no event on two pages")
        self.assertLessEqual({i.lower() for i in ids}, set(first) | set(older), "none left out")
        self.find("#event-id").send_keys(ids[3])
        self.find("form.search-form button").click()
        self.wait(lambda d: d.find_element(By.CSS_SELECTOR, "h1").text == f"Event {ids[3].lower()}", "no event page")
        self.driver.get(self.server.base + "/admin/events?id=not-an-event")
        self.assertIn("There is no event not-an-event.", self.find("main").text)
        self.check_narrow("/admin/events?category=edit-thank")

    def test_console_fits_a_phone(self):
        self.addCleanup(self.driver.delete_cookie, "belfry_console")
        self.server.user("nox")
        self.server.send("nox", "Failed login attempts", category="login-fail", body="From an unknown device")
        self.kill_webhook_deliveries("nox")
        self.console_sign_in()
        self.check_narrow("/admin")
        link = self.find("#console-events tbody a").get_attribute("href")
        self.check_narrow(link.replace(self.server.base, ""))
        self.check_narrow("/admin/keys")
        self.check_narrow("/admin/audit")
        self.driver.delete_cookie("belfry_console")


class EmailTests(PagesTestCase):
    """Email from a real `belfry serve` to aiosmtpd on loopback, and the unsubscribe page it links to."""

    @classmethod
    def setUpClass(cls):
        from aiosmtpd.controller import Controller
        from email import policy
        from email.parser import BytesParser

        cls.received = []

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                cls.received.append(BytesParser(policy=policy.default).parsebytes(envelope.original_content))
                return "250 OK"

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        cls.smtp = Controller(Handler(), hostname="127.0.0.1", port=port)
        cls.smtp.start()
        cls.server = Server({
            "BELFRY_SMTP_URL": f"smtp://127.0.0.1:{port}?tls=none",
            "BELFRY_EMAIL_FROM": "Belfry <notify@example.org>",
        })
        cls.driver = chromium()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        cls.smtp.stop()

    def test_unsubscribe_page_asks_then_turns_the_email_off(self):
        token = self.server.user("eve")
        status, _ = self.server.request("PUT", "/v1/users/eve", {"email": "eve@example.org"})
        self.assertEqual(status, 200)
        status, _ = self.server.request(
            "PATCH", "/v1/me/preferences/categories/mention/channels/email?scope=defaults",
            {"preference": "opt_in"}, token=token)
        self.assertEqual(status, 200)
        self.server.send("eve", "Linus mentioned you")
        deadline = time.monotonic() + WAIT
        while not self.received:
            self.assertLess(time.monotonic(), deadline, "no email arrived")
            time.sleep(0.05)
        message = self.received[0]
        self.assertEqual(message["List-Unsubscribe-Post"], "List-Unsubscribe=One-Click")
        path = re.sub(r"^<https?://[^/]+", "", message["List-Unsubscribe"]).rstrip(">")
        self.assertTrue(path.startswith("/unsubscribe/"), path)

        # Opening the link only asks; both schemes pass axe.
        self.check_both_schemes(path, name="unsubscribe")
        self.assertEqual(self.find("h1").text, "Stop these emails?")
        mention = category_preference(self.server.preferences(token), "mention")
        self.assertEqual([c["preference"] for c in mention["channels"] if c["channel"] == "email"], ["opt_in"])

        self.find("form button").click()
        self.wait(lambda d: d.find_element(By.CSS_SELECTOR, "h1").text == "You will get no more of these emails")
        self.assertEqual(self.axe(), [])
        mention = category_preference(self.server.preferences(token), "mention")
        self.assertEqual(mention["preference"], "opt_in", "the category itself stays on")
        self.assertEqual([c["preference"] for c in mention["channels"] if c["channel"] == "email"], ["opt_out"])
        other = category_preference(self.server.preferences(token, tenant="dewiki"), "mention")
        self.assertEqual([c["preference"] for c in other["channels"] if c["channel"] == "email"], ["opt_in"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
