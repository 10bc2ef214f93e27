// The mqstore dashboard: keys (one SCAN, then the server's keyspace events; the rows on screen
// live over KEYNOTIFY), leases, job rollouts, jobs by thing and a thing's device shadow (live
// over its documents stream), straight from the browser to
// the broker over MQTT on WebSocket with the npm package. No framework.
//
// It holds a fleet's worth of keys: the list of names is scanned once (and again only after a
// reconnect), new and deleted keys come as keyspace events, and only the rows on screen exist
// in the page (and are observed), so 100,000 keys cost the page a sorted array of names.
import { Client } from "mqstore";

const params = new URLSearchParams(location.search);
const brokerUrl = params.get("broker") ?? `ws://${location.hostname || "127.0.0.1"}:9001`;
/** Each row's height in pixels (style.css gives rows exactly this). */
const ROW_HEIGHT = 28;
/** Rows rendered beyond the visible ones, above and below (smooth scrolling). */
const OVERSCAN = 8;
const REFRESH_MS = 2000;
/** Jobs shown in the rollout panel at most. */
const MAX_ROLLOUTS = 20;

const $ = (id) => document.getElementById(id);
const utf8 = new TextDecoder("utf-8", { fatal: true });
const keyText = (bytes) => readable(bytes).text;

/** Bytes as text when they are UTF-8, else as hex (marked binary). */
function readable(bytes) {
  try {
    return { text: utf8.decode(bytes), binary: false };
  } catch {
    return { text: Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join(" "), binary: true };
  }
}

function ago(wallMs) {
  const s = Math.max(0, Math.round((Date.now() - wallMs) / 1000));
  return s < 60 ? `${s}s ago` : s < 3600 ? `${Math.floor(s / 60)}m ago` : `${Math.floor(s / 3600)}h ago`;
}

