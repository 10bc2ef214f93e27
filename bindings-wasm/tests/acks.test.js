// The PUBACK reader beside MQTT.js (js/acks.ts): packets framed across any chunk boundary, only
// the refusals MQTT.js cannot read reported, and those replaced by one it reads.
import assert from "node:assert/strict";
import { test } from "node:test";

const packageUrl = new URL(process.env.MQSTORE_PACKAGE ?? "../dist/index.js", import.meta.url);
const { AckReader } = await import(new URL("./acks.js", packageUrl).href);

const puback = (id, code) => [0x40, 3, id >> 8, id & 0xff, code];
// A PUBLISH whose remaining length takes two bytes (300 = 0xAC 0x02).
const publish = [0x32, 0xac, 0x02, ...new Array(300).fill(0x40)];
const stream = [
  ...[0x20, 3, 0, 0, 0], // CONNACK
  ...puback(1, 0x10), // no matching subscribers: not a refusal
  ...puback(0x0102, 0x95), // packet too large: MQTT.js cannot read it
  ...publish, // its payload is full of bytes that look like PUBACK headers
  ...puback(3, 0x87), // not authorized: MQTT.js reads and reports it itself
  ...[0xd0, 0], // PINGRESP
  ...puback(0xfffe, 0x9e), // another code MQTT 5 does not list for PUBACK
];

test("every refusal MQTT.js cannot read is reported and replaced, however the stream is cut", () => {
  for (let cut = 1; cut <= stream.length; cut++) {
    const refused = [];
    const reader = new AckReader((id, code) => refused.push([id, code]));
    const bytes = Uint8Array.from(stream);
    for (let at = 0; at < bytes.length; at += cut) reader.feed(bytes.subarray(at, at + cut));
    assert.deepEqual(refused, [[0x0102, 0x95], [0xfffe, 0x9e]], `cut every ${cut} bytes`);
    const expected = Uint8Array.from(stream);
    expected[5 + 5 + 4] = 0x80;
    expected[expected.length - 1] = 0x80;
    assert.deepEqual(bytes, expected, `cut every ${cut} bytes`);
  }
});
