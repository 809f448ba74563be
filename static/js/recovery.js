// The recovery page's submit through the recover API (templates/runs/recovery.html), a static
// file as the Content-Security-Policy allows no inline script (issue 40 item 2).
// Submit through the recover API, keeping the pending request in this tab (R15.5): it is
// stored before sending, so a lost response can be answered by resubmitting the very same
// request (same plan hash, cells and key). Nothing is retried automatically.
(() => {
  const form = document.getElementById("recovery-form");
  if (!form || !window.fetch || !window.sessionStorage) return;  // the plain form still works
  const run = form.dataset.run;
  const storeKey = "srbench:recovery-pending:" + run;
  const pendingBox = document.getElementById("recovery-pending");
  const result = document.getElementById("recovery-result");
  const csrf = form.querySelector("input[name=csrfmiddlewaretoken]").value;
  const childUrl = (id) => form.dataset.runUrl.replace(/0\/$/, id + "/");
  const newKey = () => (window.crypto && crypto.randomUUID) ? crypto.randomUUID() : form.elements.idempotency_key.value;

  const load = () => { try { return JSON.parse(sessionStorage.getItem(storeKey)); } catch (e) { return null; } };
  const say = (html) => { result.hidden = false; result.innerHTML = html; };
  const showPending = (on) => { pendingBox.hidden = !on; };

  const send = async (pending) => {
    say("Submitting…");
    let response;
    try {
      response = await fetch(form.dataset.api, {
        method: "POST",
        credentials: "same-origin",
        headers: {"Content-Type": "application/json", "X-CSRFToken": csrf, "Idempotency-Key": pending.idempotency_key},
        body: JSON.stringify({
          plan_sha256: pending.plan_sha256, mode: pending.mode,
          selected_cells: pending.selected_cells, acknowledge_new_attempt: pending.acknowledge_new_attempt,
          confirm_judge_cost: pending.confirm_judge_cost,  // judge_only only; undefined is left out
        }),
      });
    } catch (e) {
      // The request may or may not have reached the server: keep it for a resubmission.
      result.hidden = true;
      showPending(true);
      return;
    }
    let body = {};
    try { body = await response.json(); } catch (e) { /* an HTML error page */ }
    if (response.ok) {
      sessionStorage.removeItem(storeKey);
      showPending(false);
      const a = document.createElement("a");
      a.href = childUrl(body.id); a.id = "child-run-link"; a.textContent = "run #" + body.id;
      result.hidden = false; result.textContent = response.status === 201 ? "Recovery run created: " : "This recovery was already created: ";
      result.appendChild(a);
      for (const id of ["recovery-submit", "judge-only-submit"]) { const b = document.getElementById(id); if (b) b.disabled = true; }
      // The list of this run's recovery runs, re-read so it names the new one.
      fetch(window.location.href, {credentials: "same-origin"})
        .then((r) => r.ok ? r.text() : Promise.reject(r.status))
        .then((html) => {
          const fresh = new DOMParser().parseFromString(html, "text/html").getElementById("recovery-children");
          const shown = document.getElementById("recovery-children");
          if (fresh && shown) shown.replaceWith(fresh);
        })
        .catch(() => { /* the link above still names the new run */ });
    } else if (response.status >= 500) {
      result.hidden = true;
      showPending(true);  // the server failed: whether anything was created is unknown
    } else {
      // A refusal: nothing was created with this request; forget it.
      sessionStorage.removeItem(storeKey);
      showPending(false);
      result.hidden = false;
      result.textContent = "Nothing was created: " + (body.error || ("HTTP " + response.status));
    }
  };

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (load()) { showPending(true); return; }  // one pending request per run and tab
    const cells = Array.from(form.querySelectorAll("input[name=cell]:checked")).map((c) => Number(c.value));
    const ack = form.elements.acknowledge_new_attempt;
    const judgeCost = form.elements.confirm_judge_cost;
    const pending = {
      run: Number(run),
      plan_sha256: form.dataset.planSha256,
      mode: form.dataset.mode,
      selected_cells: cells.length ? cells : null,
      acknowledge_new_attempt: ack ? ack.checked : false,
      confirm_judge_cost: judgeCost && judgeCost.checked ? judgeCost.value : undefined,
      idempotency_key: newKey(),  // generated once for this request, then reused
    };
    if (pending.mode === "failed" && !cells.length) { say("Tick at least one failed cell to try again."); return; }
    sessionStorage.setItem(storeKey, JSON.stringify(pending));  // stored before sending
    send(pending);
  });
  // Judge only (issue 34): the judge-only plan whose hash and quote this page shows, all its
  // cells, the quoted worst case confirmed; the same pending-request rule as above.
  const judgeForm = document.getElementById("judge-only-form");
  if (judgeForm) judgeForm.addEventListener("submit", (event) => {
    event.preventDefault();
    if (load()) { showPending(true); return; }
    const pending = {
      run: Number(run),
      plan_sha256: judgeForm.dataset.planSha256,
      mode: "judge_only",
      selected_cells: null,
      acknowledge_new_attempt: false,
      confirm_judge_cost: judgeForm.dataset.worst,
      idempotency_key: newKey(),
    };
    sessionStorage.setItem(storeKey, JSON.stringify(pending));
    send(pending);
  });
  document.getElementById("recovery-resubmit").addEventListener("click", () => { const p = load(); if (p) send(p); });
  document.getElementById("recovery-forget").addEventListener("click", () => { sessionStorage.removeItem(storeKey); showPending(false); });
  if (load()) showPending(true);
})();
