/**
 * mqstore for JavaScript: the protocol core compiled to WebAssembly (codec, HLC, the client
 * state machine), for browsers and Node 20+. Call `init()` once before anything else.
 */
import mqtt from "mqtt";
import type { IClientOptions, IClientPublishOptions, IPublishPacket, MqttClient } from "mqtt";

import initWasm, * as wasm from "../pkg/mqstore_wasm.js";
import { watchUnreadableAcks } from "./acks.js";
import type {
  CommandDefinition,
  CommandRecord,
  ExecutionListing,
  ExecutionsPage,
  JobDescription,
  JobExecution,
  JobExecutionStatus,
  JobListing,
  JobSpec,
  JobStatus,
  JobSummary,
  JobTemplate,
  JobUpdate,
  JobsPage,
  PendingJobs,
  TemplatesPage,
  ThingGroupDescription,
  ThingGroupsPage,
  ThingsPage,
  UpdateAccepted,
} from "./wire.js";

import {
  BrokerRefusedError,
  BrokerUnreachableError,
  ConnectionLostError,
  InternalError,
  InvalidArgumentError,
  MqstoreError,
  UnexpectedAnswerError,
  asMqstoreError,
} from "./errors.js";

// The jobs and commands wire types, generated from the Rust types (js/wire.ts): every one.
export type * from "./wire.js";

export { ClientCore, Hlc, LeaseTerms } from "../pkg/mqstore_wasm.js";
export * from "./errors.js";

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

/**
 * Set once the WebAssembly module trapped (a Rust panic aborts on wasm32: a bug in mqstore).
 * Its memory may be left half-changed, so nothing calls into it again in this process (page):
 * every client is closed and its calls fail with this.
 */
let trapped: InternalError | undefined;

/** The error of the module's trap `error` (a `WebAssembly.RuntimeError`), made once. */
function trap(error: WebAssembly.RuntimeError): InternalError {
  trapped ??= new InternalError(
    `mqstore's WebAssembly module stopped (${error.message}): a bug in mqstore, please report it; ` +
      "no mqstore client works in this process (page) until it restarts (reloads)",
  );
  return trapped;
}

/**
 * Runs `call`, turning the module's errors (JS Errors with a `code`) into typed MqstoreErrors,
 * and a trap into the InternalError every later call gets.
 */
function typed<T>(call: () => T): T {
  if (trapped) throw trapped;
  try {
    return call();
  } catch (e) {
    if (e instanceof WebAssembly.RuntimeError) throw trap(e);
    throw asMqstoreError(e);
  }
}

/**
 * `core` as a Client calls it: once the module traps (in this call or any before), `stop` ends
 * the client and the call throws the InternalError instead of reaching the module again.
 */
