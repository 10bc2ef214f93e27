/**
 * mqstore for JavaScript: the protocol core compiled to WebAssembly (codec, HLC, the client
 * state machine), for browsers and Node 20+. Call `init()` once before anything else.
 */
import initWasm, * as wasm from "../pkg/mqstore_wasm.js";

export { ClientCore, Hlc } from "../pkg/mqstore_wasm.js";

let ready: Promise<void> | undefined;

/**
 * Loads the WebAssembly module; call (and await) it once before anything else. In a browser it
 * fetches `mqstore_wasm_bg.wasm` next to this file; in Node it reads that file. `source`
 * overrides where the module comes from (a URL, a Response, or the bytes).
 */
export function init(source?: URL | Response | BufferSource): Promise<void> {
  ready ??= (async () => {
    let input = source;
    if (input === undefined && typeof process !== "undefined" && process.versions?.node) {
      const { readFile } = await import("node:fs/promises");
      input = await readFile(new URL("../pkg/mqstore_wasm_bg.wasm", import.meta.url));
    }
    await initWasm(input === undefined ? undefined : { module_or_path: input });
  })();
  return ready;
}

/** An mqstore error: `code` is the stable number of every binding (1: a bad argument). */
export class MqstoreError extends Error {
  readonly code: number;
  /** The state store's own error text (codes 101–199). */
  readonly text?: string;
  constructor(message: string, code: number, text?: string) {
    super(message);
    this.name = "MqstoreError";
    this.code = code;
    this.text = text;
  }
}

/** Runs `call`, turning the module's errors (JS Errors with a `code`) into MqstoreErrors. */
function typed<T>(call: () => T): T {
  try {
    return call();
  } catch (e) {
    if (e instanceof Error && typeof (e as { code?: unknown }).code === "number") {
      const { code, text } = e as Error & { code: number; text?: string };
      throw new MqstoreError(e.message, code, text);
    }
    throw e;
  }
}

/** A key or value: bytes, or a string (its UTF-8 bytes). */
export type Bytes = Uint8Array | string;

/** A state store request, shaped like the shared wire vectors' `command`. */
export type Request =
  | { op: "SET"; key: Bytes; value: Bytes; condition?: "NX" | "NEX"; pxMs?: number }
  | { op: "GET" | "DEL"; key: Bytes }
  | { op: "VDEL"; key: Bytes; value: Bytes }
  | { op: "KEYNOTIFY"; key: Bytes; stop?: boolean }
  | { op: "SCAN"; pattern: Bytes; token?: Bytes };

/** A decoded response, shaped like the shared wire vectors' `decoded`. */
export type Response =
  | { kind: "ok" | "not_applied" | "absent" }
  | { kind: "deleted"; count: number }
  | { kind: "value"; value: Uint8Array }
  | { kind: "keys"; keys: Uint8Array[]; token?: Uint8Array }
  | { kind: "error"; text: string; code: number };

/** A decoded change notification. */
export type Notification = { op: "SET"; value: Uint8Array } | { op: "DELETE" };

/** The wire format: requests, responses and notifications to and from bytes. */
export const codec = {
  encodeRequest: (request: Request): Uint8Array => typed(() => wasm.encodeRequest(request)),
  decodeRequest: (bytes: Uint8Array): Request => typed(() => wasm.decodeRequest(bytes) as Request),
  decodeResponse: (bytes: Uint8Array): Response =>
    typed(() => wasm.decodeResponse(bytes) as Response),
  decodeNotification: (bytes: Uint8Array): Notification =>
    typed(() => wasm.decodeNotification(bytes) as Notification),
  notifyTopic: (clientId: string, key: Bytes): string =>
    typed(() => wasm.notifyTopic(clientId, key)),
  invokeTopic: (): string => wasm.invokeTopic(),
};

/** Parses an HLC (`{wall ms}:{counter}:{node}`), throwing an MqstoreError (code 1) if it is not one. */
export function parseHlc(text: string): wasm.Hlc {
  return typed(() => wasm.Hlc.parse(text));
}
