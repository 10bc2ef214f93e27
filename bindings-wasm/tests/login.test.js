// A broker that takes only a user with a password: the client logs in with `username` and
// `password`; a wrong password or none is refused with a typed error.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { start } from "./harness.js";

const { Client, BrokerRefusedError } = await import(process.env.MQSTORE_PACKAGE ?? "../dist/index.js");

const login = { username: "dashboard", password: "s3cret words" };
let servers;
before(async () => {
  servers = await start({ login });
});
after(async () => {
  await servers?.stop();
});

test("the client logs in with a user name and password", async () => {
  const client = await Client.connect(servers.url, login);
  try {
    await client.set("js/login", "in");
    assert.equal((await client.get("js/login")).text, "in");
  } finally {
    await client.close();
  }
});

test("a wrong password, or none, is refused with a BrokerRefusedError", async () => {
  for (const options of [{ username: "dashboard", password: "wrong" }, {}]) {
    await assert.rejects(
      Client.connect(servers.url, { ...options, timeoutMs: 5000 }),
      (e) => e instanceof BrokerRefusedError && e.code === 208 && /refused/.test(e.message),
    );
  }
});