function guarded(core: wasm.ClientCore, stop: (error: InternalError) => void): wasm.ClientCore {
  const methods = new Map<PropertyKey, unknown>();
  return new Proxy(core, {
    get(target, name) {
      let method = methods.get(name);
      if (method === undefined) {
        const value: unknown = Reflect.get(target, name, target);
        if (typeof value !== "function") return value;
        // The method is looked up at each call, not kept: what the class holds then runs.
        method = (...args: unknown[]) => {
          if (trapped === undefined) {
            try {
              return (Reflect.get(target, name, target) as (...a: unknown[]) => unknown).apply(target, args);
            } catch (e) {
              if (!(e instanceof WebAssembly.RuntimeError)) throw e;
              trap(e);
            }
          }
          stop(trapped as InternalError);
          throw trapped;
        };
        methods.set(name, method);
      }
      return method;
    },
  });
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

/**
 * Decodes a response. The module finds where the parts lie; values, keys and tokens are views
 * of `bytes` (no copies).
 */
function decodeResponse(bytes: Uint8Array): Response {
  const at = typed(() => wasm.decodeResponseLayout(bytes));
  const view = (i: number) => new Uint8Array(bytes.buffer, bytes.byteOffset + at[i], at[i + 1] - at[i]);
  switch (at[0]) {
    case 0:
      return { kind: "ok" };
    case 1:
      return { kind: "not_applied" };
    case 2:
      return { kind: "deleted", count: at[1] };
    case 3:
      return { kind: "value", value: view(1) };
    case 4:
      return { kind: "absent" };
    case 5: {
      const n = at[1];
      const keys = new Array<Uint8Array>(n);
      for (let i = 0; i < n; i++) keys[i] = view(2 + 2 * i);
      return at.length > 2 + 2 * n ? { kind: "keys", keys, token: view(2 + 2 * n) } : { kind: "keys", keys };
    }
    default: // an error answer: its text and code
      return typed(() => wasm.decodeResponse(bytes) as Response);
  }
}

/** The wire format: requests, responses and notifications to and from bytes. */
export const codec = {
  encodeRequest: (request: Request): Uint8Array => typed(() => wasm.encodeRequest(request)),
  decodeRequest: (bytes: Uint8Array): Request => typed(() => wasm.decodeRequest(bytes) as Request),
  decodeResponse,
  decodeNotification: (bytes: Uint8Array): Notification =>
    typed(() => wasm.decodeNotification(bytes) as Notification),
  notifyTopic: (clientId: string, key: Bytes): string =>
    typed(() => wasm.notifyTopic(clientId, key)),
  invokeTopic: (): string => wasm.invokeTopic(),
};

/**
 * Every kind of error the core defines, in code order: its stable `code` and the `name` of its
 * error class here without `Error` (`errorOf(message, code)` makes one).
 */
export function errorKinds(): Array<{ code: number; name: string }> {
  return wasm.errorKinds() as Array<{ code: number; name: string }>;
}

/** Parses an HLC (`{wall ms}:{counter}:{node}`), throwing an MqstoreError (code 1) if it is not one. */
export function parseHlc(text: string): wasm.Hlc {
  return typed(() => wasm.Hlc.parse(text));
}

// ---------------------------------------------------------------------------------------------
// The connected client: the core's state machine driven over MQTT 5 on WebSocket (MQTT.js).


/** How to connect (`Client.connect`). */
export interface ConnectOptions {
  /** The MQTT client id (no `:`); default `mqstore-js-` and random hex. */
  clientId?: string;
  /** The user name to log in with. */
  username?: string;
  /** The password to log in with. */
  password?: string;
  /** Every call's timeout, and the connection's, in milliseconds (10 000). */
  timeoutMs?: number;
  /**
   * How long to wait before reconnecting after the connection drops, in milliseconds (1000).
   * Calls in flight then fail (203); observations resume, and a change missed meanwhile
   * arrives as a `synthetic` one.
   */
  reconnectMs?: number;
  /**
   * TLS settings for a `wss://` broker, in Node. Without them Node trusts its own list of
   * CAs (and `NODE_EXTRA_CA_CERTS`); a browser always decides with its own, so passing them
   * there is an error.
   */
  tls?: TlsOptions;
}

/** PEM text (a string, or its bytes as `readFileSync` gives them). */
export type Pem = string | Uint8Array;

/** How a Node client checks a `wss://` broker and shows itself to one. */
export interface TlsOptions {
  /** The CA certificates to trust for the broker's certificate, instead of Node's own list. */
  ca?: Pem;
  /** This client's certificate, for a broker that asks for one; needs `key`. */
  cert?: Pem;
  /** The private key of `cert`. */
  key?: Pem;
  /** The password of `key` when it is encrypted (as `openssl pkcs8 -topk8` writes it). */
  passphrase?: string;
}

/**
 * `tls` checked, as MQTT.js takes it in Node (`ca`, `cert`, `key` and `passphrase` passed on to
 * its TLS; its types lack `passphrase`, which its `wss` transport passes on all the same).
 */
function tlsSettings(url: string, tls: TlsOptions | undefined): Partial<IClientOptions> & { passphrase?: string } {
  if (tls === undefined) return {};
  if (!url.startsWith("wss://")) {
    throw new InvalidArgumentError(`tls settings are for a wss:// broker URL, not ${JSON.stringify(url)}`);
  }
  if (!(globalThis as { process?: { versions?: { node?: string } } }).process?.versions?.node) {
    throw new InvalidArgumentError("tls settings are for Node: a browser checks a wss:// broker with its own trusted CAs");
  }
  if ((tls.cert === undefined) !== (tls.key === undefined)) {
    throw new InvalidArgumentError("tls: a client certificate needs its key, and a key its certificate (cert and key)");
  }
  const settings: Partial<IClientOptions> & { passphrase?: string } = {};
  for (const name of ["ca", "cert", "key"] as const) {
    const value = tls[name];
    if (value === undefined) continue;
    if (typeof value !== "string" && !(value instanceof Uint8Array)) {
      throw new InvalidArgumentError(`tls.${name} must be PEM text (a string or its bytes)`);
    }
    settings[name] = typeof value === "string" ? value : new TextDecoder().decode(value);
  }
  if (tls.passphrase !== undefined) {
    if (typeof tls.passphrase !== "string") throw new InvalidArgumentError("tls.passphrase must be a string");
    if (tls.key === undefined) throw new InvalidArgumentError("tls.passphrase is the password of tls.key: give tls.key too");
    settings.passphrase = tls.passphrase;
  } else if (/-----BEGIN ENCRYPTED PRIVATE KEY-----|Proc-Type: 4,ENCRYPTED/.test(String(settings.key ?? ""))) {
    throw new InvalidArgumentError("tls.key is encrypted: give its password (tls.passphrase)");
  }
  return settings;
}

/** Options of a SET. */
export interface SetOptions {
  /** Only if the key does not exist. */
  nx?: boolean;
  /** Only if it does not exist or holds this value (take or renew a lock). */
  nex?: boolean;
  /** The key expires this many milliseconds after the SET. */
  expiresMs?: number;
  /** Ask the server to keep the key durably. */
  persist?: boolean;
  /** The fencing token of the lock guarding the key. */
  fencingToken?: wasm.Hlc;
}

/** What a SET did. */
export interface SetResult {
  /** False when NX/NEX did not hold (nothing changed). */
  applied: boolean;
  /** The key's version. */
  version: wasm.Hlc | null;
}

/** A value and its version. */
export interface Versioned {
  /** The value. */
  value: Uint8Array;
  /** The value as UTF-8 text (bytes that are not UTF-8 become U+FFFD). */
  readonly text: string;
  /** The key's version. */
  version: wasm.Hlc | null;
}

/** What a DEL or VDEL did. */
export interface DeleteResult {
  /** What happened: `deleted`, `absent`, or `value_mismatch` (VDEL). */
  outcome: "deleted" | "absent" | "value_mismatch";
  /** The key's version. */
  version: wasm.Hlc | null;
}

/** A change of an observed key. */
export interface Change {
  /** The key. */
  key: Uint8Array;
  /** The new value; null when the key was deleted or expired. */
  value: Uint8Array | null;
  /** The new value as UTF-8 text; null when the key was deleted or expired. */
  readonly text: string | null;
  /** The key's version. */
  version: wasm.Hlc | null;
  /** Found by reading the key back after a reconnect: the notification itself was missed. */
  synthetic: boolean;
  /**
   * Changes between the last one reported and this one were not reported (overtaken, or lost
   * with a server's connection): the changes seen are not the key's whole history, and this
   * one is its state now. True on every `synthetic` change too.
   */
  gap: boolean;
}

type Completed = {
  /** Which kind of event it is. */
  kind: "completed";
  /** The call it answers. */
  call: number;
  /** Which call it was. */
  op: string;
  /** Why it failed, when it did. */
  error?: Error & { code: number };
  /** The decoded answer. */
  response?: Response;
  /** The key's version. */
  version?: wasm.Hlc | null;
  /** A state store call: the core's reading of its answer (SET applied; DEL/VDEL outcome). */
  applied?: boolean;
  /** True when the key was deleted. */
  deleted?: DeleteResult["outcome"];
  /** A jobs or commands call's answer. */
  result?: any;
};
type Changed = { kind: "changed"; key: Uint8Array; value: Uint8Array | null; version: wasm.Hlc | null; synthetic: boolean; gap: boolean };
type JobsNotified = { kind: "jobs-notification"; notification: JobNotification };
type ShadowNotified = { kind: "shadow-notification"; thing: string; name: string | null; notification: ShadowNotification };
type CommandChanged = { kind: "command-record"; record: CommandRecord };
type LeaseRenewed = { kind: "lease-renewed"; lease: number; version: wasm.Hlc };
type LeaseLost = { kind: "lease-lost"; lease: number; key: Uint8Array };
type KeyspaceChanged = { kind: "keyspace"; key: Uint8Array; created: boolean };
type CoreEvent = Completed | Changed | JobsNotified | ShadowNotified | CommandChanged | KeyspaceChanged | LeaseRenewed | LeaseLost;

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const asBytes = (value: Bytes): Uint8Array => (typeof value === "string" ? encoder.encode(value) : value);
const hex = (bytes: Uint8Array): string => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");

/**
 * Bytes for MQTT.js: in Node a Buffer over the same memory (no copy; its packet writer wants
 * Buffers), in a browser the Uint8Array itself (MQTT.js's browser build takes those).
 */
const wire = (bytes: Uint8Array): Buffer =>
  (typeof Buffer === "undefined" ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)) as Buffer;

/**
 * A publish's MQTT 5 properties for MQTT.js, with only the fields that are set (MQTT.js never
 * sends a packet with an empty user property map and a false format indicator), and repeated
 * user property names kept.
 */
