// The preference center with JS: every control saves on its own, optimistically. Changes wait
// 1 s after the last one (seed 004's debounce), go out as one atomic request for the site
// shown, and a failure puts the controls back and says why.
"use strict";
(() => {
  const form = document.getElementById("preferences-form");
  if (!form) return;
  const tenant = form.dataset.tenant;
  const userTenants = (form.dataset.tenants || "").split(",").filter(Boolean);
  const status = document.getElementById("save-status");
  const DEBOUNCE_MS = 1000;

  const controlsFor = (key) => Array.from(document.querySelectorAll("[data-pref]")).filter((c) => c.dataset.pref === key);
  const keys = () => Array.from(new Set(Array.from(document.querySelectorAll("[data-pref]"), (c) => c.dataset.pref)));

  function read(key) {
    const controls = controlsFor(key);
    if (controls[0].type === "radio") return controls.find((c) => c.checked)?.value;
    return controls[0].checked ? "opt_in" : "opt_out";
  }

  // Shows `value` on every control of `key` (a category channel also appears among the push types).
  function show(key, value) {
    for (const control of controlsFor(key)) {
      if (control.type === "radio") control.checked = control.value === value;
      else control.checked = value === "opt_in";
      if (control.getAttribute("role") === "switch") control.setAttribute("aria-checked", String(control.checked));
    }
    if (key.startsWith("category:")) gate(key.slice("category:".length), value === "opt_in");
  }

  // A category's channel boxes (and its push type) take changes only while the category is on.
  function gate(category, on) {
    for (const control of document.querySelectorAll("[data-pref]")) {
      if (!control.dataset.pref.startsWith(`channel:${category}:`)) continue;
      control.disabled = !on || control.dataset.locked === "true";
    }
  }

  const confirmed = new Map(keys().map((key) => [key, read(key)]));
  const pending = new Map();
  // Keys changed from "push on this browser": a browser's push types apply on every site of the
  // user (seed 000 step 7, as the app's push settings do), not only the one shown.
  const everywhere = new Set();
  let timer = null;
  let inFlight = Promise.resolve();

  function setStatus(text, isError = false) {
    status.textContent = text;
    status.classList.toggle("error", isError);
  }

  function change(key, value) {
    const parts = key.split(":");
    if (parts[0] === "category") return { category: parts[1], preference: value };
    if (parts[0] === "channel") return { category: parts[1], channel: parts[2], preference: value };
    return { channel: parts[1], preference: value };
  }

  function adopt(data) {
    // Confirmed values from the server's answer; controls still waiting to be sent keep theirs.
    const values = new Map();
    for (const section of data.sections ?? []) {
      for (const category of section.subcategories ?? []) {
        values.set(`category:${category.category}`, category.preference);
        for (const channel of category.channels ?? []) {
          values.set(`channel:${category.category}:${channel.channel}`, channel.preference);
        }
      }
    }
    for (const channel of data.channel_preferences ?? []) {
      values.set(`overall:${channel.channel}`, channel.is_restricted ? "required" : "all");
    }
    for (const [key, value] of values) {
      if (!confirmed.has(key)) continue;
      confirmed.set(key, value);
      if (!pending.has(key)) show(key, value);
    }
  }

  async function flush() {
    timer = null;
    const batch = Array.from(pending).filter(([key, value]) => confirmed.get(key) !== value);
    const wide = new Set(everywhere);
    pending.clear();
    everywhere.clear();
    if (batch.length === 0) {
      setStatus("");
      return;
    }
    setStatus("Saving…");
    try {
      const here = batch.filter(([key]) => !wide.has(key));
      const all = batch.filter(([key]) => wide.has(key));
      const sites = Array.from(new Set([tenant, ...userTenants]));
      for (const [part, tenants] of [[here, [tenant]], [all, sites]]) {
        if (part.length === 0) continue;
        const answer = await Belfry.api("/v1/me/preferences/changes", {
          method: "POST",
          body: { tenants, changes: part.map(([key, value]) => change(key, value)) },
        });
        // The site shown comes first in the answer.
        adopt(answer.results[0].preferences);
      }
      if (pending.size === 0) setStatus("Saved.");
    } catch (error) {
      for (const [key] of batch) {
        if (!pending.has(key)) show(key, confirmed.get(key));
      }
      setStatus(`Not saved: ${error.message}`, true);
      Belfry.toast(`Your change was not saved and has been undone. ${error.message}`, { error: true });
    }
  }

  document.addEventListener("change", (event) => {
    const control = event.target;
    if (!(control instanceof HTMLInputElement) || !control.dataset.pref || control.disabled) return;
    const key = control.dataset.pref;
    const value = control.type === "radio" ? control.value : control.checked ? "opt_in" : "opt_out";
    show(key, value);
    pending.set(key, value);
    if (control.closest("#push-types")) everywhere.add(key);
    setStatus("Changes are saved automatically…");
    clearTimeout(timer);
    timer = setTimeout(() => { inFlight = inFlight.then(flush); }, DEBOUNCE_MS);
  });

  // Leaving with changes still waiting: send them now, with keepalive so they outlive the page.
  window.addEventListener("pagehide", () => {
    const batch = Array.from(pending).filter(([key, value]) => confirmed.get(key) !== value);
    if (batch.length === 0) return;
    fetch("/v1/me/preferences/changes", {
      method: "POST", keepalive: true,
      headers: { Authorization: `Bearer ${Belfry.token()}`, "Content-Type": "application/json" },
      body: JSON.stringify({ tenants: [tenant], changes: batch.map(([key, value]) => change(key, value)) }),
    });
  });

  // "Apply to all my sites": this site's editable choices, for each of the user's sites and their defaults.
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (event.submitter?.value !== "all") return;
    clearTimeout(timer);
    await (inFlight = inFlight.then(flush));
    const changes = keys()
      .filter((key) => controlsFor(key).some((c) => !c.disabled))
      .map((key) => change(key, read(key)));
    setStatus("Applying to all your sites…");
    try {
      await Belfry.api("/v1/me/preferences/changes", {
        method: "POST",
        body: { tenants: Array.from(new Set([tenant, ...userTenants])), defaults: true, changes },
      });
      setStatus("Applied to all your sites.");
    } catch (error) {
      setStatus(`Not applied: ${error.message}`, true);
      Belfry.toast(`Your choices were not copied to your other sites. ${error.message}`, { error: true });
    }
  });
})();
