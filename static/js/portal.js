// The portal's script, loaded by every page (templates/base.html). A static file, not an
// inline <script>: the Content-Security-Policy allows scripts from this server only (issue 40
// item 2), so no page has inline scripts, inline event handlers or htmx filters that need eval.
// Progressive enhancement only: polling itself is htmx markup in the pages.

// A poll marked data-poll-when-visible skips its request while the tab is hidden (it was an
// htmx trigger filter, `[document.visibilityState === 'visible']`, which htmx evaluates with
// eval). htmx fires htmx:confirm before every request; preventing it skips that one request
// and the `every` timer goes on.
document.addEventListener("htmx:confirm", (event) => {
  const el = event.target;
  if (el.matches && el.matches("[data-poll-when-visible]") && document.visibilityState !== "visible") {
    event.preventDefault();
  }
});

// A control marked data-autosubmit submits its form when it changes (was onchange="…").
document.addEventListener("change", (event) => {
  const el = event.target;
  if (el.matches && el.matches("[data-autosubmit]") && el.form) el.form.requestSubmit();
});

// Copy buttons appear only with JavaScript; without it the text is selectable.
const showCopyButtons = (root) => {
  for (const button of root.querySelectorAll("button[data-copy]")) button.hidden = false;
};
document.addEventListener("click", async (event) => {
  const button = event.target.closest && event.target.closest("button[data-copy]");
  const source = button && document.getElementById(button.dataset.copy);
  if (!source) return;
  try { await navigator.clipboard.writeText(source.textContent); button.textContent = "Copied"; }
  catch (error) {
    const range = document.createRange();
    range.selectNodeContents(source);
    const selection = window.getSelection(); selection.removeAllRanges(); selection.addRange(range);
    button.textContent = "Selected: press Ctrl+C";
  }
});
document.addEventListener("htmx:load", (event) => { if (event.target.querySelectorAll) showCopyButtons(event.target); });

