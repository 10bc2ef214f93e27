// The connected client over MQTT 5 on WebSocket, against a real mosquitto + mqstore serve.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { freePort, start } from "./harness.js";

const { Client, MqstoreError, PublishRefusedError } = await import(process.env.MQSTORE_PACKAGE ?? "../dist/index.js");
const text = (bytes) => new TextDecoder().decode(bytes);

let servers;
before(async () => {
  servers = await start();
});
after(async () => {
  await servers?.stop();
});

test("set, get, del, vdel and scan with versions", async () => {
  const client = await Client.connect(servers.url);
  try {
    const set = await client.set("js/one", "hello");
    assert.equal(set.applied, true);
    assert.ok(set.version.wallMs > 0);
    const got = await client.get("js/one");
    assert.equal(text(got.value), "hello");
    assert.equal(got.text, "hello");
    assert.equal(got.version.compare(set.version), 0);
    assert.equal((await client.set("js/one", "other", { nx: true })).applied, false);
    assert.equal((await client.set("js/one", "hello", { nex: true })).applied, true);
    assert.equal((await client.vdel("js/one", "not it")).outcome, "value_mismatch");
    assert.equal((await client.vdel("js/one", "hello")).outcome, "deleted");
    assert.equal(await client.get("js/one"), null);
    assert.equal((await client.del("js/one")).outcome, "absent");
    const binary = new Uint8Array([0, 255, 13, 10]);
    await client.set(new Uint8Array([1, 2]), binary);
    assert.deepEqual((await client.get(new Uint8Array([1, 2]))).value, binary);
    for (let i = 0; i < 12; i++) await client.set(`js-scan/${i}`, "x");
    const keys = (await client.scan("js-scan/*")).map(text).sort();
    assert.equal(keys.length, 12);
    assert.equal(keys[0], "js-scan/0");
  } finally {
    await client.close();
  }
});

test("observe: changes as an async iterator and to a callback", async () => {
  const client = await Client.connect(servers.url);
  const writer = await Client.connect(servers.url);
  try {
    const changes = await client.observe("js/watched");
    const seen = [];
    const stop = await client.onChange("js/watched", (change) => seen.push(change));
    await writer.set("js/watched", "v1");
    const first = await changes.next();
    assert.equal(text(first.value.value), "v1");
    assert.equal(first.value.text, "v1");
    assert.equal(first.value.synthetic, false);
    assert.equal(first.value.gap, false);
    await writer.del("js/watched");
    const second = await changes.next();
    assert.equal(second.value.value, null);
    assert.equal(second.value.gap, false);
    assert.equal(second.value.text, null);
    await changes.return();
    await stop();
    assert.equal(seen.length, 2);
    assert.equal(text(seen[0].key), "js/watched");
  } finally {
    await writer.close();
    await client.close();
  }
});

test("errors are typed and carry the stable codes", async () => {
  const client = await Client.connect(servers.url, { timeoutMs: 5000 });
  try {
    const lease = await client.set("js/lock", "me", { nex: true, expiresMs: 5000 });
    await client.set("js/guarded", "v1", { fencingToken: lease.version });
    await assert.rejects(client.set("js/guarded", "v2"), (e) => e instanceof MqstoreError && e.code === 102 && e.text === "a fencing token is required for this request");
    await assert.rejects(client.set("", "v"), (e) => e instanceof MqstoreError && e.code === 1);
    await assert.rejects(client.set("k", 42), (e) => e instanceof MqstoreError && e.code === 1);
    await assert.rejects(client.set("k", "v", { nx: true, nex: true }), (e) => e.code === 1);
  } finally {
    await client.close();
  }
  await assert.rejects(Client.connect("http://example.invalid"), (e) => e instanceof MqstoreError && e.code === 1);
  const closed = await freePort();
  await assert.rejects(
    Client.connect(`ws://127.0.0.1:${closed}`, { timeoutMs: 2000 }),
    (e) => e instanceof MqstoreError && e.code === 207 && /cannot reach/.test(e.message),
  );
  // The TCP listener is not a WebSocket one.
  await assert.rejects(
    Client.connect(`ws://127.0.0.1:${servers.tcpPort}`, { timeoutMs: 2000 }),
    (e) => e instanceof MqstoreError && e.code === 207,
  );
});

test("a request the broker refuses fails at once with its reason code, and nothing else suffers", async () => {
  // mosquitto 2.0 refuses a message over its message_size_limit with PUBACK reason code 0x95,
  // which MQTT.js cannot read itself.
  const limited = await start({ config: "message_size_limit 50000\n" });
  try {
    const client = await Client.connect(limited.url, { timeoutMs: 5000 });
    try {
      await assert.rejects(
        client.set("js/big", "x".repeat(60_000)),
        (e) =>
          e instanceof PublishRefusedError &&
          e.code === 216 &&
          e.reasonCode === 0x95 &&
          e.message === "the MQTT broker refused the request: Packet too large (reason code 0x95); it was not applied",
      );
      assert.equal(await client.get("js/big"), null);
      assert.equal((await client.set("js/small", "x".repeat(1000))).applied, true);
    } finally {
      await client.close();
    }
  } finally {
    await limited.stop();
  }
});

/** The value "missed" (written while the observer was away) arrives as a synthetic change, and
 * the observation goes on live. */
