// Belfry's service worker: shows Web Push messages with their actions, and on a click opens
// the right page, reusing an open Belfry tab when there is one.
"use strict";

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

self.addEventListener("push", (event) => {
  let message = {};
  try {
    message = event.data ? event.data.json() : {};
  } catch {
    message = { body: event.data ? event.data.text() : "" };
  }
  if (message.background) {
    // A background message shows nothing: the badge follows, and open pages refresh.
    event.waitUntil(refreshInBackground(message).catch(() => undefined));
    return;
  }
  const max = self.Notification?.maxActions ?? 2;
  const options = {
    body: message.body ?? "",
    tag: message.notification_id ?? undefined,
    timestamp: Date.now(),
    data: { url: message.url ?? null, notification_id: message.notification_id ?? null },
    actions: (message.actions ?? []).slice(0, max).map((action) => ({ action: action.action, title: action.title })),
  };
  if (message.image_url) options.image = message.image_url;
  const work = [self.registration.showNotification(message.title ?? "New notification", options)];
  if (typeof message.badge === "number" && self.navigator.setAppBadge) {
    work.push(message.badge > 0 ? self.navigator.setAppBadge(message.badge) : self.navigator.clearAppBadge());
  }
  event.waitUntil(Promise.all(work).catch(() => undefined));
});

async function refreshInBackground(message) {
  const work = [];
  if (typeof message.badge === "number" && self.navigator.setAppBadge) {
    work.push(message.badge > 0 ? self.navigator.setAppBadge(message.badge) : self.navigator.clearAppBadge());
  }
  const windows = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
  for (const client of windows) {
    client.postMessage({ type: "belfry.background", notification_id: message.notification_id ?? null });
  }
  await Promise.all(work);
}

// An action goes to the inbox, which records it with the user's session; a plain click opens
// the notification's own address, else the notification in the inbox.
function targetFor(data, action) {
  const inbox = new URL("/inbox", self.location.origin);
  if (action && data.notification_id) {
    inbox.searchParams.set("notification", data.notification_id);
    inbox.searchParams.set("action", action);
    return inbox;
  }
  if (data.url) {
    try {
      return new URL(data.url, self.location.origin);
    } catch {
      // Not an address: fall back to the inbox.
    }
  }
  if (data.notification_id) inbox.hash = `n-${data.notification_id}`;
  return inbox;
}

async function openOrFocus(target) {
  const windows = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
  const exact = windows.find((client) => client.url === target.href);
  if (exact) return exact.focus();
  if (target.origin === self.location.origin) {
    const belfry = windows.find((client) => new URL(client.url).origin === target.origin);
    if (belfry) {
      const focused = await belfry.focus();
      try {
        // Only a tab this worker controls can be navigated; any other gets a new window.
        return await focused.navigate(target.href);
      } catch {
        return self.clients.openWindow(target.href);
      }
    }
  }
  return self.clients.openWindow(target.href);
}

self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  event.waitUntil(openOrFocus(targetFor(event.notification.data ?? {}, event.action)));
});
