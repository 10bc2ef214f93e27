// The client state machine through the package: a call becomes a publish with every MQTT 5
// property; an answer fed back becomes the call's event; time makes a call fail.
import assert from "node:assert/strict";
import { before, test } from "node:test";

const { init, ClientCore, codec, errorKinds, errorOf, MqstoreError, ServiceError } = await import(
  process.env.MQSTORE_PACKAGE ?? "../dist/index.js"
);
const bytes = (text) => new TextEncoder().encode(text);

before(() => init());

test("a call becomes a publish, and its answer an event", () => {
  const core = new ClientCore("js-client", 12345, 2000);
  // The state store's three, and where jobs operator answers and command replies come.
  const filters = core.subscriptions();
  assert.equal(filters.length, 5);
  assert.ok(filters.includes("clients/js-client/mqstore/jobs/v1/response"), filters.join());
  assert.ok(filters.includes("clients/js-client/mqstore/commands/v1/response"), filters.join());
  const call = core.call({ op: "SET", key: "k", value: "v" }, {}, 1_700_000_000_000);
  const [publish] = core.takePublishes();
  assert.match(publish.topic, /\/command\/invoke$/);
  assert.equal(publish.qos, 1);
  assert.equal(publish.correlationData.length, 16);
  assert.equal(publish.contentType, "application/octet-stream");
  assert.equal(publish.messageExpiryInterval, 2);
  const props = Object.fromEntries(publish.userProperties);
  assert.equal(props.__srcId, "js-client");
  assert.match(props.__ts, /^\d+:\d+:js-client$/);
  assert.deepEqual(codec.decodeRequest(publish.payload), {
    op: "SET",
    key: bytes("k"),
    value: bytes("v"),
  });

  // The server's answer: +OK with the key's version.
  core.handle(
    {
      topic: publish.responseTopic,
      payload: bytes("+OK\r\n"),
      correlationData: publish.correlationData,
      userProperties: [["__ts", "1700000000001:0:server"]],
    },
    1_700_000_000_001,
  );
  const [event] = core.takeEvents();
  assert.equal(event.kind, "completed");
  assert.equal(event.call, call);
  assert.equal(event.op, "SET");
  assert.deepEqual(event.response, { kind: "ok" });
  assert.equal(event.version.toString(), "001700000000001:00000:server");
});

test("a call without an answer times out at its deadline", () => {
  const core = new ClientCore("js-client", 1, 2000);
  const call = core.call({ op: "GET", key: "k" }, {}, 1000);
  core.takePublishes();
  assert.equal(core.nextDeadline(), 3000);
  core.expire(2999);
  assert.deepEqual(core.takeEvents(), []);
  core.expire(3000);
  const [event] = core.takeEvents();
  assert.equal(event.call, call);
  assert.equal(event.error.code, 202);
  assert.equal(core.nextDeadline(), undefined);
});

test("a publish the broker refuses fails its call alone, with the reason code", () => {
  const core = new ClientCore("js-client", 1, 2000);
  const refused = core.call({ op: "SET", key: "big", value: "v" }, {}, 1000);
  const waiting = core.jobsOperate("describeJob", { jobId: "j1" }, 1000);
  const publishes = core.takePublishes();
  // Each publish names its call: what the driver gives back when the broker refuses it.
  assert.deepEqual(publishes.map((p) => p.call), [refused, waiting]);
  core.publishRefused(refused, 0x95);
  const [event] = core.takeEvents();
  assert.equal(event.call, refused);
  assert.equal(event.error.code, 216);
  assert.equal(event.error.reasonCode, 0x95);
  assert.equal(event.error.message, "the MQTT broker refused the request: Packet too large (reason code 0x95); it was not applied");
  // Once only; the other call still waits (and refusing it fails it the same way).
  core.publishRefused(refused, 0x95);
  assert.deepEqual(core.takeEvents(), []);
  core.publishRefused(waiting, 0x87);
  const [jobs] = core.takeEvents();
  assert.equal(jobs.call, waiting);
  assert.equal(jobs.error.code, 216);
  assert.equal(jobs.error.reasonCode, 0x87);
});

test("bad arguments throw and queue nothing", () => {
  assert.throws(() => new ClientCore("a:b", 1, 0), (e) => e.code === 1);
  const core = new ClientCore("js-client", 1, 0);
  assert.throws(() => core.call({ op: "GET", key: "" }, {}, 0), (e) => e.code === 1);
  assert.throws(() => core.handle({ topic: 7 }, 0), (e) => e.code === 1);
  assert.deepEqual(core.takePublishes(), []);
  assert.ok(MqstoreError.prototype instanceof Error);
});

test("every kind of error the core defines has its class, with its name and code", () => {
  const kinds = errorKinds();
  assert.equal(kinds.length, 31);
  for (const { code, name } of kinds) {
    const error = errorOf("m", code);
    assert.equal(error.constructor.name, `${name}Error`, `code ${code}`);
    assert.equal(error.name, `${name}Error`);
    assert.equal(error.code, code);
    assert.ok(error instanceof MqstoreError);
    assert.equal(error instanceof ServiceError, code < 200, `code ${code}`);
  }
});
