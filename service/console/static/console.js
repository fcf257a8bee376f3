// Tailor operator console: vanilla JavaScript, no framework and no build step.
//
// Every call goes to this service's /v1 API with `Authorization: Bearer <key>`, the key the
// operator typed in (kept in sessionStorage: this tab only). Everything the API returns is put
// on the page as text (textContent, never parsed as HTML), so stored data cannot run as script.
"use strict";

(() => {
  const KEY_STORAGE = "tailor.console.key";
  const USER_ID = /^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}$/;
  const RUN_ID = /^[0-9a-f]{32}$/;
  const PAGE = 50;

  const $ = (id) => document.getElementById(id);

  // --- small DOM helpers ---------------------------------------------------------------

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "class") node.className = value;
      else if (name === "text") node.textContent = value;
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function fmtTime(iso) {
    if (!iso) return "–";
    const date = new Date(iso);
    if (Number.isNaN(date.getTime())) return String(iso);
    return date.toISOString().replace("T", " ").slice(0, 19) + " UTC";
  }

  function pct(value) {
    return typeof value === "number" ? `${(100 * value).toFixed(1)}%` : "–";
  }

  function shortId(id) {
    return id ? `${id.slice(0, 8)}…${id.slice(-4)}` : "";
  }

  function badge(text, kind) {
    return el("span", { class: `badge ${kind || text}`, text });
  }

  let toastTimer = null;
  function toast(message) {
    const box = $("toast");
    box.textContent = message;
    box.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => { box.hidden = true; }, 6000);
  }

  function note(id, message, isError) {
    const box = $(id);
    box.textContent = message || "";
    box.hidden = !message;
    box.classList.toggle("error", Boolean(isError));
  }

  // --- the key and the API ----------------------------------------------------------------

  const getKey = () => sessionStorage.getItem(KEY_STORAGE);

  class ApiError extends Error {
    constructor(status, problem) {
      super((problem && (problem.detail || problem.title)) || `HTTP ${status}`);
      this.status = status;
      this.problem = problem || {};
    }
  }

  async function readProblem(response) {
    try {
      return await response.json();
    } catch {
      return { status: response.status, title: response.statusText };
    }
  }

  // fetch with the key; a 401 forgets the key and asks for another one.
  async function call(path, { method = "GET", accept = "application/json", key } = {}) {
    const response = await fetch(path, {
      method,
      headers: { Authorization: `Bearer ${key || getKey()}`, Accept: accept },
      cache: "no-store",
    });
    if (response.status === 401 && !key) {
      sessionStorage.removeItem(KEY_STORAGE);
      showLogin("The key was refused (invalid or revoked): enter another one.");
      throw new ApiError(401, await readProblem(response));
    }
    return response;
  }

  async function callJson(path, options) {
    const response = await call(path, options);
    if (!response.ok) throw new ApiError(response.status, await readProblem(response));
    return response.status === 204 ? null : response.json();
  }

  function query(params) {
    const search = new URLSearchParams();
    for (const [name, value] of Object.entries(params)) {
      if (value !== null && value !== undefined && value !== "") search.set(name, value);
    }
    const text = search.toString();
    return text ? `?${text}` : "";
  }

  const userPath = (userId) => `/v1/users/${encodeURIComponent(userId)}`;

  // --- sign in --------------------------------------------------------------------------

  function showLogin(message) {
    $("login").hidden = false;
    $("nav").hidden = true;
    $("key-state").hidden = true;
    $("users-view").hidden = true;
    $("eval-view").hidden = true;
    note("key-error", message || "", true);
    $("api-key").value = "";
    $("api-key").focus();
  }

  async function useKey(event) {
    event.preventDefault();
    const key = $("api-key").value.trim();
    if (!key) return;
    $("use-key").disabled = true;
    try {
      // Any authenticated read tells whether the key is good; this one is cheap.
      const response = await call(`/v1/eval${query({ limit: 1 })}`, { key });
      if (response.status === 401) {
        note("key-error", "That key was refused (invalid or revoked).", true);
        return;
      }
      if (!response.ok) throw new ApiError(response.status, await readProblem(response));
      sessionStorage.setItem(KEY_STORAGE, key);
      $("api-key").value = "";
      $("login").hidden = true;
      route();
    } catch (error) {
      note("key-error", `Could not check the key: ${error.message}`, true);
    } finally {
      $("use-key").disabled = false;
    }
  }

  function forgetKey() {
    sessionStorage.removeItem(KEY_STORAGE);
    location.hash = "";
    showLogin("");
  }

  // --- routing: #/users, #/users/<id>, #/users/<id>/history/<attribute id>, #/eval[/<id>] ---

  function route() {
    const key = getKey();
    if (!key) {
      showLogin("");
      return;
    }
    $("login").hidden = true;
    $("nav").hidden = false;
    $("key-state").hidden = false;
    const keyId = /^tlr_([0-9a-f]+)_/.exec(key);
    $("key-label").textContent = keyId ? `key ${keyId[1]}` : "key set";

    const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
    const view = parts[0] === "eval" ? "eval" : "users";
    for (const link of document.querySelectorAll("#nav a")) {
      link.classList.toggle("current", link.dataset.view === view);
    }
    $("users-view").hidden = view !== "users";
    $("eval-view").hidden = view !== "eval";
    if (view === "users") {
      const userId = parts[1] || "";
      if (userId) {
        $("user-id").value = userId;
        if (userId !== state.userId) loadUser(userId);
        if (parts[2] === "history" && parts[3]) showHistory(userId, parts[3]);
      } else {
        state.userId = null;
        $("user-panel").hidden = true;
        note("user-note", "");
        $("user-id").focus();
      }
    } else {
      loadRuns(parts[1] || null);
    }
  }

  // --- users ------------------------------------------------------------------------------

  const state = {
    userId: null,
    attrCursor: null,
    jobsCursor: null,
    runsCursor: null,
    runId: null,
  };

  function findUser(event) {
    event.preventDefault();
    const userId = $("user-id").value.trim();
    if (!USER_ID.test(userId)) {
      note("user-note", "A user id is 1-200 characters: letters, digits and . _ : @ -, " +
        "starting with a letter or digit.", true);
      return;
    }
    state.userId = null; // reload even when it is the same user
    const target = `#/users/${encodeURIComponent(userId)}`;
    if (location.hash === target) route();
    else location.hash = target;
  }

  async function loadUser(userId) {
    state.userId = userId;
    $("user-panel").hidden = true;
    note("user-note", `Loading ${userId}…`);
    try {
      await Promise.all([loadAttributes(true), loadJobs(true)]);
    } catch (error) {
      if (state.userId !== userId) return;
      if (error.status === 404) {
        note("user-note", `No user “${userId}” for this tenant (never seen, or erased).`, true);
      } else if (error.status !== 401) {
        note("user-note", `Could not load ${userId}: ${error.message}`, true);
      }
      return;
    }
    if (state.userId !== userId) return;
    note("user-note", "");
    $("user-title").replaceChildren("User ", el("code", { text: userId }));
    $("user-panel").hidden = false;
  }

  async function loadAttributes(reset) {
    const userId = state.userId;
    if (reset) state.attrCursor = null;
    const page = await callJson(`${userPath(userId)}/attributes${query({
      status: $("attr-status").value,
      limit: PAGE,
      cursor: state.attrCursor,
    })}`);
    if (userId !== state.userId) return;
    const body = $("attributes").tBodies[0];
    if (reset) body.replaceChildren();
    for (const item of page.items) body.append(attributeRow(item));
    state.attrCursor = page.next_cursor;
    $("attr-more").hidden = !page.next_cursor;
    $("attr-empty").hidden = body.rows.length > 0;
  }

  function attributeRow(item) {
    const evidence = item.evidence.length
      ? item.evidence.map((e) => el("blockquote", { class: "quote" },
        `“${e.quote}”`, el("span", { class: "where", text: `message ${e.message_index}` })))
      : el("span", { class: "muted", text: "no evidence" });
    const status = [badge(item.status)];
    if (item.superseded_by) {
      status.push(el("div", { class: "id", text: `by ${shortId(item.superseded_by)}` }));
    }
    const verdict = item.verdict
      ? el("div", { class: "muted",
        text: `${item.verdict}${item.verifier_score === null ? "" : ` ${item.verifier_score.toFixed(2)}`}` })
      : null;
    return el("tr", { class: `status-${item.status}`, "data-attribute-id": item.id },
      el("td", {},
        el("div", { class: "attr-text", text: item.text }),
        el("div", {}, item.category ? el("span", { class: "tag", text: item.category }) : null,
          el("span", { class: "id", text: item.id }))),
      el("td", {}, status),
      el("td", { class: "evidence" }, evidence),
      el("td", {}, el("div", { text: item.source }), verdict),
      el("td", { class: "nowrap", text: fmtTime(item.updated_at) }),
      el("td", {}, el("button", {
        type: "button",
        class: "small history",
        text: "History",
        onclick: () => {
          location.hash = `#/users/${encodeURIComponent(item.user_id)}/history/${item.id}`;
        },
      })));
  }

  async function loadJobs(reset) {
    const userId = state.userId;
    if (reset) state.jobsCursor = null;
    const page = await callJson(`${userPath(userId)}/jobs${query({
      status: $("job-status").value,
      limit: 20,
      cursor: state.jobsCursor,
    })}`);
    if (userId !== state.userId) return;
    const body = $("jobs").tBodies[0];
    if (reset) body.replaceChildren();
    for (const job of page.items) body.append(jobRow(job));
    state.jobsCursor = page.next_cursor;
    $("jobs-more").hidden = !page.next_cursor;
    $("jobs-empty").hidden = body.rows.length > 0;
  }

  // An extraction job's candidates one per line (what was done with each); any other result
  // as its JSON, cut short.
  function jobResult(result) {
    if (Array.isArray(result.candidates)) {
      if (!result.candidates.length) return el("span", { class: "muted", text: "no candidates" });
      return el("ul", { class: "candidates" }, result.candidates.map((c) => el("li", {},
        el("span", { class: "tag", text: c.action || "?" }), String(c.text || ""),
        c.verdict
          ? el("span", { class: "muted",
            text: ` ${c.verdict}${typeof c.score === "number" ? ` ${c.score.toFixed(2)}` : ""}` })
          : null)));
    }
    const text = JSON.stringify(result);
    return el("div", { class: "job-result", text: text.length > 160 ? `${text.slice(0, 159)}…` : text });
  }

  function jobRow(job) {
    let outcome;
    if (job.error) {
      outcome = el("div", { class: "job-error", text: job.error });
    } else if (job.result) {
      outcome = jobResult(job.result);
    } else if (job.status === "queued" || job.status === "running") {
      outcome = el("span", { class: "muted", text: `next attempt ${fmtTime(job.run_after)}` });
    } else {
      outcome = el("span", { class: "muted", text: "–" });
    }
    return el("tr", { "data-job-id": job.id },
      el("td", { class: "nowrap", text: fmtTime(job.created_at) }),
      el("td", { text: job.kind }),
      el("td", {}, badge(job.status)),
      el("td", { text: `${job.attempts} / ${job.max_attempts}` }),
      el("td", {}, outcome),
      el("td", {}, el("span", { class: "id", text: job.id })));
  }

  // --- attribute history -------------------------------------------------------------------

  function show(value) {
    if (value === null || value === undefined) return "null";
    if (typeof value === "string") return value;
    if (Array.isArray(value) && value.every((e) => e && typeof e.quote === "string")) {
      return value.map((e) => `“${e.quote}” (message ${e.message_index})`).join("; ") || "none";
    }
    return JSON.stringify(value);
  }

  function changes(entry) {
    const before = entry.before || {};
    const after = entry.after || {};
    const list = el("dl");
    const names = [...new Set([...Object.keys(before), ...Object.keys(after)])];
    for (const name of names) {
      const was = JSON.stringify(before[name]);
      const now = JSON.stringify(after[name]);
      if (entry.before && was === now) continue;
      if (!entry.before && (after[name] === null || after[name] === undefined)) continue;
      const dd = entry.before
        ? el("dd", {}, el("del", { text: show(before[name]) }), " → ",
          el("ins", { text: show(after[name]) }))
        : el("dd", { text: show(after[name]) });
      list.append(el("dt", { text: name }), dd);
    }
    return list;
  }

  async function showHistory(userId, attributeId) {
    const dialog = $("history-dialog");
    $("history-title").textContent = `History of attribute ${attributeId}`;
    $("history-text").textContent = "Loading…";
    $("history-list").replaceChildren();
    if (!dialog.open) dialog.showModal();
    try {
      const [attribute, history] = await Promise.all([
        callJson(`${userPath(userId)}/attributes/${encodeURIComponent(attributeId)}`),
        callJson(`${userPath(userId)}/attributes/${encodeURIComponent(attributeId)}/history`),
      ]);
      $("history-text").replaceChildren(`“${attribute.text}” — now `, badge(attribute.status),
        ` · ${history.items.length} audit entries, oldest first`);
      for (const entry of history.items) {
        $("history-list").append(el("li", {},
          el("div", {}, el("span", { class: "badge action", text: entry.action }),
            el("span", { class: "when", text: `${fmtTime(entry.created_at)} by ${entry.actor}` })),
          changes(entry)));
      }
    } catch (error) {
      $("history-text").textContent = error.status === 404
        ? "No such attribute for this user."
        : `Could not load the history: ${error.message}`;
    }
  }

  function closeHistory() {
    $("history-dialog").close();
  }

  function onHistoryClosed() {
    // Back to the user's page (the history is a URL of its own, so it can be linked).
    if (/\/history\//.test(location.hash) && state.userId) {
      location.hash = `#/users/${encodeURIComponent(state.userId)}`;
    }
  }

  // --- export and erasure ------------------------------------------------------------------

  async function exportUser() {
    const userId = state.userId;
    if (!userId) return;
    try {
      const response = await call(`${userPath(userId)}/export`);
      if (!response.ok) throw new ApiError(response.status, await readProblem(response));
      const blob = new Blob([await response.text()], { type: "application/json" });
      const url = URL.createObjectURL(blob);
      const link = el("a", { href: url, download: `tailor-export-${userId}.json` });
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
      toast(`Exported ${userId} as tailor-export-${userId}.json`);
    } catch (error) {
      if (error.status !== 401) toast(`Export failed: ${error.message}`);
    }
  }

  function openErase() {
    if (!state.userId) return;
    $("erase-name").textContent = state.userId;
    $("erase-confirm-input").value = "";
    $("erase-confirm").disabled = true;
    $("erase-dialog").showModal();
    $("erase-confirm-input").focus();
  }

  async function confirmErase() {
    const userId = state.userId;
    if (!userId || $("erase-confirm-input").value !== userId) return;
    $("erase-confirm").disabled = true;
    try {
      const out = await callJson(userPath(userId), { method: "DELETE" });
      $("erase-dialog").close();
      const d = out.deleted;
      const summary = `${d.attributes} attributes, ${d.evidence} evidence quotes, ` +
        `${d.audit_entries} audit entries, ${d.jobs} jobs, ${d.idempotency_keys} stored answers`;
      state.userId = null;
      $("user-panel").hidden = true;
      $("attributes").tBodies[0].replaceChildren();
      $("jobs").tBodies[0].replaceChildren();
      note("user-note", `User “${userId}” was erased: ${summary}.`);
      toast(`Erased ${userId}`);
    } catch (error) {
      $("erase-dialog").close();
      if (error.status !== 401) note("user-note", `Erasure failed: ${error.message}`, true);
    }
  }

  // --- evaluation runs ---------------------------------------------------------------------

  async function loadRuns(runId, more) {
    if (!more) state.runsCursor = null;
    try {
      const page = await callJson(`/v1/eval${query({ limit: 20, cursor: state.runsCursor })}`);
      const body = $("runs").tBodies[0];
      if (!more) body.replaceChildren();
      for (const run of page.items) body.append(runRow(run));
      state.runsCursor = page.next_cursor;
      $("runs-more").hidden = !page.next_cursor;
      $("runs-empty").hidden = body.rows.length > 0;
    } catch (error) {
      if (error.status !== 401) toast(`Could not list the runs: ${error.message}`);
      return;
    }
    if (!more) showRun(runId && RUN_ID.test(runId) ? runId : null);
  }

  function runRow(run) {
    const params = run.params || {};
    const results = run.results || {};
    const data = params.dataset ? params.dataset : params.upload_id ? `upload ${shortId(params.upload_id)}` : "–";
    return el("tr", {
      "data-run-id": run.run_id,
      onclick: () => { location.hash = `#/eval/${run.run_id}`; },
    },
    el("td", { class: "nowrap", text: fmtTime(run.created_at) }),
    el("td", {}, badge(run.status)),
    el("td", { text: results.judge || params.judge || "reward" }),
    el("td", { text: data }),
    el("td", { text: results.n === undefined ? "–" : String(results.n) }),
    el("td", { text: pct(results.accuracy) }),
    el("td", {}, el("span", { class: "id", text: run.run_id })));
  }

  async function showRun(runId) {
    state.runId = runId;
    for (const row of $("runs").tBodies[0].rows) {
      row.classList.toggle("selected", row.dataset.runId === runId);
    }
    const panel = $("run-detail");
    if (!runId) {
      panel.hidden = true;
      return;
    }
    panel.hidden = false;
    $("run-title").textContent = `Run ${runId}`;
    $("run-status").replaceChildren();
    $("report").replaceChildren();
    $("chart").hidden = true;
    note("run-note", "Loading…");
    let run;
    try {
      run = await callJson(`/v1/eval/${runId}`);
    } catch (error) {
      if (error.status !== 401) {
        note("run-note", error.status === 404 ? "No such run for this tenant." : error.message, true);
      }
      return;
    }
    if (state.runId !== runId) return;
    $("run-status").replaceChildren(badge(run.status));
    if (run.status !== "succeeded") {
      const progress = run.progress && run.progress.total
        ? ` (${run.progress.done || 0} of ${run.progress.total} cases)` : "";
      note("run-note", run.status === "failed"
        ? `The run failed: ${run.error || "no error recorded"}`
        : `The run is ${run.status}${progress}; its report exists once it succeeded.`,
      run.status === "failed");
      return;
    }
    note("run-note", "");
    await Promise.all([showChart(runId), showReport(runId)]);
  }

  async function showChart(runId) {
    const img = $("chart-img");
    const unavailable = $("chart-unavailable");
    if (img.src.startsWith("blob:")) URL.revokeObjectURL(img.src);
    img.removeAttribute("src");
    img.hidden = true;
    unavailable.hidden = true;
    $("chart").hidden = false;
    try {
      const response = await call(`/v1/eval/${runId}/chart.png`, { accept: "image/png" });
      if (state.runId !== runId) return;
      if (response.ok) {
        img.src = URL.createObjectURL(await response.blob());
        img.hidden = false;
        return;
      }
      const problem = await readProblem(response);
      unavailable.textContent = problem.type === "urn:tailor:problem:chart-unavailable"
        ? `No chart on this server: ${problem.detail}. The figures are in the report below.`
        : `No chart: ${problem.detail || problem.title || `HTTP ${response.status}`}`;
      unavailable.hidden = false;
    } catch (error) {
      if (error.status === 401) return;
      unavailable.textContent = `No chart: ${error.message}`;
      unavailable.hidden = false;
    }
  }

  async function showReport(runId) {
    try {
      const response = await call(`/v1/eval/${runId}/report`, { accept: "text/markdown" });
      if (!response.ok) throw new ApiError(response.status, await readProblem(response));
      const text = await response.text();
      if (state.runId !== runId) return;
      renderMarkdown(text, $("report"));
    } catch (error) {
      if (error.status !== 401) $("report").replaceChildren(el("p", { class: "error", text: error.message }));
    }
  }

  // --- a small Markdown renderer (the report's subset), building DOM nodes only -------------

  function inline(text) {
    const nodes = [];
    const pattern = /`([^`]+)`|\*\*([^*]+)\*\*/g;
    let last = 0;
    for (let match = pattern.exec(text); match; match = pattern.exec(text)) {
      if (match.index > last) nodes.push(text.slice(last, match.index));
      nodes.push(match[1] !== undefined ? el("code", { text: match[1] }) : el("strong", { text: match[2] }));
      last = pattern.lastIndex;
    }
    if (last < text.length) nodes.push(text.slice(last));
    return nodes;
  }

  function cells(line) {
    return line.trim().replace(/^\|/, "").replace(/\|$/, "").split("|").map((c) => c.trim());
  }

  function renderMarkdown(text, container) {
    const out = [];
    const lines = text.replace(/\r\n/g, "\n").split("\n");
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let match;
      if (!line.trim()) {
        i += 1;
      } else if ((match = /^(#{1,4})\s+(.*)$/.exec(line))) {
        out.push(el(`h${Math.min(match[1].length + 2, 6)}`, {}, inline(match[2])));
        i += 1;
      } else if (line.startsWith("```")) {
        const code = [];
        for (i += 1; i < lines.length && !lines[i].startsWith("```"); i += 1) code.push(lines[i]);
        out.push(el("pre", {}, el("code", { text: code.join("\n") })));
        i += 1;
      } else if (/^!\[[^\]]*\]\(.*\)\s*$/.test(line)) {
        // The report embeds its chart as a data: URI; the chart is shown above instead.
        i += 1;
      } else if (line.trim().startsWith("|")) {
        const rows = [];
        for (; i < lines.length && lines[i].trim().startsWith("|"); i += 1) rows.push(lines[i]);
        const table = el("table");
        let align = [];
        const sep = rows.length > 1 && /^[\s|:-]+$/.test(rows[1]) ? cells(rows[1]) : null;
        if (sep) align = sep.map((c) => (c.endsWith(":") ? "right" : ""));
        rows.forEach((row, index) => {
          if (sep && index === 1) return;
          const tag = sep && index === 0 ? "th" : "td";
          table.append(el("tr", {}, cells(row).map((c, n) => el(tag, { class: align[n] || null }, inline(c)))));
        });
        out.push(table);
      } else if (/^\s*[-*]\s+/.test(line)) {
        const list = el("ul");
        for (; i < lines.length && /^\s*[-*]\s+/.test(lines[i]); i += 1) {
          list.append(el("li", {}, inline(lines[i].replace(/^\s*[-*]\s+/, ""))));
        }
        out.push(list);
      } else {
        const para = [];
        for (; i < lines.length && lines[i].trim() && !/^(#|\||```|\s*[-*]\s|!\[)/.test(lines[i]); i += 1) {
          para.push(lines[i]);
        }
        if (!para.length) { para.push(line); i += 1; }
        out.push(el("p", {}, inline(para.join(" "))));
      }
    }
    container.replaceChildren(...out);
  }

  // --- wiring ------------------------------------------------------------------------------

  function wire() {
    $("key-form").addEventListener("submit", useKey);
    $("forget-key").addEventListener("click", forgetKey);
    $("find-user").addEventListener("submit", findUser);
    $("attr-status").addEventListener("change", () => loadAttributes(true).catch(reportError));
    $("attr-more").addEventListener("click", () => loadAttributes(false).catch(reportError));
    $("job-status").addEventListener("change", () => loadJobs(true).catch(reportError));
    $("jobs-more").addEventListener("click", () => loadJobs(false).catch(reportError));
    $("export-user").addEventListener("click", exportUser);
    $("erase-user").addEventListener("click", openErase);
    $("erase-cancel").addEventListener("click", () => $("erase-dialog").close());
    $("erase-confirm-input").addEventListener("input", () => {
      $("erase-confirm").disabled = $("erase-confirm-input").value !== state.userId;
    });
    $("erase-confirm").addEventListener("click", confirmErase);
    $("history-close").addEventListener("click", closeHistory);
    $("history-dialog").addEventListener("close", onHistoryClosed);
    $("runs-refresh").addEventListener("click", () => loadRuns(state.runId));
    $("runs-more").addEventListener("click", () => loadRuns(state.runId, true));
    window.addEventListener("hashchange", route);
    route();
  }

  function reportError(error) {
    if (error.status !== 401) toast(error.message);
  }

  wire();
})();
