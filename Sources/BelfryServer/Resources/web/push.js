// Push on this browser (seed 000 for the web): one switch that asks the browser's permission
// when the user turns it on (never on load), subscribes through the service worker with the
// server's VAPID key, and registers the subscription as a device. The per-type switches show
// only while push is on; blocked and failed subscriptions each get their own explanation.
"use strict";
(() => {
  const section = document.getElementById("push");
  if (!section) return;
  const toggle = document.getElementById("push-toggle");
  const denied = document.getElementById("push-denied");
  const failed = document.getElementById("push-failed");
  const errorText = document.getElementById("push-error");
  const retry = document.getElementById("push-retry");
  const unsupported = document.getElementById("push-unsupported");
  const types = document.getElementById("push-types");
  const status = document.getElementById("push-status");
  // The seed's "subscribed" flag: the id of this browser's device, kept while push is on.
  const DEVICE_KEY = "belfry.push.device";
  const SUBSCRIBE_TIMEOUT_MS = 10000;
  section.hidden = false;

  function setState(state, message = "") {
    section.dataset.state = state;
    const on = state === "on";
    toggle.checked = on || state === "busy";
    toggle.setAttribute("aria-checked", String(toggle.checked));
    toggle.disabled = state === "unsupported" || state === "busy";
    denied.hidden = state !== "denied";
    failed.hidden = state !== "failed";
    unsupported.hidden = state !== "unsupported";
    types.hidden = !on;
    if (state === "failed") errorText.textContent = message;
    status.textContent =
      state === "on" ? "Push notifications are on for this browser."
      : state === "busy" ? "Turning push notifications on…"
      : state === "denied" ? "Push notifications are blocked in this browser's settings."
      : state === "failed" ? "Push notifications could not be turned on."
      : "";
  }

  const supported = "serviceWorker" in navigator && "PushManager" in window && "Notification" in window;
  if (!supported) {
    setState("unsupported");
    return;
  }
  const registration = navigator.serviceWorker.register("/sw.js", { scope: "/" });

  // Steps 1 and 5 of the seed on load, step 6 whenever the page becomes visible again.
  async function recheck() {
    if (section.dataset.state === "busy") return;
    if (Notification.permission === "denied") {
      setState("denied");
      return;
    }
    let subscription = null;
    try {
      subscription = await (await registration).pushManager.getSubscription();
    } catch {
      subscription = null;
    }
    if (Notification.permission === "granted" && subscription && localStorage.getItem(DEVICE_KEY)) {
      setState("on");
    } else if (section.dataset.state !== "failed") {
      setState("off");
    }
  }

  function keyBytes(base64url) {
    const base64 = (base64url + "=".repeat((4 - (base64url.length % 4)) % 4)).replace(/-/g, "+").replace(/_/g, "/");
    return Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
  }

  async function enable() {
    setState("busy");
    let permission = Notification.permission;
    if (permission === "default") {
      try {
        permission = await Notification.requestPermission();
      } catch {
        permission = Notification.permission;
      }
    }
    if (permission !== "granted") {
      setState(permission === "denied" ? "denied" : "off");
      return;
    }
    try {
      const keyResponse = await fetch("/v1/webpush/vapid-public-key");
      const key = await keyResponse.json().catch(() => null);
      if (!keyResponse.ok) throw new Error(key?.error?.message ?? "the server does not send push notifications.");
      await registration;
      const ready = await navigator.serviceWorker.ready;
      // A browser whose push service cannot be reached may never settle; give up after a while.
      const subscription = await Promise.race([
        ready.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: keyBytes(key.public_key) }),
        new Promise((_, reject) => setTimeout(
          () => reject(new Error("the browser's push service did not answer.")), SUBSCRIBE_TIMEOUT_MS)),
      ]);
      const device = await Belfry.api("/v1/me/devices", {
        method: "POST",
        body: { platform: "web_push", subscription: subscription.toJSON(), user_agent: navigator.userAgent },
      });
      localStorage.setItem(DEVICE_KEY, device.id);
      setState("on");
    } catch (error) {
      setState("failed", error?.message || String(error));
    }
  }

  async function disable() {
    setState("busy");
    const device = localStorage.getItem(DEVICE_KEY);
    try {
      const subscription = await (await registration).pushManager.getSubscription();
      if (subscription) await subscription.unsubscribe();
      if (device) await Belfry.api(`/v1/me/devices/${encodeURIComponent(device)}`, { method: "DELETE" });
    } catch (error) {
      if (error.status !== 404) Belfry.toast(`This browser may still get push notifications: ${error.message}`, { error: true });
    }
    localStorage.removeItem(DEVICE_KEY);
    setState("off");
  }

  toggle.addEventListener("change", () => (toggle.checked ? enable() : disable()));
  retry.addEventListener("click", enable);
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible") recheck();
  });
  setState("off");
  recheck();
})();
