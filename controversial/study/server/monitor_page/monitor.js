/*
 * The researcher's monitor: asks /admin/monitor.json for the study's figures every few seconds, with the admin
 * token as a bearer header, and fills the page in. The token comes from the form or from the link's #fragment
 * (never sent to a server), and is kept in this tab's sessionStorage only. Without a token, or with a wrong
 * one, the page shows the form and no figure. Export buttons download the admin CSVs the same way.
 */
(function () {
  "use strict";

  const KEY = "controversial-study-monitor-token";
  let timer = null;

  const byId = (id) => document.getElementById(id);

  function token() {
    try {
      return window.sessionStorage.getItem(KEY);
    } catch (error) {
      return null;
    }
  }

  function remember(value) {
    try {
      if (value) window.sessionStorage.setItem(KEY, value);
      else window.sessionStorage.removeItem(KEY);
    } catch (error) {
      // storage disabled: the token lives as long as the page
    }
  }

  async function admin(path) {
    const reply = await fetch(path, { headers: { Authorization: `Bearer ${token()}` }, cache: "no-store" });
    if (!reply.ok) {
      let detail = `server replied ${reply.status}`;
      try {
        detail = (await reply.json()).detail || detail;
      } catch (error) {
        // not JSON
      }
      const failure = new Error(detail);
      failure.status = reply.status;
      throw failure;
    }
    return reply;
  }

  function showLogin(message) {
    clearTimeout(timer);
    byId("figures").hidden = true;
    byId("login").hidden = false;
    byId("login-error").textContent = message || "";
  }

  function fill(status) {
    byId("study-label").textContent = status.study;
    byId("measured").textContent = status.measured_utc.replace("T", " ").replace("+00:00", " UTC");
    byId("refresh").textContent = status.refresh_s;
    byId("abandon-minutes").textContent = `${status.abandoned_after_minutes} min`;
    for (const name of ["started", "not_consented", "in_progress", "completed", "screened_out", "abandoned",
      "answers_total", "answers_per_minute"]) {
      byId(name).textContent = status[name];
    }
    for (const [flag, count] of Object.entries(status.flags)) byId(`flag-${flag}`).textContent = count;
    byId("median_trial_s").textContent = status.median_trial_s === null ? "-" : `${status.median_trial_s} s`;
    byId("median_study_minutes").textContent =
      status.median_study_minutes === null ? "-" : `${status.median_study_minutes} min`;
    for (const cell of document.querySelectorAll(".window")) cell.textContent = status.window_minutes;
    const rows = status.in_progress_list.map((p) => {
      const row = document.createElement("tr");
      for (const text of [p.subject, `${p.current_trial} of ${p.n_trials}`, `${Math.round(p.idle_s)} s`]) {
        const cell = document.createElement("td");
        cell.textContent = text;
        row.appendChild(cell);
      }
      return row;
    });
    byId("progress").replaceChildren(...rows);
  }

  async function refresh() {
    clearTimeout(timer);
    let delay = 5;
    try {
      const status = await (await admin("/admin/monitor.json")).json();
      fill(status);
      byId("login").hidden = true;
      byId("figures").hidden = false;
      byId("stale").hidden = true;
      delay = status.refresh_s;
    } catch (error) {
      if (error.status === 401 || error.status === 403) {
        remember(null);
        showLogin(error.message);
        return;
      }
      byId("stale").hidden = false;  // a network error or a 5xx: keep the last figures, try again
    }
    timer = setTimeout(refresh, delay * 1000);
  }

  async function download(table) {
    const status = byId("export-status");
    status.textContent = `exporting ${table}\u2026`;
    try {
      const incomplete = byId("include-incomplete").checked ? "?include_incomplete=true" : "";
      const blob = await (await admin(`/admin/${table}${incomplete}`)).blob();
      const link = document.createElement("a");
      link.href = URL.createObjectURL(blob);
      link.download = table;
      document.body.appendChild(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(link.href), 60000);
      status.textContent = `${table}: ${blob.size} bytes`;
    } catch (error) {
      status.textContent = `${table}: ${error.message}`;
    }
  }

  function start() {
    const fragment = window.location.hash.slice(1);
    if (fragment) {
      remember(decodeURIComponent(fragment));
      window.history.replaceState(null, "", window.location.pathname);  // out of the address bar and history
    }
    byId("login").addEventListener("submit", (event) => {
      event.preventDefault();
      remember(byId("token").value.trim());
      byId("token").value = "";
      refresh();
    });
    byId("logout").addEventListener("click", () => {
      remember(null);
      showLogin("");
    });
    for (const button of document.querySelectorAll("button[data-table]")) {
      button.addEventListener("click", () => download(button.dataset.table));
    }
    if (token()) refresh();
    else showLogin("");
  }

  start();
})();
