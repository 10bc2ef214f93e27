// `wss://` in Node: a CA and certificates made with openssl, two TLS WebSocket listeners beside
// the plain ones (one asks for a client certificate); `mqstore serve` on the plain TCP one.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { freePort, start } from "./harness.js";

const { Client, BrokerUnreachableError, InvalidArgumentError } = await import(process.env.MQSTORE_PACKAGE ?? "../dist/index.js");

const dir = mkdtempSync(join(tmpdir(), "mqstore-js-tls-"));
const openssl = (...args) => execFileSync("openssl", args, { cwd: dir, stdio: "pipe" });
const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
const file = (name) => join(dir, name);
/** A certificate for `name`, signed by the test CA. */
function signed(name, extensions) {
  openssl("req", ...ec, "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", `/CN=${name}`);
  writeFileSync(file(`${name}.ext`), extensions);
  openssl("x509", "-req", "-in", `${name}.csr`, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", `${name}.pem`, "-days", "2", "-extfile", `${name}.ext`);
}
openssl("req", "-x509", ...ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=mqstore test CA");
signed("broker", "subjectAltName=IP:127.0.0.1,DNS:localhost\n");
signed("device", "extendedKeyUsage=clientAuth\n");
const ca = readFileSync(file("ca.pem"), "utf8");
const device = { cert: readFileSync(file("device.pem")), key: readFileSync(file("device.key"), "utf8") };
// The same key encrypted with a password, as an operator would keep it.
openssl("pkcs8", "-topk8", "-in", "device.key", "-out", "device-encrypted.key", "-passout", "pass:fleet-key-1");
const encrypted = { cert: device.cert, key: readFileSync(file("device-encrypted.key"), "utf8") };

let servers, wss, wssClientCert;
before(async () => {
  const tlsPort = await freePort();
  const mutualPort = await freePort();
  const listener = (port) =>
    `listener ${port} 127.0.0.1\nprotocol websockets\ncertfile ${file("broker.pem")}\nkeyfile ${file("broker.key")}\n`;
  servers = await start({
    config: `${listener(tlsPort)}${listener(mutualPort)}cafile ${file("ca.pem")}\nrequire_certificate true\n`,
  });
  wss = `wss://127.0.0.1:${tlsPort}`;
  wssClientCert = `wss://127.0.0.1:${mutualPort}`;
});
after(async () => {
  await servers?.stop();
  rmSync(dir, { recursive: true, force: true });
});

async function roundTrip(client, key) {
  try {
    await client.set(key, "over TLS");
    assert.equal((await client.get(key)).text, "over TLS");
  } finally {
    await client.close();
  }
}

test("wss:// with the CA that signed the broker's certificate: calls work", async () => {
  await roundTrip(await Client.connect(wss, { tls: { ca } }), "js/tls");
});

test("a broker certificate Node cannot check is refused, with the reason", async () => {
  // Node's own CAs (no `ca`), and a CA that did not sign it (the broker's certificate itself).
  for (const tls of [undefined, { ca: readFileSync(file("broker.pem"), "utf8") }]) {
    await assert.rejects(
      Client.connect(wss, { tls, timeoutMs: 5000 }),
      (e) => e instanceof BrokerUnreachableError && e.code === 207 && /certificate could not be checked: tls\.ca/.test(e.message),
    );
  }
});

test("a broker that asks for a client certificate takes ours, and refuses a client with none", async () => {
  await roundTrip(await Client.connect(wssClientCert, { tls: { ca, ...device } }), "js/tls-mutual");
  await assert.rejects(
    Client.connect(wssClientCert, { tls: { ca }, timeoutMs: 5000 }),
    (e) => e instanceof BrokerUnreachableError && e.code === 207,
  );
});

test("a client certificate whose key is encrypted: with its passphrase it connects; without, or a wrong one, a clear error", async () => {
  await roundTrip(await Client.connect(wssClientCert, { tls: { ca, ...encrypted, passphrase: "fleet-key-1" } }), "js/tls-encrypted");
  await assert.rejects(
    Client.connect(wssClientCert, { tls: { ca, ...encrypted } }),
    (e) => e instanceof InvalidArgumentError && /tls\.key is encrypted: give its password \(tls\.passphrase\)/.test(e.message),
  );
  await assert.rejects(
    Client.connect(wssClientCert, { tls: { ca, ...encrypted, passphrase: "fleet-key-2" }, timeoutMs: 5000 }),
    (e) => e instanceof InvalidArgumentError && /tls\.passphrase is wrong/.test(e.message),
  );
});

test("tls settings that cannot apply are refused before connecting", async () => {
  const refused = [
    [servers.url, { ca }, /wss:\/\//],
    [wss, { ca, cert: device.cert }, /needs its key/],
    [wss, { ca, key: device.key }, /needs its key/],
    [wss, { ca: 42 }, /tls\.ca must be PEM text/],
    [wss, { ca, passphrase: "fleet-key-1" }, /give tls\.key too/],
    [wss, { ca, ...encrypted, passphrase: 42 }, /tls\.passphrase must be a string/],
  ];
  for (const [url, tls, message] of refused) {
    await assert.rejects(Client.connect(url, { tls }), (e) => e instanceof InvalidArgumentError && message.test(e.message));
  }
});
