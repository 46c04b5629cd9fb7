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

async function reloadPanels(url) {
  const box = document.getElementById("panels");
  if (!box) return;
  const open = new Set([...box.querySelectorAll("details[open]")].map((d) => d.id));
  const closed = new Set([...box.querySelectorAll("details:not([open])")].map((d) => d.id));
  const answer = await fetch(url, { credentials: "same-origin" });
  if (!answer.ok) return;
  box.innerHTML = await answer.text();
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
    const pendingGone = document.querySelector("section.pending") && (state.seq !== (last && last.seq));
    paint(state);
    if (!last || state.seq !== last.seq) await reloadPanels(facts.dataset.panels);
    last = state;
    if (pendingGone) {
      // a decision was taken (here or elsewhere): the approval box no longer applies once the run moves on
      const box = document.querySelector("section.pending");
      if (box && Object.values(state.steps).some((s) => s !== "pending")) box.remove();
    }
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
