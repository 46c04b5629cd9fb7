// planexec console: keeps the runs list and a run's page live. No library; every page works without it (it only refreshes).
"use strict";

function refreshRuns() {
  const table = document.querySelector("table.runs[data-live]");
  if (!table) return;
  const body = document.getElementById("run-rows");
  setInterval(async () => {
    try {
      const answer = await fetch(table.dataset.live, { credentials: "same-origin" });
      if (answer.ok) body.innerHTML = await answer.text();
    } catch (e) { /* the server went away: try again at the next tick */ }
  }, 2000);
}

function paint(state) {
  const badge = document.getElementById("run-state");
  if (badge && badge.textContent !== state.run) {
    badge.textContent = state.run;
    badge.className = "badge state-" + state.run;
    const note = document.getElementById("live-note");
    if (note) note.textContent = "Run is now " + state.run;
  }
  const version = document.getElementById("run-version");
  if (version) version.textContent = String(state.version);
  for (const [stepId, stepState] of Object.entries(state.steps)) {
    const node = document.getElementById("node-" + stepId);
    if (!node) continue;
    node.setAttribute("class", "node state-" + stepState);
    node.dataset.state = stepState;
    const label = node.querySelector(".node-state");
    if (label) label.textContent = stepState;
    const title = node.querySelector("title");
    if (title) title.textContent = stepId + ": " + stepState;
  }
}

const shown = new Map(); // box id -> the HTML the server sent last

async function reload(boxId, url) {
  const box = document.getElementById(boxId);
  if (!box || !url) return;
  const open = new Set([...box.querySelectorAll("details[open]")].map((d) => d.id));
  const closed = new Set([...box.querySelectorAll("details:not([open])")].map((d) => d.id));
  const answer = await fetch(url, { credentials: "same-origin" });
  if (!answer.ok) return;
  const html = await answer.text();
  if (shown.get(boxId) === html) return; // nothing changed here: leave what a person is typing alone
  shown.set(boxId, html);
  box.innerHTML = html;
  for (const d of box.querySelectorAll("details")) {
    if (open.has(d.id)) d.open = true;
    else if (closed.has(d.id)) d.open = false;
  }
}

function followRun() {
  const facts = document.getElementById("run-facts");
  if (!facts) return;
  const initial = document.getElementById("initial-state");
  let last = initial ? JSON.parse(initial.textContent) : null;
  if (last && last.finished) { document.body.dataset.live = "finished"; return; }
  const source = new EventSource(facts.dataset.stream);
  source.addEventListener("state", async (e) => {
    const state = JSON.parse(e.data);
    paint(state);
    if (!last || state.seq !== last.seq) {
      // the review box first: a plan version that now waits (an edit, a revision) shows its approval at once
      await reload("review-box", facts.dataset.review);
      await reload("panels", facts.dataset.panels);
    }
    last = state;
    if (state.finished) { source.close(); document.body.dataset.live = "finished"; }
  });
  document.body.dataset.live = "following";
}

function retryMissing() {
  const wait = document.querySelector("[data-retry]");
  if (wait) setTimeout(() => window.location.reload(), Number(wait.dataset.retry));
}

function focusProblems() {
  const problems = document.getElementById("problems");
  if (problems) problems.focus();
}

document.addEventListener("DOMContentLoaded", () => {
  refreshRuns();
  followRun();
  retryMissing();
  focusProblems();
});
