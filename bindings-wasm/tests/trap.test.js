// A trap in the WebAssembly module — what a Rust panic is on wasm32, a bug in mqstore — ends
// every client of the process with an InternalError: the call in flight and every later one
// fail, nothing hangs, and nothing is thrown where no caller can catch it. In a file of its
// own: node --test runs each file in a process of its own, and a trap ends the whole process's
// clients (the module's memory may be left half-changed).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { start } from "./harness.js";

const { Client, ClientCore, InternalError, MqstoreError } = await import(process.env.MQSTORE_PACKAGE ?? "../dist/index.js");

let servers;
before(async () => {
  servers = await start();
});
after(async () => {
  await servers?.stop();
});

test("a trap in the module ends every client with an InternalError, and nothing is left uncaught", async () => {
  const uncaught = [];
  const note = (e) => uncaught.push(e);
  process.on("uncaughtException", note);
  process.on("unhandledRejection", note);
  const first = await Client.connect(servers.url);
  const second = await Client.connect(servers.url);
  await first.set("trap/k", "before");
  // From here the module traps as a panic would, the next time a client hands it a message
  // (the answer to the call below): its export throws WebAssembly.RuntimeError.
  const handle = ClientCore.prototype.handle;
  ClientCore.prototype.handle = function () {
    throw new WebAssembly.RuntimeError("unreachable");
  };
  try {
    // A call of each client in flight: whichever answer comes first traps, the other finds
    // the module stopped.
    const secondInFlight = second.get("trap/k").then(
      () => assert.fail("the second call in flight resolved"),
      (e) => e,
    );
    const error = await first.get("trap/k").then(
      () => assert.fail("the call in flight resolved"),
      (e) => e,
    );
    assert.ok(error instanceof InternalError, `${error}`);
    assert.ok(error instanceof MqstoreError);
    assert.equal(error.code, 3);
    assert.match(error.message, /WebAssembly module stopped \(unreachable\): a bug in mqstore, please report it/);
    assert.equal(await secondInFlight, error);
    // Every later call of every client fails the same way, without reaching the module.
    await assert.rejects(first.set("trap/k", "after"), (e) => e === error);
    await assert.rejects(second.get("trap/k"), (e) => e === error);
    const third = await Client.connect(servers.url).then(
      () => assert.fail("a client connected after the trap"),
      (e) => e,
    );
    assert.equal(third, error);
    // Closing is quiet.
    await first.close();
    await second.close();
  } finally {
    ClientCore.prototype.handle = handle;
  }
  // Messages, timers and closes that come after it throw nothing uncaught.
  await new Promise((resolve) => setTimeout(resolve, 300));
  process.off("uncaughtException", note);
  process.off("unhandledRejection", note);
  assert.deepEqual(uncaught, []);
});
