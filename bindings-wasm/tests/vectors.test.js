// The shared wire vectors (testdata/state-store.json) through the package's codec and HLC.
// Imports the built package (dist/, pkg/), as users do; `MQSTORE_PACKAGE` points at another
// copy of it (the installed `npm pack` tarball).
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { before, test } from "node:test";

const { init, codec, Hlc, parseHlc, MqstoreError } = await import(
  process.env.MQSTORE_PACKAGE ?? "../dist/index.js"
);
const vectors = JSON.parse(
  await readFile(new URL("../../testdata/state-store.json", import.meta.url), "utf8"),
);
const bytes = (text) => new TextEncoder().encode(text);
const text = (array) => new TextDecoder().decode(array);

before(() => init());

/** The vector's command with its strings as bytes, as the codec returns them. */
function asBytes(command) {
  const out = { ...command };
  for (const name of ["key", "value", "pattern", "token"]) {
    if (name in out) out[name] = bytes(out[name]);
  }
  if (out.px_ms !== undefined) {
    out.pxMs = out.px_ms;
    delete out.px_ms;
  }
  return out;
}

test("requests encode to the vector bytes and decode back", () => {
  for (const v of vectors.requests) {
    const request = asBytes(v.command);
    assert.equal(text(codec.encodeRequest(request)), v.bytes, v.name);
    assert.deepEqual(codec.decodeRequest(bytes(v.bytes)), request, v.name);
  }
});

test("requests only the engine accepts decode like their twin", () => {
  for (const v of vectors.requests_accepted_by_engine_only) {
    const twin = vectors.requests.find((r) => r.name === v.same_as);
    assert.deepEqual(codec.decodeRequest(bytes(v.bytes)), asBytes(twin.command), v.name);
  }
});

test("bad requests throw the state store's error", () => {
  for (const v of vectors.bad_requests) {
    assert.throws(
      () => codec.decodeRequest(bytes(v.bytes)),
      (e) => e instanceof MqstoreError && e.text === v.error && e.code >= 101 && e.code <= 199,
      JSON.stringify(v.bytes),
    );
  }
});

test("responses decode to the vector values", () => {
  for (const v of vectors.responses) {
    const decoded = { ...v.decoded };
    if ("value" in decoded) decoded.value = bytes(decoded.value);
    if ("keys" in decoded) decoded.keys = decoded.keys.map(bytes);
    if ("token" in decoded) decoded.token = bytes(decoded.token);
    const got = codec.decodeResponse(bytes(v.bytes));
    if (got.kind === "error") delete got.code;
    assert.deepEqual(got, decoded, v.name);
  }
  assert.throws(() => codec.decodeResponse(bytes("+OK")), (e) => e.code === 204);
});

test("notifications decode to the vector values", () => {
  for (const v of vectors.notifications) {
    const decoded = { ...v.decoded };
    if ("value" in decoded) decoded.value = bytes(decoded.value);
    assert.deepEqual(codec.decodeNotification(bytes(v.bytes)), decoded, v.name);
  }
});

test("HLCs format, parse and order as the vectors say", () => {
  for (const v of vectors.hlc.format) {
    assert.equal(new Hlc(v.wall_ms, v.counter, v.node).toString(), v.text);
  }
  for (const v of vectors.hlc.parse_ok) {
    const h = parseHlc(v.text);
    assert.deepEqual([h.wallMs, h.counter, h.node], [v.wall_ms, v.counter, v.node]);
  }
  for (const t of vectors.hlc.parse_err) {
    assert.throws(() => parseHlc(t), (e) => e instanceof MqstoreError && e.code === 1, t);
  }
  for (const [older, newer] of vectors.hlc.order) {
    assert.equal(parseHlc(older).compare(parseHlc(newer)), -1);
    assert.equal(parseHlc(newer).compare(parseHlc(older)), 1);
    assert.equal(parseHlc(newer).compare(parseHlc(newer)), 0);
  }
});

test("topics are the vector topics", () => {
  assert.equal(codec.invokeTopic(), vectors.topics.invoke);
  const example = vectors.topics.notify_example;
  assert.equal(codec.notifyTopic(example.client_id, example.key), example.topic);
});

test("bad arguments throw a typed error", () => {
  for (const bad of [
    undefined,
    42,
    {},
    { op: "FLY", key: "k" },
    { op: "GET", key: "" },
    { op: "GET", key: 7 },
    { op: "SET", key: "k", value: "v", condition: "XX" },
    { op: "SET", key: "k", value: "v", pxMs: -1 },
  ]) {
    assert.throws(
      () => codec.encodeRequest(bad),
      (e) => e instanceof MqstoreError && e.code === 1 && e.message.length > 0,
      JSON.stringify(bad),
    );
  }
  assert.throws(() => new Hlc(1, 0, "a:b"), (e) => e.code === 1);
});
