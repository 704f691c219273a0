// The operator console's live feed: the server sends the overview's sections that changed,
// as HTML by element id, and they are swapped in. Without scripts the page is the same, only
// as of its loading.
"use strict";
(() => {
  if (!window.EventSource) return;
  const feed = new EventSource("/admin/live");
  feed.addEventListener("overview", (message) => {
    const sections = JSON.parse(message.data);
    for (const [id, html] of Object.entries(sections)) {
      const target = document.getElementById(id);
      if (!target) continue;
      // An operator on a retry button stays on it when its row comes back.
      const form = target.contains(document.activeElement) ? document.activeElement.closest("form") : null;
      const action = form ? form.getAttribute("action") : null;
      target.innerHTML = html;
      if (action) {
        const again = Array.from(target.querySelectorAll("form")).find((f) => f.getAttribute("action") === action);
        if (again) again.querySelector("button").focus();
      }
    }
    document.body.dataset.liveUpdates = String(Number(document.body.dataset.liveUpdates || 0) + 1);
  });
})();