/** How long until epoch second `at`, in words. */
function until(at) {
  const s = Math.max(0, Math.round(at - Date.now() / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

function setStatus(text, kind) {
  const status = $("status");
  status.textContent = text;
  status.className = `status ${kind}`;
}

function message(text, kind = "") {
  const element = $("edit-message");
  element.textContent = text;
  element.className = `message ${kind}`;
}

/** The SCAN dialect (`*`, `?`, `[a-z]`, `[!a-z]`, `\*`) as a regular expression. */
function globRegExp(pattern) {
  let out = "";
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === "*") out += "[\\s\\S]*";
    else if (c === "?") out += "[\\s\\S]";
    else if (c === "\\" && i + 1 < pattern.length) out += escape(pattern[++i]);
    else if (c === "[" && pattern.indexOf("]", i + 2) > i) {
      const end = pattern.indexOf("]", i + 2);
      let set = pattern.slice(i + 1, end);
      const negated = set.startsWith("!");
      if (negated) set = set.slice(1);
      out += `[${negated ? "^" : ""}${set.replace(/[\\\]^]/g, "\\$&")}]`;
      i = end;
    } else out += escape(c);
  }
  return new RegExp(`^${out}$`);
}
const escape = (c) => c.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");

// ---- the key list: every name, sorted; the rows on screen ----------------------------------

/** Every key's name, sorted, and its bytes by name. */
let names = [];
const keyBytes = new Map();
/** The names the filter lets through, sorted. */
let view = [];
let matches = () => true;
/** The rows on screen: name -> { key, name, value, version, tr, stop } */
const rows = new Map();
let client;
let selected;

/** Where `name` is (or would go) in the sorted `list`. */
function place(list, name) {
  let low = 0;
  let high = list.length;
  while (low < high) {
    const mid = (low + high) >>> 1;
    if (list[mid] < name) low = mid + 1;
    else high = mid;
  }
  return low;
}

function insertName(list, name) {
  const at = place(list, name);
  if (list[at] !== name) list.splice(at, 0, name);
}

/** Names made and gone since the last frame: applied together (a burst of thousands of
 * events costs one merge per frame, not a splice of the whole list per event). */
const made = new Set();
const gone = new Set();

/** A key made (a keyspace event, or a write from this page). */
function keyMade(key) {
  const name = keyText(key);
  gone.delete(name);
  if (keyBytes.has(name)) return;
  keyBytes.set(name, key);
  made.add(name);
  schedule();
}

/** A key gone. */
function keyGone(name) {
  made.delete(name);
  if (!keyBytes.delete(name)) return;
  gone.add(name);
  if (selected === name) selected = undefined;
  schedule();
}

/** Merges the names made and gone since the last frame into the sorted lists. */
function applyChanges() {
  if (made.size === 0 && gone.size === 0) return;
  const merge = (list, added) => {
    const kept = gone.size ? list.filter((name) => !gone.has(name)) : list;
    if (added.length === 0) return kept;
    if (added.length < 16) {
      for (const name of added) insertName(kept, name);
      return kept;
    }
    const out = [];
    let i = 0;
    for (const name of added) {
      while (i < kept.length && kept[i] < name) out.push(kept[i++]);
      if (kept[i] !== name) out.push(name);
    }
    while (i < kept.length) out.push(kept[i++]);
    return out;
  };
  const added = [...made].sort(byName);
  names = merge(names, added);
  view = merge(view, added.filter(matches));
  made.clear();
  gone.clear();
}

const byName = (a, b) => (a < b ? -1 : a > b ? 1 : 0);

/** Scans every key (once at the start, and after each reconnect: events were missed). */
async function loadKeys() {
  setStatus("loading keys…", "connecting");
  const keys = await client.scan("*");
  keyBytes.clear();
  for (const key of keys) keyBytes.set(keyText(key), key);
  names = [...keyBytes.keys()].sort(byName);
  made.clear();
  gone.clear();
  applyFilter();
  setStatus(`connected to ${brokerUrl}`, "connected");
}

function applyFilter() {
  applyChanges();
  const pattern = $("filter").value || "*";
  let regexp;
  try {
    regexp = globRegExp(pattern);
  } catch {
    regexp = /^$/;
  }
  matches = (name) => regexp.test(name);
  view = pattern === "*" ? names.slice() : names.filter(matches);
  schedule();
}

let frame = 0;
/** Renders the visible rows at the next frame (once, however many changes came). */
function schedule() {
  if (!frame) frame = requestAnimationFrame(renderWindow);
}

function renderWindow() {
  frame = 0;
  applyChanges();
  const scroller = $("key-scroller");
  const first = Math.max(0, Math.floor(scroller.scrollTop / ROW_HEIGHT) - OVERSCAN);
  const count = Math.ceil(scroller.clientHeight / ROW_HEIGHT) + 2 * OVERSCAN;
  const shown = view.slice(first, first + count);
  const wanted = new Set(shown);
  for (const name of [...rows.keys()]) if (!wanted.has(name)) dropRow(name);
  const trs = shown.map((name) => (rows.get(name) ?? addRow(name)).tr);
  $("spacer-top").style.height = `${first * ROW_HEIGHT}px`;
  $("spacer-bottom").style.height = `${Math.max(0, view.length - first - shown.length) * ROW_HEIGHT}px`;
  $("rows").replaceChildren($("spacer-top"), ...trs, $("spacer-bottom"));
  $("key-count").textContent = `${view.length}`;
  $("empty").hidden = view.length > 0;
}

function render(row) {
  const value = row.value ? readable(row.value) : { text: "", binary: false };
  const cells = row.tr.children;
  cells[0].textContent = row.name;
  cells[0].title = row.name;
  cells[1].textContent = value.text;
  cells[1].title = value.text;
  cells[1].className = value.binary ? "binary" : "";
  cells[2].textContent = row.version?.toString() ?? "";
  cells[2].title = cells[2].textContent;
  cells[3].textContent = row.version ? ago(row.version.wallMs) : "";
}

/** A row for `name` (on screen now): its value read and its changes observed. */
function addRow(name) {
  const key = keyBytes.get(name);
  const tr = document.createElement("tr");
  tr.dataset.key = name;
  tr.tabIndex = -1;
  tr.innerHTML = "<td></td><td></td><td></td><td></td>";
  tr.addEventListener("click", () => select(name, { edit: true }));
  if (selected === name) tr.classList.add("selected");
  const row = { key, name, value: null, version: null, tr, stop: null, gone: false };
  rows.set(name, row);
  render(row);
  (async () => {
    const stop = await client.onChange(key, (change) => {
      if (change.value === null) return keyGone(name);
      row.value = change.value;
      row.version = change.version;
      render(row);
      flash(tr);
      if (selected === name && document.activeElement !== $("edit-value")) fillEditor(row);
    });
    if (row.gone) return stop(); // scrolled away meanwhile
    row.stop = stop;
    const found = await client.get(key);
    if (!found) return keyGone(name);
    row.value = found.value;
    row.version = found.version;
    render(row);
  })().catch(() => {});
  return row;
}

/** A row off screen: no longer observed. */
function dropRow(name) {
  const row = rows.get(name);
  if (!row) return;
  rows.delete(name);
  row.gone = true;
  row.stop?.().catch(() => {});
}

function flash(tr) {
  tr.classList.remove("flash");
  void tr.offsetWidth; // restart the animation
  tr.classList.add("flash");
}

// ---- selection and the editor ---------------------------------------------------------------

/** Scrolls so that `name` is on screen. */
function reveal(name) {
  applyChanges();
  const at = place(view, name);
  if (view[at] !== name) return;
  const scroller = $("key-scroller");
  const top = at * ROW_HEIGHT;
  if (top < scroller.scrollTop) scroller.scrollTop = top;
  else if (top + ROW_HEIGHT > scroller.scrollTop + scroller.clientHeight) {
    scroller.scrollTop = top + ROW_HEIGHT - scroller.clientHeight;
  }
  renderWindow();
}

function select(name, { edit = false } = {}) {
  for (const tr of $("rows").querySelectorAll("tr.selected")) tr.classList.remove("selected");
  selected = name !== undefined && keyBytes.has(name) ? name : undefined;
  if (selected === undefined) return;
  reveal(name);
  const row = rows.get(name);
  if (!row) return;
  row.tr.classList.add("selected");
  fillEditor(row);
  message("");
  if (edit) $("edit-value").focus();
  else row.tr.focus();
}

function fillEditor(row) {
  $("edit-key").value = row.name;
  $("edit-value").value = row.value ? readable(row.value).text : "";
  $("edit-version").textContent = row.version ? `version ${row.version} (${ago(row.version.wallMs)})` : "";
}

function newKey() {
  select(undefined);
  $("edit-key").value = "";
  $("edit-value").value = "";
  $("edit-version").textContent = "a new key";
  message("");
  $("edit-key").focus();
}

async function save() {
  const key = $("edit-key").value;
  if (!key) return message("a key is required", "error");
  const { version } = await client.set(key, $("edit-value").value);
  message(`saved: version ${version}`, "ok");
  $("edit-version").textContent = `version ${version}`;
  selected = key;
  keyMade(new TextEncoder().encode(key));
}

let armedDelete = 0;
async function remove() {
  const key = $("edit-key").value;
  if (!key) return;
  // A second press within 3 s deletes: no modal dialog, no accident from one keystroke.
  if (Date.now() - armedDelete > 3000) {
    armedDelete = Date.now();
    return message(`press Delete again to delete ${key}`, "error");
  }
  armedDelete = 0;
  const { outcome } = await client.del(key);
  message(outcome === "deleted" ? `deleted ${key}` : `${key} was already gone`, "ok");
  keyGone(key);
}

function move(step) {
  applyChanges();
  if (view.length === 0) return;
  const at = selected === undefined ? -1 : place(view, selected);
  const next = at < 0 || view[at] !== selected ? 0 : Math.min(view.length - 1, Math.max(0, at + step));
  select(view[next]);
}

// ---- leases -------------------------------------------------------------------------------

async function refreshLeases() {
  const pattern = globRegExp($("lease-filter").value || "*lock*");
  const candidates = names.filter((name) => pattern.test(name)).slice(0, 50);
  const leases = await Promise.all(candidates.map(async (name) => ({ name, found: await client.get(keyBytes.get(name)) })));
  $("leases").replaceChildren(
    ...leases
      .filter(({ found }) => found)
      .map(({ name, found }) => {
        const tr = document.createElement("tr");
        for (const text of [name, readable(found.value).text, found.version?.toString() ?? ""]) {
          const td = document.createElement("td");
          td.textContent = text;
          td.title = text;
          tr.append(td);
        }
        return tr;
      }),
  );
}

// ---- job rollouts and jobs by thing ---------------------------------------------------------

const STATUSES = ["SUCCEEDED", "IN_PROGRESS", "QUEUED", "FAILED", "REJECTED", "TIMED_OUT", "CANCELED", "REMOVED"];
const FAILURES = { FAILED: ["FAILED"], REJECTED: ["REJECTED"], TIMED_OUT: ["TIMED_OUT"], ALL: ["FAILED", "REJECTED", "TIMED_OUT"] };

/** How close a job is to each abort criterion: the failed share of executed things. */
function abortLines(job) {
  const counts = job.executions ?? {};
  const n = (status) => counts[status] ?? 0;
  const executed = n("SUCCEEDED") + n("FAILED") + n("REJECTED") + n("TIMED_OUT");
  return (job.abortConfig?.criteriaList ?? []).map((c) => {
    const failed = FAILURES[c.failureType].reduce((sum, s) => sum + n(s), 0);
    const share = executed ? (100 * failed) / executed : 0;
    const armed = executed >= c.minNumberOfExecutedThings;
    return {
      text:
        `abort: ${c.failureType} ${share.toFixed(1)} % of ${executed} executed ` +
        `(cancels at ${c.thresholdPercentage} % after ${c.minNumberOfExecutedThings})`,
      near: armed && share >= c.thresholdPercentage * 0.8,
    };
  });
}

function rolloutCard(job) {
  const card = document.createElement("div");
  card.className = "rollout";
  card.dataset.job = job.jobId;
  const title = document.createElement("h3");
  title.textContent = job.jobId;
  const status = document.createElement("span");
  status.className = `job-status s-${job.status}`;
  status.textContent = job.status;
  title.append(" ", status);
  const bar = document.createElement("div");
  bar.className = "bar";
  const total = Math.max(1, job.rollout.totalThings);
  for (const s of STATUSES) {
    const count = job.executions?.[s] ?? 0;
    if (!count) continue;
    const part = document.createElement("span");
    part.className = `s-${s}`;
    part.style.width = `${(100 * count) / total}%`;
    part.title = `${s} ${count}`;
    bar.append(part);
  }
  const facts = [`${job.rollout.notifiedThings} of ${job.rollout.totalThings} things notified`];
  const maximum = job.jobExecutionsRolloutConfig?.maximumPerMinute;
  if (job.rollout.ratePerMinute) facts.push(`${Math.round(job.rollout.ratePerMinute)} a minute now`);
  else if (maximum) facts.push(`at most ${maximum} a minute`);
  if (job.targetSelection === "CONTINUOUS") facts.push("continuous");
  const counts = STATUSES.filter((s) => job.executions?.[s]).map((s) => `${s} ${job.executions[s]}`);
  const lines = [facts.join(" · "), counts.join(" · ") || "no executions yet"];
  if (job.rollout.windowClosesAt) lines.push(`maintenance window open: closes in ${until(job.rollout.windowClosesAt)}`);
  if (job.rollout.nextWindowAt) lines.push(`next maintenance window in ${until(job.rollout.nextWindowAt)}`);
  if (job.status === "SCHEDULED" && job.schedulingConfig?.startTime) lines.push(`starts ${job.schedulingConfig.startTime} UTC`);
  card.append(title, bar);
  for (const line of lines) card.append(Object.assign(document.createElement("p"), { textContent: line }));
  for (const { text, near } of abortLines(job)) {
    card.append(Object.assign(document.createElement("p"), { className: near ? "abort near" : "abort", textContent: text }));
  }
  return card;
}

async function refreshRollouts() {
  const pages = await Promise.all(
    ["IN_PROGRESS", "SCHEDULED"].map((status) => client.listJobsPage({ status, maxResults: MAX_ROLLOUTS })),
  );
  const ids = pages.flatMap((page) => page.jobs.map((j) => j.jobId)).slice(0, MAX_ROLLOUTS);
  const jobs = await Promise.all(ids.map((id) => client.describeJob(id).catch(() => null)));
  const shown = jobs.filter(Boolean);
  $("rollouts").replaceChildren(
    ...(shown.length === 0 ? [Object.assign(document.createElement("p"), { className: "muted", textContent: "No rollouts under way." })] : []),
    ...shown.map(rolloutCard),
  );
}

async function refreshJobs() {
  // A page, not the fleet: the latest executions, most recently changed first.
  const { executions } = await client.listJobExecutionsPage({ maxResults: 100 });
  const byThing = new Map();
  for (const e of executions) byThing.set(e.thingName, [...(byThing.get(e.thingName) ?? []), e]);
  const things = [...byThing.keys()].sort();
  $("jobs").replaceChildren(
    ...(things.length === 0 ? [Object.assign(document.createElement("p"), { className: "muted", textContent: "No jobs yet." })] : []),
    ...things.map((thing) => {
      const div = document.createElement("div");
      div.className = "thing";
      const h3 = document.createElement("h3");
      h3.textContent = thing;
      div.append(h3);
      for (const e of byThing.get(thing).sort((a, b) => b.lastUpdatedAt - a.lastUpdatedAt)) {
        const span = document.createElement("span");
        span.className = "job";
        span.innerHTML = "<span></span><span></span>";
        span.children[0].textContent = e.jobId;
        span.children[1].textContent = e.status;
        span.children[1].className = `s-${e.status}`;
        div.append(span);
      }
      return div;
    }),
  );
}

// ---- a device shadow ------------------------------------------------------------------------

/** The shadow on show: its handle and the function that stops its notifications. */
let shown = null;

/** Shows a shadow's document: desired, reported, what is left to do (delta), its version. */
function renderShadow(document_) {
  const box = $("shadow");
  if (!document_) {
    box.replaceChildren(Object.assign(document.createElement("p"), { className: "muted", textContent: "No shadow yet: it is made by its first update." }));
    return;
  }
  const { desired, reported, delta } = document_.state ?? {};
  const dl = document.createElement("dl");
  for (const [term, value, className] of [
    ["desired", desired, ""],
    ["reported", reported, ""],
    ["delta", delta, "delta"],
    ["version", document_.version, ""],
  ]) {
    const dt = Object.assign(document.createElement("dt"), { textContent: term });
    const dd = Object.assign(document.createElement("dd"), { className, textContent: value === undefined ? "—" : JSON.stringify(value, null, 1) });
    dd.dataset.field = term;
    dl.append(dt, dd);
  }
  box.replaceChildren(dl);
}

/** Reads the shadow again (a get answers with its delta, which the documents stream lacks). */
async function refreshShadow(shadow) {
  try {
    renderShadow(await shadow.get());
  } catch (e) {
    if (e.status === 404) renderShadow(null);
    else throw e;
  }
}

/** Shows `thing`'s shadow `name` (empty: the classic one), live: each update's documents read it again. */
async function showShadow() {
  const thing = $("shadow-thing").value.trim();
  const name = $("shadow-name").value.trim() || undefined;
  shown?.stop();
  const shadow = await client.shadow(thing, name);
  const stop = shadow.onNotification((n) => n.stream === "documents" && guarded(refreshShadow)(shadow));
  shown = { shadow, stop };
  await refreshShadow(shadow);
}

// ---- wiring -------------------------------------------------------------------------------

/** Runs an action of the page, showing its error instead of leaving it unhandled. */
function guarded(action) {
  return (...args) =>
    Promise.resolve()
      .then(() => action(...args))
      .catch((e) => message(`${e.name ?? "Error"}: ${e.message}`, "error"));
}

function every(ms, task) {
  const run = async () => {
    try {
      await task();
    } catch (e) {
      setStatus(`${e.message}`, "failed");
    }
    setTimeout(run, ms);
  };
  run();
}

document.addEventListener("keydown", (event) => {
  const typing = event.target instanceof HTMLInputElement || event.target instanceof HTMLTextAreaElement;
  if (event.key === "Escape") {
    event.target.blur?.();
    if (selected) rows.get(selected)?.tr.focus();
    return;
  }
  if (typing) {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && event.target.form) {
      event.preventDefault();
      event.target.form.requestSubmit();
    }
    return;
  }
  const actions = {
    "/": () => $("filter").focus(),
    n: newKey,
    ArrowDown: () => move(1),
    j: () => move(1),
    ArrowUp: () => move(-1),
    k: () => move(-1),
    Home: () => (applyChanges(), view.length && select(view[0])),
    End: () => (applyChanges(), view.length && select(view[view.length - 1])),
    Enter: () => selected && select(selected, { edit: true }),
    Delete: guarded(remove),
  };
  const action = actions[event.key];
  if (action && !event.ctrlKey && !event.metaKey && !event.altKey) {
    event.preventDefault();
    action();
  }
});