function mqttProperties(p: Record<string, unknown>): IClientPublishOptions["properties"] {
  const properties: NonNullable<IClientPublishOptions["properties"]> = {};
  if (p.responseTopic !== undefined) properties.responseTopic = p.responseTopic as string;
  if (p.correlationData !== undefined) properties.correlationData = wire(p.correlationData as Uint8Array);
  if (p.contentType !== undefined) properties.contentType = p.contentType as string;
  if (p.messageExpiryInterval !== undefined) properties.messageExpiryInterval = p.messageExpiryInterval as number;
  if (p.payloadFormatIndicator === 1) properties.payloadFormatIndicator = true;
  const pairs = p.userProperties as [string, string][];
  if (pairs.length > 0) {
    const user: Record<string, string | string[]> = {};
    for (const [name, value] of pairs) {
      const seen = user[name];
      user[name] = seen === undefined ? value : Array.isArray(seen) ? [...seen, value] : [seen, value];
    }
    properties.userProperties = user;
  }
  return properties;
}

/** How long `close()` waits for the broker to take the goodbye before it drops the connection. */
const CLOSE_GRACE_MS = 2000;

/**
 * `mqtt.connectAsync` (no retries before the first connection) with every connection watched
 * for PUBACK refusals MQTT.js cannot read (see acks.ts).
 */
function connectWatched(url: string, options: IClientOptions): Promise<MqttClient> {
  const connection = mqtt.connect(url, { ...options, manualConnect: true });
  watchUnreadableAcks(connection);
  return new Promise((resolve, reject) => {
    const settle = (error?: Error) => {
      connection.off("connect", connected);
      connection.off("error", failed);
      connection.off("close", closed);
      if (error === undefined) {
        resolve(connection);
      } else {
        connection.end(true);
        reject(error);
      }
    };
    const connected = () => settle();
    const failed = (error: Error) => settle(error);
    const closed = () => settle(new Error("Couldn't connect to server"));
    connection.on("connect", connected);
    connection.on("error", failed);
    connection.on("close", closed);
    connection.connect();
  });
}

/**
 * A connected state store client over MQTT 5 on WebSocket. `await Client.connect(url)`, then
 * `set`, `get`, `del`, `vdel`, `scan`, `observe`; `close()` at the end.
 */
export class Client {
  /** The client id (generated when absent). */
  readonly clientId: string;
  #mqtt: MqttClient;
  #core: wasm.ClientCore;
  #calls = new Map<number, { resolve: (e: Completed) => void; reject: (e: MqstoreError) => void }>();
  #watchers = new Map<string, Set<(change: Change) => void>>();
  #timer: ReturnType<typeof setTimeout> | undefined;
  #closed = false;
  /** Held leases, by their id (the state machine renews them). */
  #leases = new Map<number, Lease>();
  #jobsListeners = new Map<string, Set<(n: JobNotification) => void>>();
  /** Keyed by `shadowKey(thing, name)`. */
  #shadowListeners = new Map<string, Set<(n: ShadowNotification) => void>>();
  #commandListeners = new Set<(record: CommandRecord) => void>();
  #keyspaceListeners = new Set<{ onEvent: (event: KeyspaceEvent) => void; onResumed?: () => void }>();

  private constructor(mqttClient: MqttClient, core: wasm.ClientCore, clientId: string) {
    this.#mqtt = mqttClient;
    this.#core = core;
    this.clientId = clientId;
  }

