// The npm client's round trip at 1 in flight (MQTT 5 over WebSocket) against the Rust client's
// (`mqstore bench`, over TCP), through the same mosquitto and `mqstore serve`, in turns: SET
// and GET alternately over 1,000 keys with 64-byte values.
//
//   bash scripts/build-wasm && cargo build --release -p mqstore
//   MQSTORE_BIN=target/release/mqstore node bindings-wasm/benches/client.bench.js
import { execFileSync } from "node:child_process";

import { start } from "../tests/harness.js";

const { Client } = await import("../dist/index.js");
const SECONDS = Number(process.env.SECONDS_PER_TURN ?? 3);
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const value = "v".repeat(64);

async function npmClient(url) {
  const client = await Client.connect(url);
  let n = 0;
  const end = Date.now() + SECONDS * 1000;
  while (Date.now() < end) {
    const key = `bench/${n % 1000}`;
    if (n % 2 === 0) await client.set(key, value);
    else await client.get(key);
    n++;
  }
  await client.close();
  return n / SECONDS;
}

function rustClient(tcpPort) {
  const out = execFileSync(process.env.MQSTORE_BIN ?? "target/release/mqstore", [
    "--port", String(tcpPort), "bench", "--in-flight", "1", "--connections", "1",
    "--duration", String(SECONDS), "--rounds", "1",
  ]).toString();
  for (const line of out.split("\n")) {
    const cells = line.split("|").map((c) => c.trim());
    if (cells.length > 2 && cells[0] === "1") return Number(cells[1]);
  }
  throw new Error(`cannot read mqstore bench's output:\n${out}`);
}

const servers = await start();
const rates = { npm: [], rust: [] };
try {
  for (let round = 0; round < ROUNDS; round++) {
    rates.npm.push(await npmClient(servers.url));
    rates.rust.push(rustClient(servers.tcpPort));
    console.log(`  npm (WebSocket) ${rates.npm.at(-1).toFixed(0)} ops/s, Rust (TCP) ${rates.rust.at(-1).toFixed(0)} ops/s`);
  }
} finally {
  await servers.stop();
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const npm = median(rates.npm);
const rust = median(rates.rust);
console.log(`\nnpm client over WebSocket: ${npm.toFixed(0)} ops/s (${(1e6 / npm).toFixed(0)} µs per call)`);
console.log(`Rust client over TCP:      ${rust.toFixed(0)} ops/s (${(1e6 / rust).toFixed(0)} µs per call)`);
console.log(`npm / Rust: ${(rust / npm).toFixed(2)}x the time per call`);
