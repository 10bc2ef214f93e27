// Device shadows (AWS IoT's Device Shadow API) through the connected client, against a real
// mosquitto + mqstore serve.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { start } from "./harness.js";

const { Client, InvalidArgumentError, StatusError } = await import(process.env.MQSTORE_PACKAGE ?? "../dist/index.js");

let servers;
let app;
let device;
before(async () => {
  servers = await start();
  app = await Client.connect(servers.url);
  device = await Client.connect(servers.url);
});
after(async () => {
  await app?.close();
  await device?.close();
  await servers?.stop();
});

/** A rejection with AWS's code and message. */
const refused = (status, message) => (e) => e instanceof StatusError && e.status === status && e.message.endsWith(`: ${message}`);

/** Resolves with the next `count` notifications `shadow` hears. */
function next(shadow, count) {
  return new Promise((resolve) => {
    const heard = [];
    const stop = shadow.onNotification((n) => {
      heard.push(n);
      if (heard.length === count) {
        stop();
        resolve(heard);
      }
    });
  });
}

test("a shadow from desired to reported, a named one, a conflict, a deletion", async () => {
  const mine = await device.shadow("js-lamp");
  const theirs = await app.shadow("js-lamp");
  assert.equal(mine.thing, "js-lamp");
  assert.equal(mine.name, null);
  await assert.rejects(mine.get(), refused(404, "No shadow exists with name: 'js-lamp'"));

  const heard = next(mine, 2);
  const accepted = await theirs.update({ desired: { on: true, level: 3 } });
  assert.equal(accepted.version, 1);
  assert.deepEqual(accepted.state, { desired: { on: true, level: 3 } });
  const [delta, documents] = await heard;
  assert.equal(delta.stream, "delta");
  assert.deepEqual(delta.body.state, { on: true, level: 3 });
  assert.equal(documents.stream, "documents");
  assert.equal(documents.body.current.version, 1);

  await mine.update({ reported: { on: true, level: 1 } }, { version: 1 });
  const got = await mine.get();
  assert.deepEqual(got.state.delta, { level: 3 });
  assert.equal(got.version, 2);
  await assert.rejects(theirs.update({ desired: { level: 1 } }, { version: 1 }), refused(409, "Version conflict"));
  await theirs.update({ desired: { level: null } });
  assert.deepEqual((await mine.get()).state.desired, { on: true }, "null removes a field");

  const config = await device.shadow("js-lamp", "config");
  assert.equal(config.name, "config");
  await assert.rejects(config.get(), refused(404, "No shadow exists with name: 'config'"));
  assert.equal((await config.update({ reported: { fw: "1.0" } })).version, 1);
  assert.equal((await theirs.delete()).version, 3);
  await assert.rejects(mine.get(), (e) => e instanceof StatusError && e.status === 404);
  assert.deepEqual((await config.get()).state.reported, { fw: "1.0" });
  assert.equal((await mine.update({ reported: { on: false } })).version, 4, "the next shadow follows the deleted one's version");
});

test("refused updates change nothing; bad arguments are refused before anything is sent", async () => {
  const shadow = await app.shadow("js-refused");
  await shadow.update({ reported: { ok: true } });
  for (const [state, status, message] of [
    [{ desired: [1] }, 400, "Desired node must be an object"],
    [{ color: "red" }, 400, "State contains an invalid node"],
    [{ desired: { big: "x".repeat(9000) } }, 413, "The payload exceeds the maximum size allowed"],
  ]) {
    await assert.rejects(shadow.update(state), refused(status, message));
  }
  const got = await shadow.get();
  assert.equal(got.version, 1, "the refusals changed nothing");
  assert.deepEqual(got.state, { reported: { ok: true } });
  // A thing or shadow name the service would refuse.
  await assert.rejects(app.shadow("js/lamp"), (e) => e instanceof StatusError && e.status === 400);
  await assert.rejects(app.shadow("js-lamp", "a name with spaces"), (e) => e instanceof StatusError && e.status === 400);
  const cyclic = {};
  cyclic.self = cyclic;
  await assert.rejects(shadow.update(cyclic), InvalidArgumentError);
});
