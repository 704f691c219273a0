// Shared by the pages: the JSON API with the page's user token, and toasts in the live regions.
"use strict";
document.documentElement.classList.add("js");

window.Belfry = (() => {
  const meta = (name) => document.querySelector(`meta[name="${name}"]`)?.content ?? "";
  const csrf = meta("belfry-csrf");
  let token = meta("belfry-token");

  // The page's token lives 15 minutes and reaches this page's routes only; the session cookie
  // (HttpOnly) buys a new one.
  async function refreshToken() {
    const response = await fetch(`/web/session/token?page=${encodeURIComponent(meta("belfry-page"))}`, {
      method: "POST", credentials: "same-origin", headers: { "X-CSRF-Token": csrf },
    });
    if (!response.ok) {
      throw new Error("Your session has ended. Open this page from your app or email again.");
    }
    token = (await response.json()).token;
    return token;
  }

  async function api(path, { method = "GET", body } = {}, retried = false) {
    const headers = { Authorization: `Bearer ${token}` };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let response;
    try {
      response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    } catch {
      throw new Error("Could not reach the server. Check your connection and try again.");
    }
    if (response.status === 401 && !retried) {
      await refreshToken();
      return api(path, { method, body }, true);
    }
    if (response.status === 204) return null;
    const data = await response.json().catch(() => null);
    if (!response.ok) {
      const error = new Error(data?.error?.message ?? `The server answered ${response.status}.`);
      error.code = data?.error?.code;
      error.status = response.status;
      throw error;
    }
    return data;
  }

  // Status toasts go to the polite region; errors to the alert region, with a button to close them.
  function toast(text, { error = false } = {}) {
    const region = document.getElementById(error ? "alerts" : "toasts");
    if (!region) return;
    const item = document.createElement("div");
    item.className = error ? "toast toast-error" : "toast";
    const message = document.createElement("span");
    message.textContent = text;
    item.append(message);
    if (error) {
      const close = document.createElement("button");
      close.type = "button";
      close.textContent = "Dismiss";
      close.addEventListener("click", () => item.remove());
      item.append(close);
    }
    region.append(item);
    setTimeout(() => item.remove(), error ? 10000 : 5000);
  }

  return { api, toast, csrf, token: () => token, refreshToken };
})();

// Signing out of the pages, from any page, unsubscribes this browser from push (seed 000 step 9):
// the form goes on at once; the device's removal and the unsubscribe finish in the background.
document.getElementById("signout")?.addEventListener("submit", () => {
  const device = localStorage.getItem("belfry.push.device");
  localStorage.removeItem("belfry.push.device");
  if (device) {
    fetch(`/v1/me/devices/${encodeURIComponent(device)}`, {
      method: "DELETE", keepalive: true, headers: { Authorization: `Bearer ${Belfry.token()}` },
    });
  }
  navigator.serviceWorker?.getRegistration("/")
    .then((registration) => registration?.pushManager.getSubscription())
    .then((subscription) => subscription?.unsubscribe())
    .catch(() => {});
});
