#!/usr/bin/env node
// Serves the dashboard: the page, the npm package's files (bundle-free ES modules, the .wasm)
// and MQTT.js's browser build. No dependencies beyond Node 20.
//
//   node examples/dashboard/serve.mjs [--port 8080] [--host 127.0.0.1] [--broker ws://127.0.0.1:9001]
//                                     [--package bindings-wasm]
//
// --package is the directory of the mqstore npm package (with dist/ and pkg/): the built one in
// this repository by default, or an installed one (node_modules/mqstore).
import { createServer } from "node:http";
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { dirname, extname, join, normalize, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const here = dirname(fileURLToPath(import.meta.url));
const { values: options } = parseArgs({
  options: {
    port: { type: "string", default: "8080" },
    host: { type: "string", default: "127.0.0.1" },
    broker: { type: "string", default: "ws://127.0.0.1:9001" },
    package: { type: "string", default: join(here, "../../bindings-wasm") },
  },
});
const packageDir = resolve(options.package);
let mqttDir;
try {
  mqttDir = dirname(createRequire(join(packageDir, "package.json")).resolve("mqtt/package.json"));
} catch {
  console.error(`error: no mqstore package with its dependencies at ${packageDir}: run \`bash scripts/build-wasm\` first (or pass --package node_modules/mqstore)`);
  process.exit(1);
}

const types = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".wasm": "application/wasm",
  ".svg": "image/svg+xml",
};
// URL prefix -> directory; nothing outside them is served.
const roots = [
  ["/mqstore/", packageDir],
  ["/vendor/mqtt/", join(mqttDir, "dist")],
  ["/", here],
];

const server = createServer(async (request, response) => {
  const path = decodeURIComponent(new URL(request.url, "http://x").pathname);
  const [prefix, root] = roots.find(([p]) => path.startsWith(p));
  const file = normalize(join(root, path === "/" ? "index.html" : path.slice(prefix.length)));
  if (!file.startsWith(root + sep) || file.endsWith(".mjs")) {
    response.writeHead(404).end();
    return;
  }
  try {
    const body = await readFile(file);
    response.writeHead(200, { "content-type": types[extname(file)] ?? "application/octet-stream", "cache-control": "no-store" });
    response.end(body);
  } catch {
    response.writeHead(404, { "content-type": "text/plain" }).end(`not found: ${path}\n`);
  }
});
server.listen(Number(options.port), options.host, () => {
  const { port } = server.address();
  const url = `http://${options.host}:${port}/?broker=${encodeURIComponent(options.broker)}`;
  console.log(`mqstore dashboard: ${url}`);
  console.log(`  (the package from ${packageDir}; the broker's WebSocket listener must be up: bash scripts/run)`);
});
for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => server.close(() => process.exit(0)));
