// The inbox with JS: buttons act in place, new notifications arrive live from the stream with a
// toast, the bell badge and the tab title follow the unread count, and older pages load as
// the reader scrolls.
"use strict";
(() => {
  const list = document.getElementById("inbox-list");
  if (!list) return;
  const filter = list.dataset.filter;
  const empty = document.getElementById("inbox-empty");
  const badge = document.getElementById("bell-badge");
  const titleElement = document.getElementById("page-title");
  const baseTitle = titleElement.dataset.title;

  function setUnread(count) {
    badge.dataset.count = String(count);
    badge.hidden = count === 0;
    badge.querySelector(".badge-count").textContent = count > 99 ? "99+" : String(count);
    document.title = `${count > 0 ? `(${count}) ` : ""}${baseTitle} · Belfry`;
  }

  const localTime = (iso) =>
    new Date(iso).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
  for (const time of list.querySelectorAll("time[datetime]")) time.textContent = localTime(time.dateTime);

  function button(op, label, className, describedBy) {
    const element = document.createElement("button");
    element.type = "submit";
    element.name = "op";
    element.value = op;
    element.className = className;
    element.textContent = label;
    if (describedBy) element.setAttribute("aria-describedby", describedBy);
    return element;
  }

  const tenantNames = JSON.parse(list.dataset.tenants || "{}");

  // As the server's LanguageTag.isRightToLeft.
  function isRightToLeft(tag) {
    const parts = tag.toLowerCase().replaceAll("_", "-").split("-");
    if (parts.some((part) => ["arab", "hebr", "thaa", "syrc", "nkoo", "adlm", "rohg"].includes(part))) return true;
    return ["ar", "he", "iw", "fa", "ur", "ps", "sd", "ug", "yi", "dv", "ckb"].includes(parts[0]);
  }

  // The same markup as the server's NotificationCenterPage.item.
  function render(item) {
    const id = item.id.toLowerCase();
    const unread = !item.read_at;
    const li = document.createElement("li");
    li.id = `n-${id}`;
    li.className = unread ? "notification unread" : "notification";
    li.dataset.id = id;
    li.dataset.category = item.category;
    const article = document.createElement("article");
    article.setAttribute("aria-labelledby", `n-${id}-title`);
    const heading = document.createElement("h2");
    heading.id = `n-${id}-title`;
    heading.className = "notification-title";
    // Text from a template variant is in its language, which may run right to left.
    const direction = item.locale ? (isRightToLeft(item.locale) ? "rtl" : "ltr") : null;
    if (item.locale) {
      heading.lang = item.locale;
      heading.dir = direction;
    }
    const label = document.createElement("span");
    label.className = "unread-label visually-hidden";
    label.textContent = unread ? "Unread: " : "";
    heading.append(label);
    if (item.url && /^(https?:\/\/|\/)/.test(item.url)) {
      const link = document.createElement("a");
      link.href = item.url;
      link.className = "notification-link";
      link.textContent = item.title;
      heading.append(link);
    } else {
      heading.append(document.createTextNode(item.title));
    }
    const body = document.createElement("p");
    body.className = "notification-body";
    body.textContent = item.body;
    if (item.locale) {
      body.lang = item.locale;
      body.dir = direction;
    }
    const meta = document.createElement("p");
    meta.className = "notification-meta";
    const time = document.createElement("time");
    time.dateTime = item.created_at;
    time.textContent = localTime(item.created_at);
    meta.append(`${tenantNames[item.tenant] ?? item.tenant} · `, time);
    const form = document.createElement("form");
    form.className = "notification-actions";
    form.method = "post";
    form.action = "/inbox";
    for (const [name, value] of [["_csrf", Belfry.csrf], ["id", id]]) {
      const input = document.createElement("input");
      input.type = "hidden";
      input.name = name;
      input.value = value;
      form.append(input);
    }
    for (const action of item.actions ?? []) {
      const element = button(`action:${action.id}`, action.title, action.destructive ? "action destructive" : "action");
      element.dataset.action = action.id;
      form.append(element);
    }
    const describedBy = `n-${id}-title`;
    // A category's own "Mark as read" action marks read too: one button, not two.
    const ownMarkRead = (item.actions ?? []).some((action) => action.title.toLowerCase() === "mark as read");
    if (!item.archived_at) {
      if (!(unread && ownMarkRead)) {
        form.append(button(unread ? "read" : "unread", unread ? "Mark as read" : "Mark as unread", "mark", describedBy));
      }
      form.append(button("archive", "Archive", "archive", describedBy));
    } else {
      form.append(button("unarchive", "Move to inbox", "archive", describedBy));
    }
    article.append(heading, body, meta, form);
    li.append(article);
    return li;
  }

  function belongsHere(item) {
    if (filter === "archived") return !!item.archived_at;
    if (item.archived_at) return false;
    return filter !== "unread" || !item.read_at;
  }

  function place(item, { arrived = false } = {}) {
    const existing = document.getElementById(`n-${item.id.toLowerCase()}`);
    if (!belongsHere(item)) {
      existing?.remove();
    } else if (existing) {
      const focusedOp = existing.contains(document.activeElement) ? document.activeElement.value : null;
      const fresh = render(item);
      existing.replaceWith(fresh);
      // Keep keyboard focus on the replaced item's matching button (mark read toggles to unread).
      if (focusedOp) {
        const next = fresh.querySelector(`button[value="${focusedOp}"]`) ?? fresh.querySelector("button.mark");
        next?.focus();
      }
    } else if (arrived) {
      const element = render(item);
      element.classList.add("arrived");
      list.prepend(element);
    }
    empty.hidden = list.children.length > 0;
  }

  async function perform(id, op) {
    if (op.startsWith("action:")) {
      const action = op.slice(7);
      const answer = await Belfry.api(
        `/v1/me/notifications/${encodeURIComponent(id)}/actions/${encodeURIComponent(action)}`, { method: "POST" });
      place(answer.notification);
      const title = answer.notification.actions.find((a) => a.id === action)?.title ?? action;
      Belfry.toast(`“${title}” done.`);
    } else {
      place(await Belfry.api(`/v1/me/notifications/${encodeURIComponent(id)}/${op}`, { method: "POST" }));
    }
  }

  // The stream brings new counts after each change; while it is down, ask for them.
  async function refreshCounts() {
    if (document.body.dataset.stream === "open") return;
    setUnread((await Belfry.api("/v1/me/notifications/counts")).unread);
  }

  list.addEventListener("submit", async (event) => {
    event.preventDefault();
    const form = event.target;
    const op = event.submitter?.value;
    if (!op) return;
    try {
      await perform(form.elements.id.value, op);
      await refreshCounts();
    } catch (error) {
      Belfry.toast(`That did not work: ${error.message}`, { error: true });
    }
  });

  // Following a notification's link reads it.
  list.addEventListener("click", (event) => {
    const link = event.target.closest("a.notification-link");
    if (!link) return;
    const item = link.closest(".notification");
    if (!item.classList.contains("unread")) return;
    fetch(`/v1/me/notifications/${item.dataset.id}/read`, {
      method: "POST", keepalive: true, headers: { Authorization: `Bearer ${Belfry.token()}` },
    });
  });

  const readAll = document.getElementById("read-all");
  readAll?.form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const answer = await Belfry.api("/v1/me/notifications/read-all", { method: "POST" });
      for (const element of list.querySelectorAll(".notification.unread")) {
        element.classList.remove("unread");
        element.querySelector(".unread-label").textContent = "";
        const mark = element.querySelector("button.mark");
        if (mark) { mark.value = "unread"; mark.textContent = "Mark as unread"; }
        if (filter === "unread") element.remove();
      }
      empty.hidden = list.children.length > 0;
      setUnread(answer.counts.unread);
      Belfry.toast(answer.updated === 1 ? "1 notification marked as read." : `${answer.updated} notifications marked as read.`);
    } catch (error) {
      Belfry.toast(`That did not work: ${error.message}`, { error: true });
    }
  });

  // Older pages as the reader nears the end; the link stays a button for keyboards and no-JS.
  const more = document.getElementById("inbox-more");
  let loading = false;
  async function loadMore() {
    if (!more || loading || !more.dataset.cursor) return;
    loading = true;
    try {
      const status = filter === "archived" ? "archived" : filter === "unread" ? "unread" : "all";
      const page = await Belfry.api(
        `/v1/me/notifications?limit=20&status=${status}&cursor=${encodeURIComponent(more.dataset.cursor)}`);
      for (const item of page.notifications) {
        if (!document.getElementById(`n-${item.id.toLowerCase()}`)) list.append(render(item));
      }
      if (page.next_cursor) more.dataset.cursor = page.next_cursor;
      else more.remove();
    } catch (error) {
      Belfry.toast(`Older notifications could not be loaded: ${error.message}`, { error: true });
    } finally {
      loading = false;
    }
  }
  if (more) {
    more.addEventListener("click", (event) => { event.preventDefault(); loadMore(); });
    if ("IntersectionObserver" in window) {
      new IntersectionObserver((entries) => {
        if (entries.some((entry) => entry.isIntersecting)) loadMore();
      }, { rootMargin: "200px" }).observe(more);
    }
  }

  // Live updates. EventSource cannot send headers, so the page's token goes in the address;
  // the stream ends when that token expires, and a new token opens it again.
  let source = null;
  let retryDelay = 1000;
  function connect() {
    source = new EventSource(`/v1/me/stream?token=${encodeURIComponent(Belfry.token())}`);
    source.addEventListener("open", () => { retryDelay = 1000; document.body.dataset.stream = "open"; });
    source.addEventListener("counts", (event) => setUnread(JSON.parse(event.data).unread));
    source.addEventListener("notification.created", (event) => {
      const item = JSON.parse(event.data);
      place(item, { arrived: true });
      Belfry.toast(`New notification: ${item.title}`);
    });
    source.addEventListener("notification.updated", (event) => place(JSON.parse(event.data)));
    // The stream ends when its token expires: open it again at once with a new one.
    source.addEventListener("token_expired", async () => {
      source.close();
      try { await Belfry.refreshToken(); } catch { /* the next round of the error handler retries */ }
      connect();
    });
    source.addEventListener("error", () => {
      // CONNECTING: the browser retries by itself. CLOSED: refused (an expired token, say).
      document.body.dataset.stream = source.readyState === EventSource.CLOSED ? "closed" : "connecting";
      if (source.readyState !== EventSource.CLOSED) return;
      setTimeout(async () => {
        try { await Belfry.refreshToken(); } catch { /* retried on the next round */ }
        connect();
      }, retryDelay);
      retryDelay = Math.min(retryDelay * 2, 30000);
    });
  }
  connect();

  // A notification action chosen in a system notification arrives as ?notification=…&action=…
  const params = new URLSearchParams(location.search);
  if (params.get("notification") && params.get("action")) {
    history.replaceState(null, "", "/inbox");
    perform(params.get("notification"), `action:${params.get("action")}`).catch((error) =>
      Belfry.toast(`That did not work: ${error.message}`, { error: true }));
  }
})();
