// The admin's journal list, followed live: each new entry is put at the top of the list,
// if it passes the list's filters, and a listed entry whose outcome changes later (a
// stream cancelled or cut off) shows its new outcome, over /control/journal/live (the
// admin's session).
"use strict";
(function () {
  const box = document.getElementById("journal-live");
  const filtersScript = document.getElementById("journal-live-filters");
  if (!box || !filtersScript) return;
  const filters = JSON.parse(filtersScript.textContent);
  if (filters.p && filters.p !== "1") return; // only the first page shows the newest
  const toggle = box.querySelector("input");
  const state = box.querySelector(".state");
  const changeUrl = location.pathname.replace(/\/$/, "") + "/";
  let socket = null;
  let retry = null;

  function socketUrl() {
    const params = new URLSearchParams();
    for (const name of ["session", "agent_type"]) {
      if (filters[name]) params.set(name, filters[name]);
    }
    if (filters.outcome === "fallback") params.set("fallbacks", "true");
    else if (filters.outcome) params.set("outcome", filters.outcome);
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    return scheme + location.host + "/control/journal/live?" + params.toString();
  }

  function kept(entry) {
    if (filters.outcome === "answered" && entry.rule === null) return false;
    for (const name of ["dialect", "rule"]) {
      if (filters[name] && entry[name] !== filters[name]) return false;
    }
    const search = (filters.q || "").toLowerCase();
    return !search || (entry.query || "").toLowerCase().includes(search);
  }

  function cell(tag, field, text) {
    const element = document.createElement(tag);
    element.className = "field-" + field;
    element.textContent = text === null || text === undefined ? "-" : String(text);
    return element;
  }

  function table() {
    let body = document.querySelector("#result_list tbody");
    if (body) return body;
    const list = document.createElement("table");
    list.id = "result_list";
    body = document.createElement("tbody");
    list.appendChild(body);
    const form = document.getElementById("changelist-form");
    form.insertBefore(list, form.firstChild);
    return body;
  }

  function show(entry) {
    if (!kept(entry)) return;
    const row = document.createElement("tr");
    row.className = "live-new";
    row.dataset.entry = entry.id;
    const when = cell("th", "created_at", "");
    const link = document.createElement("a");
    link.href = changeUrl + entry.id + "/change/";
    link.textContent = new Date(entry.created_at).toLocaleString();
    when.appendChild(link);
    const query = entry.query.length <= 80 ? entry.query : entry.query.slice(0, 79) + "…";
    const outcome = entry.outcome === "answered" && entry.rule === null ? "fallback" : entry.outcome;
    row.append(
      when,
      cell("td", "outcome_label", outcome),
      cell("td", "dialect", entry.dialect),
      cell("td", "agent_type", entry.agent_type),
      cell("td", "query_preview", query),
      cell("td", "rule", entry.rule),
      cell("td", "session", entry.session),
    );
    const body = table();
    body.insertBefore(row, body.firstChild);
  }

  function update(id, outcome) {
    for (const link of document.querySelectorAll("#result_list tbody th a")) {
      if (link.getAttribute("href").endsWith("/" + id + "/change/")) {
        const row = link.closest("tr");
        const shown = row.querySelector("td.field-outcome_label");
        if (shown) shown.textContent = outcome;
      }
    }
  }

  function connect() {
    socket = new WebSocket(socketUrl());
    socket.onmessage = function (message) {
      const event = JSON.parse(message.data);
      if (event.type === "entry") show(event.entry);
      else if (event.type === "update") update(event.id, event.outcome);
      else if (event.type === "subscribed") state.textContent = event.available ? "(live)" : "(unavailable)";
      else if (event.type === "unavailable") state.textContent = "(unavailable: reconnecting)";
      else if (event.type === "available") state.textContent = "(live)";
      else if (event.type === "dropped") state.textContent = "(live: " + event.count + " missed, reload)";
      else if (event.type === "error") state.textContent = "(" + event.message + ")";
    };
    socket.onclose = function (closed) {
      socket = null;
      if (closed.code >= 4400 && closed.code < 4500) return; // refused: retrying changes nothing
      if (toggle.checked) {
        state.textContent = "(reconnecting)";
        retry = setTimeout(connect, 2000);
      }
    };
  }

  toggle.addEventListener("change", function () {
    clearTimeout(retry);
    if (toggle.checked) connect();
    else if (socket) {
      socket.close();
      state.textContent = "";
    }
  });
  box.classList.add("ready");
  connect();
})();
