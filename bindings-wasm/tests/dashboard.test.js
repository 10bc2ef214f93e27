// The dashboard (examples/dashboard) in a real headless Chromium (Debian's `chromium`, driven by
// playwright-core), against mosquitto's WebSocket listener + mqstore serve: a key set with the
// CLI appears, an edit on the page reads back with the CLI, a deletion disappears, a job's
// rollout shows its counts, rate, abort threshold and maintenance window, jobs show per thing,
// a thing's shadow follows its updates; the package refuses Node's TLS settings in the browser;
// 100,000 keys load without re-scanning and with only the rows on screen in the page; no
// console errors. The screenshots are kept in $MQSTORE_ARTIFACTS (default target/artifacts/).
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { dirname, join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { chromium } from "playwright-core";

import { freePort, mqstoreBin, repo, start } from "./harness.js";

const { Client } = await import(process.env.MQSTORE_PACKAGE ?? "../dist/index.js");

const run = promisify(execFile);
const chromiumPath = process.env.CHROMIUM ?? "/usr/bin/chromium";
// The package the page loads: the tarball's installed copy when MQSTORE_PACKAGE names it.
const packageDir = process.env.MQSTORE_PACKAGE
  ? join(dirname(fileURLToPath(process.env.MQSTORE_PACKAGE)), "..")
  : fileURLToPath(new URL("..", import.meta.url));

let servers;
let page;
let browser;
let server;
const problems = [];

/** The mqstore CLI against the test broker. */
async function cli(...args) {
  const { stdout } = await run(mqstoreBin, ["--port", String(servers.tcpPort), ...args]);
  return stdout.trim();
}

before(async () => {
  assert.ok(existsSync(chromiumPath), `no Chromium at ${chromiumPath}: apt-get install chromium (scripts/test-wasm does)`);
  servers = await start({ metrics: true });
  const port = await freePort();
  server = spawn(
    process.execPath,
    [join(repo, "examples/dashboard/serve.mjs"), "--port", String(port), "--broker", servers.url, "--package", packageDir],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  const url = await new Promise((resolve, reject) => {
    server.stdout.on("data", (chunk) => {
      const found = /(http:\/\/\S+)/.exec(chunk.toString());
      if (found) resolve(found[1]);
    });
    server.on("exit", (code) => reject(new Error(`the dashboard server exited (${code})`)));
  });
  browser = await chromium.launch({ executablePath: chromiumPath, args: ["--no-sandbox"] });
  page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.on("console", (m) => m.type() === "error" && problems.push(`console: ${m.text()}`));
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("requestfailed", (r) => problems.push(`request failed: ${r.url()}`));
  await page.goto(url);
  await page.locator("#status.connected").waitFor({ timeout: 20_000 });
});

after(async () => {
  await browser?.close();
  server?.kill();
  await servers?.stop();
});

const row = (key) => page.locator(`#rows tr[data-key="${key}"]`);

test("the dashboard shows keys live, edits them and sees deletions", async () => {
  // Set with the CLI: the row appears with its value and version.
  await cli("set", "web/greeting", "hello from the CLI");
  await row("web/greeting").waitFor({ timeout: 10_000 });
  await assert.doesNotReject(row("web/greeting").locator("td", { hasText: "hello from the CLI" }).waitFor({ timeout: 10_000 }));
  assert.match(await row("web/greeting").locator("td").nth(2).textContent(), /^\d+:\d+:/);

  // A change made elsewhere shows without reloading (KEYNOTIFY).
  await cli("set", "web/greeting", "changed by the CLI");
  await row("web/greeting").locator("td", { hasText: "changed by the CLI" }).waitFor({ timeout: 10_000 });

  // Edit on the page, from the keyboard: select, Enter, type, Ctrl+Enter; read it back with the CLI.
  await row("web/greeting").click();
  await page.locator("#edit-value").fill("edited in the browser");
  await page.keyboard.press("Control+Enter");
  await page.locator("#edit-message.ok").waitFor({ timeout: 10_000 });
  assert.equal(await cli("get", "web/greeting"), "edited in the browser");

  // A new key from the page.
  await page.keyboard.press("Escape");
  await page.keyboard.press("n");
  await page.keyboard.type("web/new");
  await page.keyboard.press("Tab");
  await page.keyboard.type("made on the page");
  await page.keyboard.press("Control+Enter");
  await row("web/new").waitFor({ timeout: 10_000 });
  assert.equal(await cli("get", "web/new"), "made on the page");

  // Deleted with the CLI: the row goes.
  await cli("del", "web/greeting");
  await row("web/greeting").waitFor({ state: "detached", timeout: 10_000 });

  // Deleted on the page (Delete twice: the first press only asks): gone for the CLI too.
  await row("web/new").click();
  await page.locator("#delete").click();
  await page.locator("#edit-message", { hasText: "press Delete again" }).waitFor({ timeout: 5_000 });
  assert.equal(await cli("get", "web/new"), "made on the page");
  await page.locator("#delete").click();
  await row("web/new").waitFor({ state: "detached", timeout: 10_000 });
  // `mqstore get` of an absent key prints (nil) and exits with 1.
  await assert.rejects(cli("get", "web/new"), (e) => e.code === 1 && e.stdout.trim() === "(nil)");
  await cli("set", "web/new", "made again by the CLI");
  await row("web/new").waitFor({ timeout: 10_000 });

  // The SCAN filter narrows the list.
  await cli("set", "other/thing", "x");
  await row("other/thing").waitFor({ timeout: 10_000 });
  await page.locator("#filter").fill("web/*");
  await row("other/thing").waitFor({ state: "detached", timeout: 10_000 });
  assert.equal(await row("web/new").count(), 1);
});

test("the dashboard shows lease holders with their fencing tokens, and jobs per thing", async () => {
  await cli("set", "orders-lock", "worker-7", "--nx", "--px", "60000");
  const lease = page.locator("#leases tr", { hasText: "orders-lock" });
  await lease.waitFor({ timeout: 10_000 });
  assert.equal(await lease.locator("td").nth(1).textContent(), "worker-7");
  assert.match(await lease.locator("td").nth(2).textContent(), /^\d+:\d+:/);

  await cli("jobs", "create", "web-job-1", "--targets", "web-thing-1,web-thing-2", "--document", '{"op":"reboot"}');
  const thing = page.locator("#jobs .thing", { hasText: "web-thing-2" });
  await thing.locator(".job", { hasText: "web-job-1" }).waitFor({ timeout: 10_000 });
  assert.match(await thing.textContent(), /QUEUED/);

  await page.screenshot({ path: join(await artifacts(), "dashboard.png"), fullPage: true });
  assert.deepEqual(problems, []);
});

test("in the browser, tls settings are refused before connecting: the browser checks wss:// itself", async () => {
  const refusal = await page.evaluate(async () => {
    const { Client } = await import("mqstore");
    try {
      await Client.connect("wss://127.0.0.1:1", { tls: { ca: "-----BEGIN CERTIFICATE-----" } });
      return "connected";
    } catch (e) {
      return `${e.name} ${e.code}: ${e.message}`;
    }
  });
  assert.match(refusal, /^InvalidArgumentError 1: tls settings are for Node/);
});

test("the dashboard shows a thing's shadow, live: desired, reported, delta, version", async () => {
  await page.locator("#shadow-thing").fill("web-lamp");
  await page.locator("#shadow-form button").click();
  await page.locator("#shadow p", { hasText: "No shadow yet" }).waitFor({ timeout: 10_000 });
  const field = (name) => page.locator(`#shadow dd[data-field="${name}"]`);

  await cli("shadow", "update", "web-lamp", '{"desired": {"power": "on", "level": 3}}');
  await field("version").filter({ hasText: "1" }).waitFor({ timeout: 10_000 });
  assert.deepEqual(JSON.parse(await field("desired").textContent()), { power: "on", level: 3 });
  assert.deepEqual(JSON.parse(await field("delta").textContent()), { power: "on", level: 3 });

  // The device reports: the page follows, and the delta shrinks to what is left.
  await cli("shadow", "update", "web-lamp", '{"reported": {"power": "on", "level": 1}}');
  await field("version").filter({ hasText: "2" }).waitFor({ timeout: 10_000 });
  assert.deepEqual(JSON.parse(await field("reported").textContent()), { power: "on", level: 1 });
  assert.deepEqual(JSON.parse(await field("delta").textContent()), { level: 3 });
  await page.screenshot({ path: join(await artifacts(), "dashboard-shadow.png"), fullPage: true });

  // A named shadow is another document.
  await page.locator("#shadow-name").fill("config");
  await page.locator("#shadow-form button").click();
  await page.locator("#shadow p", { hasText: "No shadow yet" }).waitFor({ timeout: 10_000 });
  assert.deepEqual(problems, []);
});

async function artifacts() {
  const dir = process.env.MQSTORE_ARTIFACTS ?? join(repo, "target/artifacts");
  await mkdir(dir, { recursive: true });
  return dir;
}

test("the dashboard shows each rollout: counts, rate, abort threshold and maintenance window", async () => {
  const things = Array.from({ length: 10 }, (_, i) => `web-roll-${i}`);
  await cli(
    "jobs", "create", "web-rollout", "--targets", things.join(","), "--document", "{}",
    "--max-per-minute", "1000", "--abort", "FAILED:50:4",
  );
  // One execution canceled by the operator, one failed by its device, one succeeded: the panel
  // shows the counts and the failures' share of what was executed.
  const card = page.locator('#rollouts .rollout[data-job="web-rollout"]');
  await card.waitFor({ timeout: 10_000 });
  await card.locator("p", { hasText: "10 of 10 things notified" }).waitFor({ timeout: 10_000 });
  await card.locator("p", { hasText: "1000 a minute" }).waitFor({ timeout: 10_000 });
  await cli("jobs", "cancel-execution", "web-rollout", "--thing", things[0]);
  const devices = await Client.connect(servers.url, { clientId: "dashboard-devices" });
  await (await devices.jobs(things[1])).update({ jobId: "web-rollout", status: "FAILED" });
  await (await devices.jobs(things[2])).update({ jobId: "web-rollout", status: "SUCCEEDED" });
  await card.locator("p", { hasText: "CANCELED 1" }).waitFor({ timeout: 10_000 });
  await card.locator("p.abort", { hasText: "abort: FAILED 50.0 % of 2 executed (cancels at 50 % after 4)" }).waitFor({ timeout: 10_000 });
  assert.equal(await card.locator(".bar span").count(), 4, "SUCCEEDED, QUEUED, FAILED and CANCELED");
  await devices.close();

  // A job that waits for its maintenance window says when it opens.
  await cli(
    "jobs", "create", "web-window", "--targets", "web-win-1", "--document", "{}",
    "--window", `cron(0 ${(new Date().getUTCHours() + 3) % 24} ? * * *)=30`,
  );
  const windowed = page.locator('#rollouts .rollout[data-job="web-window"]');
  await windowed.locator("p", { hasText: /next maintenance window in (2h|3h)/ }).waitFor({ timeout: 10_000 });
  await page.screenshot({ path: join(await artifacts(), "dashboard-rollouts.png"), fullPage: true });
  await cli("jobs", "cancel", "web-window");
  await cli("jobs", "cancel", "web-rollout");
  assert.deepEqual(problems, []);
});

/** SCAN requests the server has answered so far. */
async function scans() {
  const found = /mqstore_requests_total\{command="SCAN",outcome="ok"\} (\d+)/.exec(await servers.metrics());
  return found ? Number(found[1]) : 0;
}

test("100,000 keys: one scan, then keyspace events; only the rows on screen are in the page", { timeout: 300_000 }, async () => {
  // The keys, written from Node with many SETs in flight while no page is open (the page
  // under test loads them afterwards).
  const url = page.url();
  await page.goto("about:blank");
  const writer = await Client.connect(servers.url, { clientId: "dashboard-filler", timeoutMs: 60_000 });
  const n = 100_000;
  const name = (i) => `big/${String(i).padStart(6, "0")}`;
  for (let start = 0; start < n; start += 1000) {
    await Promise.all(Array.from({ length: Math.min(1000, n - start) }, (_, i) => writer.set(name(start + i), "v")));
  }
  await page.goto(url);
  await page.locator("#status.connected").waitFor({ timeout: 60_000 });
  await page.locator("#filter").fill("big/*");
  await page.locator("#key-count", { hasText: /^100000$/ }).waitFor({ timeout: 30_000 });
  const rendered = await page.locator("#rows tr[data-key]").count();
  assert.ok(rendered > 0 && rendered <= 100, `only the rows on screen are in the page: ${rendered}`);

  // The end of the list is reachable (End), and its rows show their values.
  await page.locator("#key-scroller").click({ position: { x: 5, y: 40 } });
  await page.keyboard.press("Escape");
  await page.keyboard.press("End");
  await row(name(n - 1)).locator("td", { hasText: "v" }).waitFor({ timeout: 10_000 });
  assert.ok((await page.locator("#rows tr[data-key]").count()) <= 100);

  // New and deleted keys arrive as events: no SCAN meanwhile.
  const before = await scans();
  await cli("set", "big/zzz-new", "made later");
  await page.locator("#key-count", { hasText: /^100001$/ }).waitFor({ timeout: 10_000 });
  await page.keyboard.press("End");
  await row("big/zzz-new").waitFor({ timeout: 10_000 });
  await cli("del", name(0));
  await page.locator("#key-count", { hasText: /^100000$/ }).waitFor({ timeout: 10_000 });
  // Over more than one of the old refresh periods (2 s), the page scanned nothing.
  await new Promise((r) => setTimeout(r, 2500));
  assert.equal(await scans(), before, "the page learned of the keys without scanning");

  // The page still answers at once: a filter over the 100,000 names narrows the list.
  await page.locator("#filter").fill("big/09999?");
  await page.locator("#key-count", { hasText: /^10$/ }).waitFor({ timeout: 10_000 });
  await page.screenshot({ path: join(await artifacts(), "dashboard-100k.png") });
  await writer.close();
  assert.deepEqual(problems, []);
});
