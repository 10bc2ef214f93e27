// The mqstore dashboard: keys (SCAN, live over KEYNOTIFY), leases and jobs, straight from the
// browser to the broker over MQTT on WebSocket with the npm package. No framework.
import { Client } from "mqstore";

const params = new URLSearchParams(location.search);
const brokerUrl = params.get("broker") ?? `ws://${location.hostname || "127.0.0.1"}:9001`;
/** Rows shown at most (each is observed: the server bounds registrations per client). */
const MAX_ROWS = 500;
const REFRESH_MS = 2000;

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

/** key text -> { key, value, version, tr, stop } */
const rows = new Map();
let client;
let selected;

// ---- the key table ------------------------------------------------------------------------

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

async function addRow(key) {
  const name = keyText(key);
  const tr = document.createElement("tr");
  tr.dataset.key = name;
  tr.tabIndex = -1;
  tr.innerHTML = "<td></td><td></td><td></td><td></td>";
  tr.addEventListener("click", () => select(name, { edit: true }));
  const row = { key, name, value: null, version: null, tr, stop: null };
  rows.set(name, row);
  placeRow(row);
  row.stop = await client.onChange(key, (change) => {
    if (change.value === null) return removeRow(name);
    row.value = change.value;
    row.version = change.version;
    render(row);
    flash(tr);
    if (selected === name && document.activeElement !== $("edit-value")) fillEditor(row);
  });
  const found = await client.get(key);
  if (!found) return removeRow(name);
  row.value = found.value;
  row.version = found.version;
  render(row);
}

/** Keeps the table sorted by key. */
function placeRow(row) {
  const body = $("rows");
  const after = [...body.children].find((tr) => tr.dataset.key > row.name);
  body.insertBefore(row.tr, after ?? null);
  updateCount();
}

function removeRow(name) {
  const row = rows.get(name);
  if (!row) return;
  rows.delete(name);
  row.tr.remove();
  row.stop?.().catch(() => {});
  if (selected === name) selected = undefined;
  updateCount();
}

function updateCount() {
  $("key-count").textContent = `${rows.size}${rows.size >= MAX_ROWS ? "+" : ""}`;
  $("empty").hidden = rows.size > 0;
}

function flash(tr) {
  tr.classList.remove("flash");
  void tr.offsetWidth; // restart the animation
  tr.classList.add("flash");
}

let pattern = "*";
async function refreshKeys() {
  const keys = (await client.scan(pattern || "*")).slice(0, MAX_ROWS);
  const names = new Set(keys.map(keyText));
  for (const name of [...rows.keys()]) if (!names.has(name)) removeRow(name);
  await Promise.all(keys.filter((k) => !rows.has(keyText(k))).map(addRow));
  for (const row of rows.values()) if (row.version) row.tr.children[3].textContent = ago(row.version.wallMs);
}

// ---- selection and the editor ---------------------------------------------------------------

function select(name, { edit = false } = {}) {
  for (const tr of $("rows").querySelectorAll("tr.selected")) tr.classList.remove("selected");
  const row = rows.get(name);
  selected = row ? name : undefined;
  if (!row) return;
  row.tr.classList.add("selected");
  row.tr.scrollIntoView({ block: "nearest" });
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
}

function move(step) {
  const names = [...$("rows").children].map((tr) => tr.dataset.key);
  if (names.length === 0) return;
  const at = names.indexOf(selected);
  select(names[Math.min(names.length - 1, Math.max(0, at < 0 ? 0 : at + step))]);
}

// ---- leases and jobs ----------------------------------------------------------------------

async function refreshLeases() {
  const body = $("leases");
  const keys = (await client.scan($("lease-filter").value || "*lock*")).slice(0, 50);
  const leases = await Promise.all(keys.map(async (key) => ({ key, found: await client.get(key) })));
  body.replaceChildren(
    ...leases
      .filter(({ found }) => found)
      .sort((a, b) => keyText(a.key).localeCompare(keyText(b.key)))
      .map(({ key, found }) => {
        const tr = document.createElement("tr");
        for (const text of [keyText(key), readable(found.value).text, found.version?.toString() ?? ""]) {
          const td = document.createElement("td");
          td.textContent = text;
          td.title = text;
          tr.append(td);
        }
        return tr;
      }),
  );
}

async function refreshJobs() {
  const executions = await client.listJobExecutions();
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
$("new-key").addEventListener("click", newKey);
$("filter").addEventListener("input", () => {
  pattern = $("filter").value;
  guarded(refreshKeys)();
});

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
  setStatus(`connected to ${brokerUrl}`, "connected");
  addEventListener("pagehide", () => client.close());
  every(REFRESH_MS, async () => {
    await refreshKeys();
    setStatus(`connected to ${brokerUrl}`, "connected");
  });
  every(REFRESH_MS, refreshLeases);
  every(3000, refreshJobs);
}

main();