async function missedThenLive(changes, writer, key) {
  let missed = await changes.next();
  // If the observation's first read was lost in the disconnect, a read-back made before the
  // write reports the value the key held (the client cannot know it began with it).
  if (text(missed.value.value) === "before") {
    assert.equal(missed.value.synthetic, true);
    missed = await changes.next();
  }
  assert.equal(text(missed.value.value), "missed");
  assert.equal(missed.value.synthetic, true);
  assert.equal(missed.value.gap, true);
  await writer.set(key, "live");
  const live = await changes.next();
  assert.equal(text(live.value.value), "live");
  assert.equal(live.value.synthetic, false);
  assert.equal(live.value.gap, false);
  await changes.return();
}

test("a change missed while disconnected arrives as a synthetic change", async () => {
  const client = await Client.connect(servers.url, { clientId: "js-observer", reconnectMs: 2000 });
  const writer = await Client.connect(servers.url);
  try {
    await writer.set("js/resumed", "before");
    const changes = await client.observe("js/resumed");
    // Another connection with the observer's client id takes its session over: the observer is
    // disconnected (and reconnects after 2 s); the write lands while it is away.
    const impostor = await Client.connect(servers.url, { clientId: "js-observer", reconnectMs: 60_000 });
    await impostor.close();
    await writer.set("js/resumed", "missed");
    await missedThenLive(changes, writer, "js/resumed");
  } finally {
    await writer.close();
    await client.close();
  }
});

test("a lease held by one client is refused to another, then taken when released", async () => {
  const a = await Client.connect(servers.url, { clientId: "js-holder" });
  const b = await Client.connect(servers.url, { clientId: "js-contender" });
  try {
    const held = await a.lease("js/lease", 5000);
    assert.ok(held.held);
    assert.equal(await b.lease("js/lease", 5000), null);
    await a.set("js/fenced", "from a", { fencingToken: held.fencingToken });
    // B waits; A releases; B takes it with a newer token, and A's old one is refused.
    const waiting = b.lease("js/lease", 5000, { waitMs: 20_000 });
    assert.equal(await held.release(), true);
    assert.equal(held.held, false);
    const taken = await waiting;
    assert.ok(taken.held);
    assert.equal(taken.fencingToken.compare(held.fencingToken), 1);
    await b.set("js/fenced", "from b", { fencingToken: taken.fencingToken });
    await assert.rejects(
      a.set("js/fenced", "stale", { fencingToken: held.fencingToken }),
      (e) => e instanceof MqstoreError && e.code === 104,
    );
    assert.equal(text((await a.get("js/fenced")).value), "from b");
    assert.equal(await taken.release(), true);
  } finally {
    await b.close();
    await a.close();
  }
});

test("a broker restart during an observation: what was missed arrives as a synthetic change", async () => {
  // Reconnects 5 s after the broker went away: the write below lands before that.
  const client = await Client.connect(servers.url, { reconnectMs: 5000 });
  try {
    const observer = client;
    await observer.set("js/restarted", "before");
    const changes = await observer.observe("js/restarted");
    await servers.restartBroker();
    // The server reconnects by itself (backoff from 100 ms); write as soon as it answers.
    const writer = await Client.connect(servers.url, { timeoutMs: 1000 });
    try {
      for (let attempt = 0; ; attempt++) {
        try {
          await writer.set("js/restarted", "missed");
          break;
        } catch (e) {
          if (attempt > 20 || e.code !== 202) throw e;
        }
      }
      await missedThenLive(changes, writer, "js/restarted");
    } finally {
      await writer.close();
    }
  } finally {
    await client.close();
  }
});

test("an unhandled rejection never comes from a client whose broker vanished", async () => {
  const unhandled = [];
  const onUnhandled = (reason) => unhandled.push(reason);
  process.on("unhandledRejection", onUnhandled);
  try {
    const client = await Client.connect(servers.url, { reconnectMs: 500, timeoutMs: 1500 });
    const lease = await client.lease("js/vanishing", 3000);
    await client.onChange("js/vanishing", () => {});
    await servers.stopBroker();
    // Calls while the broker is away fail with a typed error (asked while it is away: once it
    // is back, the call may well succeed).
    await assert.rejects(client.get("js/vanishing"), (e) => e instanceof MqstoreError && [202, 203].includes(e.code));
    await new Promise((r) => setTimeout(r, 1500)); // renewals fail in the background
    assert.ok(lease);
    // Closing while the broker is away ends at once (MQTT.js alone would wait for ever to
    // deliver the goodbye).
    await client.close();
    await assert.rejects(client.get("js/vanishing"), (e) => e instanceof MqstoreError && e.code === 203);
  } finally {
    process.off("unhandledRejection", onUnhandled);
    await servers.startBroker();
  }
  assert.deepEqual(unhandled, []);
});

test("leader election: the second candidate leads once the first steps down", async () => {
  const a = await Client.connect(servers.url, { clientId: "js-leader-a" });
  const b = await Client.connect(servers.url, { clientId: "js-leader-b" });
  try {
    const first = await a.lead("js/leader", 5000);
    let bLeads = false;
    const second = b.lead("js/leader", 5000).then((lease) => {
      bLeads = true;
      return lease;
    });
    assert.equal(text((await a.get("js/leader")).value), "js-leader-a");
    assert.equal(bLeads, false);
    await first.release();
    const lease = await second;
    assert.ok(lease.held);
    assert.equal((await b.get("js/leader")).text, "js-leader-b");
    await lease.release();
  } finally {
    await b.close();
    await a.close();
  }
});
