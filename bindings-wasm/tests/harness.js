// mosquitto (a TCP listener for the server, a WebSocket listener for the clients) and
// `mqstore serve` on free ports, for the tests. The server binary is $MQSTORE_BIN, else the
// workspace's target/debug/mqstore; mosquitto is $MOSQUITTO, else /usr/sbin/mosquitto.
import { spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir, userInfo } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const repo = fileURLToPath(new URL("../../", import.meta.url));
/** The server and CLI binary. */
export const mqstoreBin = process.env.MQSTORE_BIN ?? join(repo, "target/debug/mqstore");

export function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

// `hint` says what to do when the program cannot be started at all.
function waitFor(process, pattern, what, lines, hint) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what} did not start:\n${lines.join("")}`)), 20_000);
    const check = (chunk) => {
      lines.push(chunk.toString());
      if (pattern.test(lines.join(""))) {
        clearTimeout(timer);
        resolve();
      }
    };
    process.stderr.on("data", check);
    process.stdout.on("data", check);
    process.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited (${code}):\n${lines.join("")}`));
    });
    // A program that is not there never starts, and never exits either.
    process.on("error", (error) => {
      clearTimeout(timer);
      reject(new Error(`${what} could not be started (${error.message}): ${hint}`));
    });
  });
}

/**
 * A broker (WebSocket + TCP) and a server; `stop()` ends both. With `login` ({username,
 * password}) the broker takes only that user, and the server logs in as it; `config` adds
 * lines to mosquitto's configuration.
 */
export async function start(options = {}) {
  const dir = await mkdtemp(join(tmpdir(), "mqstore-js-broker-"));
  // What was started before a step failed is stopped, and the directory goes with it.
  const children = [];
  try {
    return await startIn(dir, children, options);
  } catch (error) {
    for (const child of children) child.kill("SIGTERM");
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
}

async function startIn(dir, children, { login, config: extra = "", metrics = false }) {
  const tcpPort = await freePort();
  const wsPort = await freePort();
  const config = join(dir, "mosquitto.conf");
  let access = "allow_anonymous true\n";
  if (login) {
    const passwords = join(dir, "passwords");
    await new Promise((resolve, reject) =>
      spawn("mosquitto_passwd", ["-b", "-c", passwords, login.username, login.password], { stdio: "inherit" })
        .on("exit", (code) => (code === 0 ? resolve() : reject(new Error(`mosquitto_passwd exited (${code})`))))
        .on("error", (error) => reject(new Error(`mosquitto_passwd could not be started (${error.message}): is mosquitto installed?`))),
    );
    access = `allow_anonymous false\npassword_file ${passwords}\n`;
  }
  await writeFile(
    config,
    // Started by root, mosquitto would switch to the user `mosquitto`, who cannot read files
    // in a private folder: it stays the user running the tests.
    `user ${userInfo().username}\n` +
      `${extra}listener ${tcpPort} 127.0.0.1\nlistener ${wsPort} 127.0.0.1\nprotocol websockets\n${access}` +
      // Nagle adds up to 40 ms to every request/response round trip.
      "set_tcp_nodelay true\n",
  );
  // One log per broker process: a restarted broker's "running" must be its own.
  const brokerLogs = [];
  const startBroker = async () => {
    const child = spawn(process.env.MOSQUITTO ?? "/usr/sbin/mosquitto", ["-c", config], { stdio: ["ignore", "pipe", "pipe"] });
    children.push(child);
    const log = [];
    brokerLogs.push(log);
    await waitFor(child, /running/, "mosquitto", log, "install it (bash scripts/test does) or set MOSQUITTO");
    return child;
  };
  let broker = await startBroker();
  const serverLog = [];
  const metricsPort = metrics ? await freePort() : undefined;
  const server = spawn(
    mqstoreBin,
    [
      "--port",
      String(tcpPort),
      ...(login ? ["--username", login.username] : []),
      "serve",
      "--node-id",
      "js-node",
      ...(metricsPort ? ["--metrics", `127.0.0.1:${metricsPort}`] : []),
    ],
    { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, NO_COLOR: "1", ...(login ? { MQSTORE_PASSWORD: login.password } : {}) } },
  );
  children.push(server);
  await waitFor(
    server,
    /connected to the broker; subscribed/,
    "mqstore serve",
    serverLog,
    "build it (cargo build -p mqstore) or set MQSTORE_BIN",
  );
  return {
    url: `ws://127.0.0.1:${wsPort}`,
    tcpPort,
    /** The server's Prometheus metrics as text (with `metrics: true`). */
    async metrics() {
      const response = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
      return await response.text();
    },
    logs: () => `--- mqstore serve\n${serverLog.join("")}--- mosquitto\n${brokerLogs.flat().join("")}`,
    /** Stops mosquitto (every connection drops) and starts it again on the same ports. */
    async restartBroker() {
      await this.stopBroker();
      await this.startBroker();
    },
    /** Stops mosquitto (every connection drops) until `startBroker()`. */
    async stopBroker() {
      broker.removeAllListeners("exit");
      const exited = new Promise((resolve) => broker.once("exit", resolve));
      broker.kill("SIGTERM");
      await exited;
    },
    /** Starts mosquitto again on the same ports; resolves once mqstore serve is back on it. */
    async startBroker() {
      const subscribed = /connected to the broker; subscribed/g;
      const before = serverLog.join("").match(subscribed)?.length ?? 0;
      broker = await startBroker();
      const deadline = Date.now() + 20_000;
      while ((serverLog.join("").match(subscribed)?.length ?? 0) <= before) {
        if (Date.now() > deadline) throw new Error(`mqstore serve did not come back:\n${serverLog.join("")}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    async stop() {
      for (const child of [server, broker]) {
        child.removeAllListeners("exit");
        child.kill("SIGTERM");
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}