  /**
   * Connects to the broker's WebSocket listener (`ws://host:port` or `wss://...`) and
   * subscribes; resolves once calls can be made. Rejects with an MqstoreError (207: cannot
   * reach the broker; 208: refused).
   */
  static async connect(url: string, options: ConnectOptions = {}): Promise<Client> {
    await init();
    if (typeof url !== "string" || !/^wss?:\/\//.test(url)) {
      throw new InvalidArgumentError(`the broker URL must start with ws:// or wss://, not ${JSON.stringify(url)}`);
    }
    const tls = tlsSettings(url, options.tls);
    const clientId = options.clientId ?? `mqstore-js-${Math.floor(Math.random() * 2 ** 32).toString(16).padStart(8, "0")}`;
    const timeoutMs = options.timeoutMs ?? 10_000;
    let client: Client | undefined;
    const core = guarded(
      typed(() => new wasm.ClientCore(clientId, Math.random() * 2 ** 52, timeoutMs)),
      (error) => {
        if (client) client.#stop(error);
      },
    );
    const mqttOptions: IClientOptions = {
      protocolVersion: 5,
      clientId,
      username: options.username,
      password: options.password,
      clean: true,
      connectTimeout: timeoutMs,
      reconnectPeriod: 0,
      will: { topic: core.presenceTopic(), payload: wire(wasm.presenceGone()), qos: 1, retain: false },
      ...tls,
    };
    let connection: MqttClient;
    try {
      connection = await connectWatched(url, mqttOptions);
    } catch (e) {
      const reason = (e as { code?: number | string }).code;
      if (reason === "ERR_OSSL_BAD_DECRYPT") {
        throw new InvalidArgumentError("tls.passphrase is wrong: Node's TLS could not decrypt tls.key with it");
      }
      if (typeof reason === "number" && reason >= 0x80) {
        throw new BrokerRefusedError(`the MQTT broker refused the connection (reason code 0x${reason.toString(16)})`);
      }
      const message = (e as Error).message || String(e);
      // Node's TLS names what it could not check; the hint is then about certificates.
      const hint = /certificate|CERT_/i.test(`${message} ${(e as { code?: unknown }).code}`)
        ? "its certificate could not be checked: tls.ca in Node, the browser's trusted CAs otherwise"
        : "is its WebSocket listener there?";
      throw new BrokerUnreachableError(`cannot reach the MQTT broker at ${url} (${hint}): ${message}`);
    }
    const made = new Client(connection, core, clientId);
    client = made;
    connection.on("message", (_topic, _payload, packet) => made.#safely(() => made.#receive(packet)));
    connection.on("close", () => made.#safely(() => made.#lost()));
    // Connection errors show as failed calls and reconnects; without a listener MQTT.js would
    // raise them as uncaught.
    connection.on("error", () => {});
    connection.on("connect", () => void made.#resume());
    connection.options.reconnectPeriod = options.reconnectMs ?? 1000;
    try {
      for (const filter of core.subscriptions() as string[]) {
        await connection.subscribeAsync(filter, { qos: 1 });
      }
    } catch (e) {
      connection.end(true);
      if (e === trapped) throw e;
      throw new BrokerRefusedError(`the broker refused the subscriptions: ${(e as Error).message}`);
    }
    return made;
  }

  /**
   * Runs `run` from an event or a timer, where a throw would be uncaught: the InternalError of
   * a trap has ended the client already (`#stop`), so it goes no further.
   */
  #safely(run: () => void): void {
    try {
      run();
    } catch (e) {
      if (e !== trapped) throw e;
    }
  }

  /** The module trapped: every call in flight fails with `error`, and the client ends. */
  #stop(error: InternalError): void {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#timer);
    for (const lease of this.#leases.values()) lease.stopRenewing();
    for (const waiter of this.#calls.values()) waiter.reject(error);
    this.#calls.clear();
    this.#mqtt.end(true);
  }

  #receive(packet: IPublishPacket): void {
    const p = packet.properties ?? {};
    const userProperties: [string, string][] = [];
    for (const [name, value] of Object.entries(p.userProperties ?? {})) {
      for (const v of Array.isArray(value) ? value : [value]) userProperties.push([name, String(v)]);
    }
    const payload = typeof packet.payload === "string" ? encoder.encode(packet.payload) : new Uint8Array(packet.payload);
    try {
      this.#core.handle(
        {
          topic: packet.topic,
          payload,
          qos: packet.qos,
          responseTopic: p.responseTopic,
          correlationData: p.correlationData ? new Uint8Array(p.correlationData) : undefined,
          contentType: p.contentType,
          userProperties,
        },
        Date.now(),
      );
    } catch {
      return; // not a message for this client
    }
    this.#pump();
  }

  /** After a reconnect: subscribe again, then register every observed key again. */
  async #resume(): Promise<void> {
    try {
      // The session's whole set: things' jobs and command events included.
      for (const filter of this.#core.subscriptions() as string[]) {
        await this.#mqtt.subscribeAsync(filter, { qos: 1 });
      }
      this.#core.resume(Date.now());
      this.#pump();
      // Keyspace events missed while away: their listeners look again.
      for (const listener of this.#keyspaceListeners) listener.onResumed?.();
    } catch {
      // The connection dropped again: the next reconnect resumes.
    }
  }

  #lost(): void {
    if (this.#closed) return;
    this.#core.connectionLost();
    this.#pump();
  }

  /** Sends what the state machine queued, delivers its events, and sets the next timer. */
  #pump(): void {
    for (const p of this.#core.takePublishes() as Array<Record<string, unknown>>) {
      const call = p.call as number | undefined;
      this.#mqtt.publish(p.topic as string, wire(p.payload as Uint8Array), { qos: 1, properties: mqttProperties(p) }, (error) => {
        // A PUBACK reason code of 0x80 or more (MQTT.js puts it in `code`): the broker refused
        // the publish, and the call fails with that.
        const code = (error as { code?: unknown } | undefined)?.code;
        if (call !== undefined && typeof code === "number" && code >= 0x80) {
          this.#safely(() => {
            this.#core.publishRefused(call, code);
            this.#pump();
          });
        }
      });
    }
    for (const event of this.#core.takeEvents() as CoreEvent[]) {
      if (event.kind === "completed") {
        const waiter = this.#calls.get(event.call);
        this.#calls.delete(event.call);
        if (!waiter) continue;
        if (event.error) waiter.reject(asMqstoreError(event.error));
        else waiter.resolve(event);
      } else if (event.kind === "changed") {
        const value = event.value;
        const change: Change = {
          key: event.key,
          value,
          get text() {
            return value === null ? null : decoder.decode(value);
          },
          version: event.version,
          synthetic: event.synthetic,
          gap: event.gap,
        };
        for (const watcher of this.#watchers.get(hex(event.key)) ?? []) watcher(change);
      } else if (event.kind === "jobs-notification") {
        for (const listener of this.#jobsListeners.get(event.notification.thing) ?? []) listener(event.notification);
      } else if (event.kind === "shadow-notification") {
        for (const listener of this.#shadowListeners.get(shadowKey(event.thing, event.name)) ?? []) listener(event.notification);
      } else if (event.kind === "command-record") {
        for (const listener of this.#commandListeners) listener(event.record);
      } else if (event.kind === "keyspace") {
        const keyspaceEvent: KeyspaceEvent = { key: event.key, created: event.created };
        for (const listener of this.#keyspaceListeners) listener.onEvent(keyspaceEvent);
      } else if (event.kind === "lease-lost") {
        this.#leases.get(event.lease)?.stopRenewing();
        this.#leases.delete(event.lease);
      }
    }
    clearTimeout(this.#timer);
    const deadline = this.#core.nextDeadline();
    if (deadline !== undefined && !this.#closed) {
      this.#timer = setTimeout(
        () =>
          this.#safely(() => {
            this.#core.expire(Date.now());
            this.#pump();
          }),
        Math.max(0, deadline - Date.now()),
      );
    }
  }

  #call(start: () => number): Promise<Completed> {
    if (this.#closed) return Promise.reject(trapped ?? new ConnectionLostError("the client is closed"));
    let call: number;
    try {
      call = start();
    } catch (e) {
      return Promise.reject(asMqstoreError(e));
    }
    const done = new Promise<Completed>((resolve, reject) => this.#calls.set(call, { resolve, reject }));
    // A trap while pumping rejects `done` (`#stop`).
    this.#safely(() => this.#pump());
    return done;
  }

  #request(request: Request, options: object = {}): Promise<Completed> {
    return this.#call(() => this.#core.call(request, options, Date.now()));
  }

  /** SET `key` to `value`. */
  async set(key: Bytes, value: Bytes, options: SetOptions = {}): Promise<SetResult> {
    if (options.nx && options.nex) throw new InvalidArgumentError("nx and nex exclude each other");
    const request: Request = {
      op: "SET",
      key: asBytes(key),
      value: asBytes(value),
      ...(options.nx ? { condition: "NX" as const } : options.nex ? { condition: "NEX" as const } : {}),
      ...(options.expiresMs !== undefined ? { pxMs: options.expiresMs } : {}),
    };
    const done = await this.#request(request, { fencingToken: options.fencingToken, persist: options.persist });
    return { applied: done.applied === true, version: done.version ?? null };
  }

  /** GET `key`: its value and version, or null. */
  async get(key: Bytes): Promise<Versioned | null> {
    const done = await this.#request({ op: "GET", key: asBytes(key) });
    if (done.response?.kind !== "value") return null;
    const value = done.response.value;
    return {
      value,
      get text() {
        return decoder.decode(value);
      },
      version: done.version ?? null,
    };
  }

  /** DEL `key`. */
  async del(key: Bytes, options: { fencingToken?: wasm.Hlc } = {}): Promise<DeleteResult> {
    return deletion(await this.#request({ op: "DEL", key: asBytes(key) }, options));
  }

  /** VDEL: deletes `key` only if it holds `value`. */
  async vdel(key: Bytes, value: Bytes, options: { fencingToken?: wasm.Hlc } = {}): Promise<DeleteResult> {
    return deletion(await this.#request({ op: "VDEL", key: asBytes(key), value: asBytes(value) }, options));
  }

  /** SCAN: every key matching `pattern` (`*` and `?`), page after page. */
  async scan(pattern: Bytes): Promise<Uint8Array[]> {
    const keys: Uint8Array[] = [];
    let token: Uint8Array | undefined;
    do {
      const done = await this.#request({ op: "SCAN", pattern: asBytes(pattern), ...(token ? { token } : {}) });
      if (done.response?.kind !== "keys") throw new UnexpectedAnswerError("unexpected answer to SCAN");
      keys.push(...done.response.keys);
      token = done.response.token;
    } while (token);
    return keys;
  }

  /**
   * Calls `onChange` for every change of `key` (also across reconnects); resolves once the
   * server registered it, to a function that stops.
   */
  async onChange(key: Bytes, onChange: (change: Change) => void): Promise<() => Promise<void>> {
    const bytes = asBytes(key);
    const id = hex(bytes);
    let watchers = this.#watchers.get(id);
    const first = watchers === undefined;
    watchers ??= new Set();
    watchers.add(onChange);
    this.#watchers.set(id, watchers);
    if (first) await this.#call(() => this.#core.observe(bytes, Date.now()));
    return async () => {
      const set = this.#watchers.get(id);
      set?.delete(onChange);
      if (set && set.size === 0) {
        this.#watchers.delete(id);
        if (!this.#closed) await this.#call(() => this.#core.unobserve(bytes, Date.now()));
      }
    };
  }

  /** The changes of `key` as an async iterator (`for await`); `return()` / `break` stops. */
  async observe(key: Bytes): Promise<AsyncIterableIterator<Change>> {
    const queue: Change[] = [];
    let wake: (() => void) | undefined;
    const stop = await this.onChange(key, (change) => {
      queue.push(change);
      wake?.();
    });
    let done = false;
    const iterator: AsyncIterableIterator<Change> = {
      [Symbol.asyncIterator]: () => iterator,
      /** Takes the next change. */
      next: async () => {
        while (!done && queue.length === 0) await new Promise<void>((r) => (wake = r));
        return done ? { done: true, value: undefined } : { done: false, value: queue.shift()! };
      },
      /** Stops observing. */
      return: async () => {
        done = true;
        wake?.();
        await stop();
        return { done: true, value: undefined };
      },
    };
    return iterator;
  }

  /**
   * Takes the lease on `key` for `ttlMs` (renewed a third of its ttl after each claim while
   * held), waiting up to `waitMs` for its holder to release it or let it lapse (0: try once;
   * `Infinity`: until held). Resolves to the lease, or null when someone else still holds it.
   */
  async lease(key: Bytes, ttlMs: number, options: { waitMs?: number } = {}): Promise<Lease | null> {
    const waitMs = options.waitMs ?? 0;
    const wait = Number.isFinite(waitMs) ? waitMs : null;
    const done = await this.#call(() => this.#core.lease(asBytes(key), ttlMs, wait, Date.now()));
    const token = done.result as wasm.Hlc | null;
    if (token === null) return null;
    const lease = new Lease(token, () => {
      this.#leases.delete(done.call);
      return this.#call(() => this.#core.releaseLease(done.call, Date.now()));
    });
    this.#leases.set(done.call, lease);
    return lease;
  }

  /**
   * Leader election: campaigns until this client holds the lease on `key`, then resolves to
   * it. Leadership lasts while `lease.held`; step down with `lease.release()`.
   */
  async lead(key: Bytes, ttlMs: number): Promise<Lease> {
    for (;;) {
      const lease = await this.lease(key, ttlMs, { waitMs: Number.POSITIVE_INFINITY });
      if (lease) return lease;
    }
  }

  /** Subscribes to filters the session added to its set (it names each once). */
  async #subscribe(filters: string[]): Promise<void> {
    for (const filter of filters) {
      try {
        await this.#mqtt.subscribeAsync(filter, { qos: 1 });
      } catch (e) {
        throw new BrokerRefusedError(`the broker refused the subscription to ${filter}: ${(e as Error).message}`);
      }
    }
  }

  /** An operator call; resolves to what it asks for (the core picks the answer's record). */
  async #operate(op: string, args: object = {}): Promise<any> {
    return (await this.#call(() => this.#core.jobsOperate(op, args, Date.now()))).result;
  }

  // ---- jobs: the operator API -----------------------------------------------------------

  /** Creates a job and queues an execution of it on every target. */
  async createJob(spec: JobSpec & JobShorthands): Promise<void> {
    await this.#operate("createJob", spec);
  }

  /**
   * Cancels a job: QUEUED executions become CANCELED, IN_PROGRESS ones too with `force`;
   * `reasonCode` (`[A-Z0-9_]+`) and `comment` are kept with it.
   */
  async cancelJob(jobId: string, options: { force?: boolean; reasonCode?: string; comment?: string } = {}): Promise<void> {
    await this.#operate("cancelJob", { jobId, ...options });
  }

  /** Changes a job's description, timeout, retry, rollout or abort settings (absent: unchanged). */
  async updateJob(update: JobUpdate): Promise<void> {
    await this.#operate("updateJob", update);
  }

  /** Deletes a job and its executions: a COMPLETED or CANCELED one, any with `force`. */
  async deleteJob(jobId: string, options: { force?: boolean } = {}): Promise<void> {
    await this.#operate("deleteJob", { jobId, force: options.force ?? false });
  }

  /**
   * Cancels one thing's execution of a job (`force` for an IN_PROGRESS one), only if it is at
   * `expectedVersion` when one is given.
   */
  async cancelJobExecution(
    jobId: string,
    thing: string,
    options: { force?: boolean; expectedVersion?: number; statusDetails?: Record<string, string> } = {},
  ): Promise<void> {
    await this.#operate("cancelJobExecution", { ...options, jobId, thing, force: options.force ?? false });
  }

  /** Deletes the execution of `jobId` on `thing` (`force` for an IN_PROGRESS one). */
  async deleteJobExecution(jobId: string, thing: string, options: { force?: boolean } = {}): Promise<void> {
    await this.#operate("deleteJobExecution", { jobId, thing, force: options.force });
  }

  /** A job: its document, targets, settings and how many executions are in each status. */
  async describeJob(jobId: string): Promise<JobDescription> {
    return await this.#operate("describeJob", { jobId });
  }

  /** The latest execution of `jobId` on `thing`. */
  async describeJobExecution(jobId: string, thing: string): Promise<JobExecution> {
    return await this.#operate("describeJobExecution", { jobId, thing });
  }

  /** Every job. */
  async listJobs(): Promise<JobListing[]> {
    return await this.#operate("listJobs");
  }

  /** A page of jobs in id order (pass `nextToken` for the next), narrowed by status. */
  async listJobsPage(
    page: { status?: JobStatus; maxResults?: number; nextToken?: string } = {},
  ): Promise<JobsPage> {
    return await this.#operate("listJobs", { maxResults: 250, ...page });
  }

  /** A page of the latest executions, narrowed by thing, job and status. */
  async listJobExecutionsPage(
    page: { thing?: string; jobId?: string; status?: JobExecutionStatus; maxResults?: number; nextToken?: string } = {},
  ): Promise<ExecutionsPage> {
    return await this.#operate("listJobExecutions", { maxResults: 250, ...page });
  }

  /**
   * Any operator call with AWS's request fields (`jobsOperate("updateJob", { jobId, ... })`;
   * docs/protocol/jobs.md), or the shorthands every client shares (`thing`, `group`,
   * `inProgressTimeoutMinutes`, `maxRetries`, `maxPerMinute`, ...: "Shorthands" there): its
   * answer (for describe calls and unpaged lists, the record or the list alone).
   */
  async jobsOperate(op: string, args: object = {}): Promise<any> {
    return await this.#operate(op, args);
  }

  // ---- thing groups and job templates ----------------------------------------------------

  /** Makes a static thing group; jobs target it as `thinggroup/NAME`. */
  async createThingGroup(name: string, options: { description?: string } = {}): Promise<ThingGroupDescription> {
    return await this.#operate("createThingGroup", { group: name, description: options.description });
  }

  /** Removes a thing group and its membership (jobs keep the things they have). */
  async deleteThingGroup(name: string): Promise<void> {
    await this.#operate("deleteThingGroup", { group: name });
  }

  /** A thing group. */
  async describeThingGroup(name: string): Promise<ThingGroupDescription> {
    return await this.#operate("describeThingGroup", { group: name });
  }

  /** A page of thing groups in name order. */
  async listThingGroups(
    page: { maxResults?: number; nextToken?: string } = {},
  ): Promise<ThingGroupsPage> {
    return await this.#operate("listThingGroups", page);
  }

  /** Adds `thing` to a group: CONTINUOUS jobs on the group reach it (at their rate). */
  async addThingToThingGroup(group: string, thing: string): Promise<void> {
    await this.#operate("addThingToThingGroup", { group, thing });
  }

  /** Removes `thing` from a group: its QUEUED executions of CONTINUOUS jobs on it become REMOVED. */
  async removeThingFromThingGroup(group: string, thing: string): Promise<void> {
    await this.#operate("removeThingFromThingGroup", { group, thing });
  }

  /** A page of a group's things in name order. */
  async listThingsInThingGroup(
    group: string,
    page: { maxResults?: number; nextToken?: string } = {},
  ): Promise<ThingsPage> {
    return await this.#operate("listThingsInThingGroup", { group, ...page });
  }

  /** Stores a job template (`createJob` with `jobTemplateArn` starts from it); resolves to its ARN. */
  async createJobTemplate(template: JobTemplate): Promise<string> {
    return (await this.#operate("createJobTemplate", template)).jobTemplateArn;
  }

  /** A job template. */
  async describeJobTemplate(id: string): Promise<JobTemplate> {
    return await this.#operate("describeJobTemplate", { jobTemplateId: id });
  }

  /** A page of job templates in id order. */
  async listJobTemplates(
    page: { maxResults?: number; nextToken?: string } = {},
  ): Promise<TemplatesPage> {
    return await this.#operate("listJobTemplates", page);
  }

  /** Removes a job template (jobs made from it stay). */
  async deleteJobTemplate(id: string): Promise<void> {
    await this.#operate("deleteJobTemplate", { jobTemplateId: id });
  }

  /** The latest executions, narrowed by thing, job and status. */
  async listJobExecutions(filter: { thing?: string; jobId?: string; status?: JobExecutionStatus } = {}): Promise<ExecutionListing[]> {
    return await this.#operate("listJobExecutions", filter);
  }

  // ---- jobs: the device API -------------------------------------------------------------

  /**
   * Acts as `thing` in the AWS IoT Jobs device API: subscribes to its replies and
   * notifications (again after every reconnect) and resolves once subscribed.
   */
  async jobs(thing: string): Promise<Jobs> {
    try {
      await this.#subscribe(typed(() => this.#core.actAs(thing)) as string[]);
    } catch (e) {
      this.#core.leave(thing); // not subscribed: the next jobs(thing) tries again
      throw e;
    }
    const device = (api: string, args: object) =>
      this.#call(() => this.#core.jobsDevice(thing, api, args, Date.now())).then((done) => done.result);
    const listen = (listener: (n: JobNotification) => void) => {
      const listeners = this.#jobsListeners.get(thing) ?? new Set();
      listeners.add(listener);
      this.#jobsListeners.set(thing, listeners);
      return () => void listeners.delete(listener);
    };
    return new Jobs(thing, device, listen);
  }

  // ---- device shadows -------------------------------------------------------------------

  /**
   * Uses `thing`'s device shadow `name` (none: its classic shadow), as AWS IoT's Device Shadow
   * API: subscribes to its answers, deltas and documents (again after every reconnect) and
   * resolves once subscribed. A refusal is a `StatusError` with AWS's code in `status`; needs
   * `mqstore serve` (or the broker plugin) with jobs on.
   */
  async shadow(thing: string, name?: string): Promise<Shadow> {
    const shadowName = name ?? null;
    try {
      await this.#subscribe(typed(() => this.#core.useShadow(thing, shadowName)) as string[]);
    } catch (e) {
      this.#core.leaveShadow(thing, shadowName); // not subscribed: the next shadow() tries again
      throw e;
    }
    const request = (op: string, body?: object) =>
      this.#call(() => this.#core.shadow(thing, shadowName, op, body, Date.now())).then((done) => done.result);
    const key = shadowKey(thing, shadowName);
    const listen = (listener: (n: ShadowNotification) => void) => {
      const listeners = this.#shadowListeners.get(key) ?? new Set();
      listeners.add(listener);
      this.#shadowListeners.set(key, listeners);
      return () => void listeners.delete(listener);
    };
    return new Shadow(thing, shadowName, request, listen);
  }

  // ---- commands -------------------------------------------------------------------------

  /**
   * Asks `mqstore serve` to send a command to a device on `topic` and resolves to the reply.
   * Awaited (the default): the device's answer, or a CommandFailedError,
   * CommandRejectedError or CommandTimeoutError; `mode: "oneway"`: DELIVERED once the broker
   * took it; `mode: "detached"`: SENT with the command id at once (follow it with
   * `commandStatus` or `watchCommands`).
   */
  async command(topic: string, payload: Bytes, options: CommandOptions = {}): Promise<CommandReply> {
    return (await this.#call(() => this.#core.command(topic, payload, options, Date.now()))).result;
  }

  /**
   * Starts stored command `commandId` (see `defineCommand`) on `target` — a thing name,
   * `thing/NAME`, `clients/CLIENT_ID` or a thing's ARN — as AWS's StartCommandExecution does:
   * `parameters` fill its payload template (a string, number or boolean, or AWS's typed
   * `{S}`, `{I}`, `{B}`, …). Resolves as `command`; an unknown command rejects with a
   * StatusError 404, a missing or unknown parameter 400.
   */
  async startCommand(
    commandId: string,
    target: string,
    parameters: Record<string, unknown> = {},
    options: { timeoutMs?: number; mode?: "await" | "oneway" | "detached" } = {},
  ): Promise<CommandReply> {
    if (!commandId) throw new InvalidArgumentError("the command id must not be empty");
    const start = { ...options, command: commandId, parameters };
    return (await this.#call(() => this.#core.command(target, new Uint8Array(), start, Date.now()))).result;
  }

  /**
   * Stores a command that `startCommand` sends by id (AWS's CreateCommand); resolves to it as
   * stored. A taken id rejects with a StatusError 409, a bad definition 400.
   */
  async defineCommand(command: CommandDefinition): Promise<CommandDefinition> {
    return (await this.#definitions("create", { command })).command;
  }

  /** Stored command `commandId` (a StatusError 404 when there is none). */
  async commandDefinition(commandId: string): Promise<CommandDefinition> {
    return (await this.#definitions("get", { commandId })).command;
  }

  /** Every stored command, by id. */
  async commandDefinitions(): Promise<CommandDefinition[]> {
    return (await this.#definitions("list", {})).commands;
  }

  /** Deletes stored command `commandId`: whether there was one. */
  async deleteCommandDefinition(commandId: string): Promise<boolean> {
    return (await this.#definitions("delete", { commandId })).deleted;
  }

  async #definitions(op: string, args: object): Promise<any> {
    return (await this.#call(() => this.#core.commandDefinitions(op, args, Date.now()))).result;
  }

  /** Command `id`'s status record (kept three timeouts after it was sent). */
  async commandStatus(id: string): Promise<CommandRecord> {
    return (await this.#call(() => this.#core.commandStatus(id, Date.now()))).result;
  }

  /**
   * Calls `onRecord` with every command's status changes from now on (any node's, any
   * caller's); resolves once subscribed, to a function that stops.
   */
  async watchCommands(onRecord: (record: CommandRecord) => void): Promise<() => void> {
    const filter = this.#core.watchCommands();
    try {
      if (filter) await this.#subscribe([filter]);
    } catch (e) {
      this.#core.unwatchCommands(); // not subscribed: the next watchCommands tries again
      throw e;
    }
    this.#commandListeners.add(onRecord);
    return () => void this.#commandListeners.delete(onRecord);
  }

  /**
   * Calls `onEvent` for every key made or deleted from now on (the server's keyspace events;
   * `mqstore serve --no-keyspace-events` turns them off), and `onResumed` after each
   * reconnect (events meanwhile were missed: scan again); resolves once subscribed, to a
   * function that stops. Events are QoS 0 and may come out of order across nodes.
   */
  async watchKeyspace(onEvent: (event: KeyspaceEvent) => void, onResumed?: () => void): Promise<() => void> {
    const filter = this.#core.watchKeyspace();
    try {
      if (filter) await this.#subscribe([filter]);
    } catch (e) {
      this.#core.unwatchKeyspace(); // not subscribed: the next watchKeyspace tries again
      throw e;
    }
    const listener = { onEvent, onResumed };
    this.#keyspaceListeners.add(listener);
    return () => void this.#keyspaceListeners.delete(listener);
  }

  /** Disconnects (the broker does not publish the Will); calls in flight fail. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#timer);
    for (const lease of this.#leases.values()) lease.stopRenewing();
    // Connected: the presence message and the DISCONNECT go out politely, within a grace
    // period. Not connected (the broker away, a reconnect pending): nothing can be delivered,
    // and MQTT.js would wait for it for ever, so the connection ends at once.
    const connected = this.#mqtt.connected;
    if (connected) this.#mqtt.publish(this.#core.presenceTopic(), wire(wasm.presenceGone()), { qos: 1 });
    let grace: ReturnType<typeof setTimeout> | undefined;
    const graceOver = new Promise<"over">((resolve) => (grace = setTimeout(() => resolve("over"), CLOSE_GRACE_MS)));
    if ((await Promise.race([this.#mqtt.endAsync(!connected), graceOver])) === "over") {
      this.#mqtt.stream?.destroy();
    }
    clearTimeout(grace);
    this.#core.connectionLost();
    for (const event of this.#core.takeEvents() as CoreEvent[]) {
      if (event.kind === "completed") this.#calls.get(event.call)?.reject(asMqstoreError(event.error));
    }
    this.#calls.clear();
  }
}

function deletion(done: Completed): DeleteResult {
  return { outcome: done.deleted ?? "value_mismatch", version: done.version ?? null };
}

/**
 * A held lease (a lock with a fencing token), renewed by the client's state machine a third of
 * its ttl after each claim until released, lost, or its client closed. Pass `fencingToken` to
 * writes of what it guards.
 */
export class Lease {
  /** The version of the SET that took the lease. */
  readonly fencingToken: wasm.Hlc;
  #held = true;
  #release: () => Promise<Completed>;

  /** @internal */
  constructor(token: wasm.Hlc, release: () => Promise<Completed>) {
    this.fencingToken = token;
    this.#release = release;
  }

  /**
   * False once released, or once lost: a renewal found the lease taken by someone else, or
   * none was confirmed before it would lapse.
   */
  get held(): boolean {
    return this.#held;
  }

  /** @internal */
  stopRenewing(): void {
    this.#held = false;
  }

  /** Releases the lease (only if this client still holds it); resolves to whether it did. */
  async release(): Promise<boolean> {
    const wasHeld = this.#held;
    this.#held = false;
    if (!wasHeld) return false;
    return (await this.#release()).result === true;
  }
}

// ---- jobs and commands: types and the thing's handle ------------------------------------

/** Two shorthands `createJob` takes beside AWS's `CreateJob` fields (`JobSpec`). */
export interface JobShorthands {
  /** An IN_PROGRESS execution times out after this (1–10080): `timeoutConfig` in short. */
  inProgressTimeoutMinutes?: number;
  /** Executions that end FAILED or TIMED_OUT are queued again this many times (0–10). */
  maxRetries?: number;
  /** Queue at most this many executions a minute: `jobExecutionsRolloutConfig` in short. */
  maxPerMinute?: number;
}

/**
 * A job's status: `JobStatus` under its former name.
 * @deprecated `JobStatus` (AWS's name); an execution's status is `JobExecutionStatus`.
 */
export type JobLifecycle = JobStatus;

/**
 * A thing group as `describeThingGroup` answers: `ThingGroupDescription` under its former name.
 * @deprecated `ThingGroupDescription`.
 */
export type ThingGroup = ThingGroupDescription;

/** A key made (`created`) or gone (deleted or expired): `watchKeyspace`. */
export interface KeyspaceEvent {
  /** The key. */
  key: Uint8Array;
  /** True when the key was made, false when it was deleted or expired. */
  created: boolean;
}

/** A thing's `notify` (its pending list changed) or `notify-next` (its first entry changed). */
export type JobNotification =
  | { kind: "notify"; thing: string; in_progress: JobSummary[]; queued: JobSummary[] }
  | { kind: "notify-next"; thing: string; execution: JobExecution | null };

/** An update of one execution (`Jobs.update`). */
export interface ExecutionUpdate {
  /** The job's id (AWS's `jobId`). */
  jobId: string;
  /** The status. */
  status?: "IN_PROGRESS" | "SUCCEEDED" | "FAILED" | "REJECTED";
  /** The device's own key/value details of its status. */
  statusDetails?: Record<string, string>;
  /** Rejected with VersionMismatch unless the execution is at this version. */
  expectedVersion?: number;
  /** Which execution of the job on this thing, from 1. */
  executionNumber?: number;
  /** A timeout for this step, in minutes (AWS's `stepTimeoutInMinutes`). */
  stepTimeoutMinutes?: number;
  /** Whether the answer carries the execution's state. */
  includeState?: boolean;
  /** Whether the answer carries the job document. */
  includeDocument?: boolean;
}

/**
 * One thing's side of jobs (`client.jobs(thing)`): its pending list, start-next, describe,
 * update, and its notifications.
 */
export class Jobs {
  /** The thing's name. */
  readonly thing: string;
  #device: (api: string, args: object) => Promise<any>;
  #listen: (listener: (n: JobNotification) => void) => () => void;

  /** @internal */
  constructor(thing: string, device: (api: string, args: object) => Promise<any>, listen: (listener: (n: JobNotification) => void) => () => void) {
    this.thing = thing;
    this.#device = device;
    this.#listen = listen;
  }

  /** The pending list: IN_PROGRESS and QUEUED executions. */
  async pending(): Promise<PendingJobs> {
    const answer = await this.#device("getPending", {});
    return { inProgressJobs: answer.inProgressJobs ?? [], queuedJobs: answer.queuedJobs ?? [] };
  }

  /** Starts the first QUEUED execution (or returns the IN_PROGRESS one); null when nothing is pending. */
  async startNext(options: { statusDetails?: Record<string, string>; stepTimeoutMinutes?: number } = {}): Promise<JobExecution | null> {
    return await this.#device("startNext", options);
  }

  /** The latest execution of `jobId` on this thing, with its document. */
  async describe(jobId: string): Promise<JobExecution> {
    const execution = await this.#device("describe", { jobId });
    if (!execution) throw new UnexpectedAnswerError("describe was accepted without an execution");
    return execution;
  }

  /** The first pending execution, with its document; null when nothing is pending. */
  async describeNext(): Promise<JobExecution | null> {
    return await this.#device("describe", {});
  }

  /** Updates an execution; a JobsError (`jobsCode` VersionMismatch, InvalidStateTransition...) when refused. */
  async update(update: ExecutionUpdate): Promise<UpdateAccepted> {
    const { executionState, jobDocument } = await this.#device("update", update);
    return { executionState, jobDocument };
  }

  /** Calls `onNotification` with this thing's notifications; returns a function that stops. */
  onNotification(onNotification: (notification: JobNotification) => void): () => void {
    return this.#listen(onNotification);
  }
}

/** A shadow's key among the client's listeners (a thing name holds no `/`). */
const shadowKey = (thing: string, name: string | null): string => (name === null ? thing : `${thing}/${name}`);

/** A shadow's delta (`body`: `state`, `metadata`, `version`) or an update's documents (`body`: `previous`, `current`). */
export interface ShadowNotification {
  /** `delta` (`…/update/delta`) or `documents` (`…/update/documents`). */
  stream: "delta" | "documents";
  /** The notification's JSON as AWS's service sends it. */
  body: any;
}

/**
 * One device shadow (`client.shadow(thing, name)`): AWS IoT's get, update and delete, answered
 * with AWS's documents, and its deltas and documents as they come.
 */
export class Shadow {
  /** The thing's name. */
  readonly thing: string;
  /** The shadow's name; null for the classic shadow. */
  readonly name: string | null;
  #request: (op: string, body?: object) => Promise<any>;
  #listen: (listener: (n: ShadowNotification) => void) => () => void;

  /** @internal */
  constructor(
    thing: string,
    name: string | null,
    request: (op: string, body?: object) => Promise<any>,
    listen: (listener: (n: ShadowNotification) => void) => () => void,
  ) {
    this.thing = thing;
    this.name = name;
    this.#request = request;
    this.#listen = listen;
  }

  /** The whole document: `state` (`desired`, `reported`, `delta`), `metadata`, `version`, `timestamp`; a 404 `StatusError` when there is none. */
  async get(): Promise<any> {
    return await this.#request("get");
  }

  /**
   * Merges `state` (`{desired: {...}}`, `{reported: {...}}`; `null` removes a field or a
   * section) into the shadow, made if it does not exist. With `version`, only if the shadow
   * is at that version (else a 409 `StatusError`). Resolves to the update with its metadata
   * and the new version.
   */
  async update(state: object, options: { version?: number } = {}): Promise<any> {
    const body: { state: object; version?: number } = { state };
    if (options.version !== undefined) body.version = options.version;
    return await this.#request("update", body);
  }

  /** Deletes the shadow (its version is kept: the next one follows it); resolves to the deleted shadow's version. */
  async delete(): Promise<any> {
    return await this.#request("delete");
  }

  /** Calls `onNotification` with this shadow's deltas and documents; returns a function that stops. */
  onNotification(onNotification: (notification: ShadowNotification) => void): () => void {
    return this.#listen(onNotification);
  }
}

/** Options of `Client.command`. */
export interface CommandOptions {
  /** The device profile (`mqtt5` unless told; `dji`, `iothub`, `aws`, or one `mqstore serve` was given). */
  profile?: string;
  /** How long to wait for the device's answer (10 000 ms). */
  timeoutMs?: number;
  /** `await` (the default), `oneway` or `detached`. */
  mode?: "await" | "oneway" | "detached";
  /** The payload's content type, if given. */
  contentType?: string;
  /** User properties for the device. */
  headers?: Record<string, string>;
}

/** What a command call returned. */
export interface CommandReply {
  /** The id. */
  id: string;
  /** SUCCEEDED for an awaited command, DELIVERED for a one-way one, SENT for a detached one. */
  status: "SUCCEEDED" | "DELIVERED" | "SENT";
  /** The device's answer (empty without one). */
  payload: Uint8Array;
  /** The payload's content type, if given. */
  contentType?: string;
  /** The device's status code, when its profile reads one. */
  deviceStatus?: number;
}