document.addEventListener("DOMContentLoaded", () => {
  showCopyButtons(document);
  const body = document.body;
  const notice = document.getElementById("stale-notice");
  let staleSince = null;
  // A poll that fails (network down, timeout, server error) leaves the last good table in
  // place; say since when it is stale. htmx keeps the `every` timer running, so the first
  // successful poll afterwards clears the notice by itself.
  const markStale = (event) => {
    if (!event.target.closest || !event.target.closest("[data-poll]")) return;
    if (staleSince === null) staleSince = new Date();
    body.classList.add("is-stale");
    if (notice) {
      notice.hidden = false;
      notice.textContent = "Connection lost — showing data stale since " + staleSince.toLocaleTimeString() + "; retrying…";
    }
  };
  for (const name of ["htmx:sendError", "htmx:timeout", "htmx:responseError"]) body.addEventListener(name, markStale);
  // Fresh content arriving is what ends staleness. `htmx:load` fires on the swapped-in
  // element while it is in the document; the request's own events fire on the old element,
  // which an outerHTML swap has already detached, so they never reach the body.
  body.addEventListener("htmx:load", (event) => {
    if (!event.target.matches || !event.target.matches("[data-poll]")) return;
    staleSince = null;
    body.classList.remove("is-stale");
    if (notice) { notice.hidden = true; notice.textContent = ""; }
  });
  if (window.htmx) {
    htmx.config.historyRestoreAsHxRequest = false;
    // Swapped-in content gets its hx- triggers when it settles; with htmx's default 20 ms
    // settle delay a change made in between (a filter picked right after Load more) was
    // lost. No styles here transition on settling, so settle at once.
    htmx.config.defaultSettleDelay = 0;
  }

  // An explicit read (Load more, Refresh evidence) that fails swaps nothing, so what was
  // loaded and its cursor stay on screen (R14.3); say so where the element points.
  const readFailed = (event) => {
    const el = event.target.closest && event.target.closest("[data-read-error]");
    const box = el && document.querySelector(el.dataset.readError);
    if (!box) return;
    box.hidden = false;
    box.textContent = new Date().toLocaleTimeString() + ": " + el.dataset.readErrorText;
  };
  for (const name of ["htmx:sendError", "htmx:timeout", "htmx:responseError"]) body.addEventListener(name, readFailed);

  // Elapsed time ticks from the persisted start time, not from completed work (R10.2).
  const format = (s) => {
    s = Math.max(0, Math.floor(s));
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
    return (h ? h + "h " : "") + (h || m ? m + "m " : "") + sec + "s";
  };
  const tick = () => {
    for (const el of document.querySelectorAll("[data-elapsed-from]")) {
      const from = Date.parse(el.dataset.elapsedFrom);
      const until = el.dataset.elapsedUntil ? Date.parse(el.dataset.elapsedUntil) : Date.now();
      // The server's clock, not the browser's: shift by the offset measured at render time.
      const skew = el.dataset.serverNow ? Date.parse(el.dataset.serverNow) - Number(el.dataset.clientNow || Date.now()) : 0;
      if (!el.dataset.clientNow) el.dataset.clientNow = String(Date.now());
      el.textContent = format(((el.dataset.elapsedUntil ? until : Date.now() + skew) - from) / 1000);
    }
  };
  tick();
  setInterval(tick, 1000);

  // A form that changes something for good asks first; yes sends confirm=yes (the server
  // asks on a page of its own when this script did not run).
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) { event.preventDefault(); return; }
      if (!form.querySelector("input[name=confirm]")) {
        const yes = document.createElement("input");
        yes.type = "hidden"; yes.name = "confirm"; yes.value = "yes";
        form.appendChild(yes);
      }
    });
  }

  // The phone-width menu scrolls sideways: a button at each edge where links are hidden says
  // so and scrolls to them, and the current page's link starts in view (issue 35 item 7).
  for (const box of document.querySelectorAll("[data-nav-scroller]")) {
    const nav = box.querySelector("nav");
    const prev = box.querySelector(".nav-more.prev"), next = box.querySelector(".nav-more.next");
    const update = () => {
      const hidden = nav.scrollWidth - nav.clientWidth;
      prev.hidden = !(hidden > 1 && nav.scrollLeft > 1);
      next.hidden = !(hidden > 1 && nav.scrollLeft < hidden - 1);
    };
    const active = nav.querySelector("a.active");
    if (active && nav.scrollWidth > nav.clientWidth) {
      nav.scrollLeft = active.offsetLeft - nav.offsetLeft - (nav.clientWidth - active.offsetWidth) / 2;
    }
    for (const button of [prev, next]) {
      button.addEventListener("click", () => nav.scrollBy({ left: Number(button.dataset.navStep) * nav.clientWidth * 0.7, behavior: "smooth" }));
    }
    nav.addEventListener("scroll", update, { passive: true });
    window.addEventListener("resize", update);
    update();
  }

  // A form's error summary takes the focus, so it is read first; its links move the focus to
  // the field they name (opening a folded section around it).
  const summary = document.getElementById("error-summary");
  if (summary) {
    summary.focus();
    summary.addEventListener("click", (event) => {
      const link = event.target.closest("a[href^='#']");
      const field = link && document.getElementById(link.getAttribute("href").slice(1));
      if (!field) return;
      event.preventDefault();
      const folded = field.closest("details");
      if (folded) folded.open = true;
      field.scrollIntoView({ block: "center" });
      field.focus({ preventScroll: true });
      history.replaceState(null, "", link.getAttribute("href"));
    });
  }

  // "Select all" ticks (or unticks) every enabled box of its group; it is not submitted, so the
  // form sends exactly the boxes ticked when it is submitted. It follows the boxes: unticking
  // one unticks it. Without JavaScript it stays hidden and the boxes are ticked one by one.
  for (const all of document.querySelectorAll("input[data-select-all]")) {
    const boxes = () => document.querySelectorAll("input[name=" + all.dataset.selectAll + "]:not(:disabled)");
    const sync = () => { const list = [...boxes()]; all.checked = list.length > 0 && list.every((b) => b.checked); };
    all.addEventListener("change", () => boxes().forEach((b) => { b.checked = all.checked; }));
    boxes().forEach((b) => b.addEventListener("change", sync));
    sync();
    const label = all.closest("[data-js-only]");
    if (label) label.hidden = false;
  }
});
