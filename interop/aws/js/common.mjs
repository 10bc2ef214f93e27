// What the SDK scripts share: waiting for the next message of a stream, asserting, connecting
// a plain awscrt MQTT 5 client, and running `main` with one clear line on a failure.

import { parseArgs } from "node:util";

import { mqtt5 } from "aws-crt";

export const TIMEOUT_MS = 10_000;

/** Resolves with the next value `queue` gets, or rejects after the timeout. */
export function nextOf(queue, what) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ${what} within 10 s`)), TIMEOUT_MS);
    queue.waiters.push((value) => {
      clearTimeout(timer);
      resolve(value);
    });
    queue.flush();
  });
}

export function queue() {
  const q = {
    items: [],
    waiters: [],
    push(item) {
      q.items.push(item);
      q.flush();
    },
    flush() {
      while (q.items.length && q.waiters.length) q.waiters.shift()(q.items.shift());
    },
  };
  return q;
}

export function assert(condition, message) {
  if (!condition) throw new Error(`assertion failed: ${message}`);
}

export async function connect(host, port, clientId) {
  const client = new mqtt5.Mqtt5Client({
    hostName: host,
    port,
    connectProperties: { clientId, keepAliveIntervalSeconds: 30 },
  });
  const connected = new Promise((resolve, reject) => {
    client.once("connectionSuccess", resolve);
    client.once("connectionFailure", (e) => reject(new Error(`cannot connect: ${e.error}`)));
  });
  client.start();
  await connected;
  return client;
}

/** A device script's arguments: the broker's host and port, and the thing it acts as. */
export function deviceArgs() {
  const { values } = parseArgs({
    options: {
      host: { type: "string", default: "127.0.0.1" },
      port: { type: "string", default: "1883" },
      thing: { type: "string", default: "aws-js-sdk-thing" },
    },
  });
  return { host: values.host, port: Number(values.port), thing: values.thing };
}

/** Runs a script's `main`: exit 0, or 1 with one line. */
export function run(main) {
  main().then(
    () => process.exit(0),
    (e) => {
      console.error(`FAILED: ${e.stack ?? e}`);
      process.exit(1);
    },
  );
}
