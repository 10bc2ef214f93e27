// The wasm codec against the npm `redis-parser` package (RESP2, what ioredis and node-redis
// used) on the same payloads, in the same run: decoding the state store's answers (a value,
// a SCAN page, +OK) and encoding a SET. Prints each side's time per operation and the ratio.
//
//   bash scripts/build-wasm && node bindings-wasm/benches/codec.bench.js
import { createRequire } from "node:module";

const { init, codec } = await import("../dist/index.js");
const RedisParser = createRequire(import.meta.url)("redis-parser");
await init();

const encoder = new TextEncoder();
const value = "v".repeat(64);
const payloads = {
  "a 64-byte value": encoder.encode(`$64\r\n${value}\r\n`),
  "a SCAN page of 10 keys": encoder.encode(
    `*2\r\n*10\r\n${Array.from({ length: 10 }, (_, i) => `$8\r\nkey/${String(i).padStart(4, "0")}\r\n`).join("")}$4\r\n1;1;\r\n`,
  ),
  "+OK": encoder.encode("+OK\r\n"),
  "a 16 KiB value": encoder.encode(`$16384\r\n${"v".repeat(16384)}\r\n`),
  "a SCAN page of 1000 keys": encoder.encode(
    `*2\r\n*1000\r\n${Array.from({ length: 1000 }, (_, i) => `$8\r\nkey/${String(i).padStart(4, "0")}\r\n`).join("")}$4\r\n1;1;\r\n`,
  ),
};

/** Nanoseconds per call of `f`, the best of 5 runs of `n` calls. */
function time(f, n = 20_000) {
  let best = Infinity;
  for (let run = 0; run < 5; run++) {
    const start = process.hrtime.bigint();
    for (let i = 0; i < n; i++) f();
    best = Math.min(best, Number(process.hrtime.bigint() - start) / n);
  }
  return best;
}

console.log("operation".padEnd(36), "mqstore (wasm)".padStart(15), "redis-parser".padStart(13), "ratio".padStart(8));
for (const [name, bytes] of Object.entries(payloads)) {
  let replies = 0;
  const parser = new RedisParser({ returnReply: () => replies++, returnError: () => replies++, returnBuffers: true });
  const buffer = Buffer.from(bytes);
  const ours = time(() => codec.decodeResponse(bytes));
  const theirs = time(() => parser.execute(buffer));
  console.log(`decode ${name}`.padEnd(36), `${ours.toFixed(0)} ns`.padStart(15), `${theirs.toFixed(0)} ns`.padStart(13), `${(theirs / ours).toFixed(2)}x`.padStart(8));
}
// Encoding: redis-parser has no encoder; the baseline is the RESP2 encoding ioredis does in JS.
const key = encoder.encode("sensor/7/state");
const val = encoder.encode(value);
const respEncode = (args) => {
  const parts = [Buffer.from(`*${args.length}\r\n`)];
  for (const a of args) parts.push(Buffer.from(`$${a.length}\r\n`), Buffer.from(a), Buffer.from("\r\n"));
  return Buffer.concat(parts);
};
const ours = time(() => codec.encodeRequest({ op: "SET", key, value: val }));
const theirs = time(() => respEncode([encoder.encode("SET"), key, val]));
console.log("encode a SET (14 B key, 64 B value)".padEnd(36), `${ours.toFixed(0)} ns`.padStart(15), `${theirs.toFixed(0)} ns`.padStart(13), `${(theirs / ours).toFixed(2)}x`.padStart(8), "(baseline: RESP in JS)");
