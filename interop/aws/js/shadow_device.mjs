// A device and an app using the AWS IoT Device SDK for JavaScript v2 (IotShadowClientv2,
// unchanged) against mqstore's device shadows through a plain MQTT 5 broker (no TLS); the same
// steps as ../shadow_device.py, on the classic shadow and on a named one.
//
//   node shadow_device.mjs --host 127.0.0.1 --port 1883 --thing my-thing
//
// Prints one line per step, "OK" at the end; exits 1 on the first failure.


import { iotshadow } from "aws-iot-device-sdk-v2";

import { TIMEOUT_MS, assert, connect, deviceArgs, nextOf, queue, run } from "./common.mjs";

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

function shadowClient(client) {
  return iotshadow.IotShadowClientv2.newFromMqtt5(client, {
    maxRequestResponseSubscriptions: 4,
    maxStreamingSubscriptions: 4,
    operationTimeoutInSeconds: TIMEOUT_MS / 1000,
  });
}

/** One shadow (classic, or named) through the SDK's calls for it. */
function shadow(client, thingName, shadowName) {
  const named = shadowName !== undefined;
  const call = (kind, fields = {}) =>
    named
      ? client[`${kind}NamedShadow`]({ thingName, shadowName, ...fields })
      : client[`${kind}Shadow`]({ thingName, ...fields });
  return {
    get: () => call("get"),
    update: (fields) => call("update", fields),
    delete: () => call("delete"),
    streams: () =>
      named
        ? [
            client.createNamedShadowDeltaUpdatedStream({ thingName, shadowName }),
            client.createNamedShadowUpdatedStream({ thingName, shadowName }),
          ]
        : [
            client.createShadowDeltaUpdatedStream({ thingName }),
            client.createShadowUpdatedStream({ thingName }),
          ],
  };
}

/** Resolves with the code of the rejection `promise` must end with. */
async function rejected(promise, code) {
  try {
    await promise;
  } catch (e) {
    assert(e.modeledError?.code === code, `${e}: ${JSON.stringify(e.modeledError)}`);
    return e.modeledError.message;
  }
  throw new Error(`accepted, not rejected with ${code}`);
}

async function flow(device, app, label) {
  const [deltas, documents, established] = [queue(), queue(), queue()];
  const streams = device.streams();
  streams[0].on("incomingPublish", (e) => deltas.push(e.message));
  streams[1].on("incomingPublish", (e) => documents.push(e.message));
  for (const stream of streams) {
    stream.on("subscriptionStatus", (e) => e.type === 0 && established.push(e));
    stream.open();
  }
  for (const _ of streams) await nextOf(established, "subscription");
  console.log(`${label}: delta and documents streams open`);

  const message = await rejected(device.get(), 404);
  assert(message.startsWith("No shadow exists with name"), message);
  console.log(`${label}: get before any update rejected, 404`);

  const desired = { color: "red", led: { g: 0, r: 10 }, power: "on" };
  let accepted = await app.update({ state: { desired } });
  assert(accepted.version === 1 && same(accepted.state.desired, desired), JSON.stringify(accepted));
  const delta = await nextOf(deltas, "delta");
  assert(delta.version === 1 && same(delta.state, desired), JSON.stringify(delta));
  let document = await nextOf(documents, "documents");
  assert(document.previous === undefined && document.current.version === 1, JSON.stringify(document));
  console.log(`${label}: the app set desired; the device saw its delta and documents`);

  const reported = { color: "red", led: { g: 0, r: 10 }, power: "off" };
  accepted = await device.update({ state: { reported } });
  assert(accepted.version === 2, JSON.stringify(accepted));
  document = await nextOf(documents, "documents");
  assert(document.previous.version === 1 && document.current.version === 2, JSON.stringify(document));
  let got = await device.get();
  assert(got.version === 2 && same(got.state.delta, { power: "on" }), JSON.stringify(got));
  assert(same(got.state.reported, reported) && same(got.state.desired, desired), JSON.stringify(got));
  console.log(`${label}: the device reported; get shows the delta ${JSON.stringify(got.state.delta)}`);

  const conflict = await rejected(app.update({ state: { desired: { power: "off" } }, version: 1 }), 409);
  assert(conflict === "Version conflict", conflict);
  accepted = await app.update({ state: { desired: { power: "off", led: null } }, version: 2 });
  assert(accepted.version === 3, JSON.stringify(accepted));
  got = await device.get();
  assert(same(got.state.desired, { color: "red", power: "off" }), JSON.stringify(got));
  assert(got.state.delta === undefined, JSON.stringify(got));
  console.log(`${label}: a stale version rejected, 409; null removed a field; no delta left`);

  const deleted = await app.delete();
  assert(deleted.version === 3, JSON.stringify(deleted));
  await rejected(device.get(), 404);
  accepted = await device.update({ state: { reported: { power: "off" } } });
  assert(accepted.version === 4, JSON.stringify(accepted));
  console.log(`${label}: deleted at version 3; the next shadow is version 4`);
  for (const stream of streams) stream.close();
}

async function main() {
  const { host, port, thing } = deviceArgs();
  const deviceMqtt = await connect(host, port, thing);
  const appMqtt = await connect(host, port, `${thing}-app`);
  const [device, app] = [shadowClient(deviceMqtt), shadowClient(appMqtt)];
  await flow(shadow(device, thing), shadow(app, thing), "classic");
  await flow(shadow(device, thing, "config"), shadow(app, thing, "config"), "named");
  device.close();
  app.close();
  for (const client of [deviceMqtt, appMqtt]) {
    client.stop();
    client.close();
  }
  console.log("OK");
}

run(main);