$("edit-form").addEventListener("submit", (event) => {
  event.preventDefault();
  guarded(save)();
});
$("delete").addEventListener("click", guarded(remove));
$("shadow-form").addEventListener("submit", (event) => {
  event.preventDefault();
  guarded(showShadow)();
});
$("new-key").addEventListener("click", newKey);
$("filter").addEventListener("input", applyFilter);
$("key-scroller").addEventListener("scroll", schedule, { passive: true });
addEventListener("resize", schedule);

async function main() {
  setStatus(`connecting to ${brokerUrl}…`, "connecting");
  for (;;) {
    try {
      client = await Client.connect(brokerUrl, { clientId: `mqstore-dashboard-${Math.random().toString(16).slice(2, 10)}` });
      break;
    } catch (e) {
      setStatus(`${e.message} (retrying)`, "failed");
      await new Promise((r) => setTimeout(r, 3000));
    }
  }
  addEventListener("pagehide", () => client.close());
  // Events first, then the scan: a key made meanwhile is in one or the other (or both).
  await client.watchKeyspace(
    (event) => (event.created ? keyMade(event.key) : keyGone(keyText(event.key))),
    () => guarded(loadKeys)(),
  );
  await loadKeys();
  every(REFRESH_MS, async () => {
    for (const row of rows.values()) if (row.version) row.tr.children[3].textContent = ago(row.version.wallMs);
    await refreshLeases();
  });
  every(REFRESH_MS, refreshRollouts);
  every(3000, refreshJobs);
}

main();
