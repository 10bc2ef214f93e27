/**
 * PUBACKs that MQTT.js cannot read. MQTT.js (its parser, mqtt-packet) accepts in a PUBACK only
 * the reason codes MQTT 5 lists for it; any other is an "Invalid puback reason code" error,
 * after which that parser reads nothing more of the connection (seen with mqtt-packet 9): the
 * publish waits for an acknowledgement that never comes, and so does every later call.
 * mosquitto 2.0 refuses a message over its `message_size_limit` with exactly such a PUBACK
 * (0x95, packet too large). {@link watchUnreadableAcks} reads the packets' framing before
 * MQTT.js does, ends such a publish as refused with the broker's reason code, and puts a code
 * MQTT.js reads (0x80) in the packet's place, so the connection goes on; MQTT.js then ignores
 * that acknowledgement, its publish being ended already.
 */
import type { MqttClient } from "mqtt";

/** The refusal codes MQTT.js reads itself (and reports in the publish callback). */
const READABLE = new Set([0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99]);
const PUBACK = 0x40;
/** "Unspecified error": the refusal MQTT.js is given instead of one it cannot read. */
const UNSPECIFIED = 0x80;

/**
 * Walks the broker's byte stream packet by packet: each packet's fixed header, and a PUBACK's
 * packet id and reason code; every other byte is skipped without being looked at. A refusal
 * MQTT.js cannot read goes to `refused`, and is replaced in the chunk by 0x80.
 */
export class AckReader {
  readonly #refused: (messageId: number, code: number) => void;
  /** The bytes of the current packet's header read so far (at most 8). */
  #head = new Uint8Array(8);
  #have = 0;
  /** The remaining length, once read (-1 while its bytes are still coming). */
  #length = -1;
  /** Where the remaining length ended: the variable header starts there. */
  #body = 0;
  /** Body bytes still to skip. */
  #skip = 0;
  /** A malformed stream (MQTT.js closes such a connection): stop reading. */
  #lost = false;

  constructor(refused: (messageId: number, code: number) => void) {
    this.#refused = refused;
  }

  feed(chunk: Uint8Array): void {
    let at = 0;
    while (at < chunk.length && !this.#lost) {
      if (this.#skip > 0) {
        const n = Math.min(this.#skip, chunk.length - at);
        this.#skip -= n;
        at += n;
        continue;
      }
      this.#head[this.#have++] = chunk[at++];
      if (this.#have === 1) continue;
      if (this.#length < 0) {
        // The remaining length: 1 to 4 bytes, 7 bits each, least significant first.
        if (this.#head[this.#have - 1] & 0x80) {
          if (this.#have === 5) this.#lost = true;
          continue;
        }
        let length = 0;
        for (let i = this.#have - 1; i >= 1; i--) length = length * 128 + (this.#head[i] & 0x7f);
        this.#length = length;
        this.#body = this.#have;
        if (this.#head[0] !== PUBACK || length < 3) this.#next(length);
        continue;
      }
      if (this.#have - this.#body === 3) {
        const id = (this.#head[this.#body] << 8) | this.#head[this.#body + 1];
        const code = this.#head[this.#body + 2];
        if (code >= 0x80 && !READABLE.has(code)) {
          this.#refused(id, code);
          chunk[at - 1] = UNSPECIFIED;
        }
        this.#next(this.#length - 3);
      }
    }
  }

  /** The current packet's header is read; `skip` bytes of it remain. */
  #next(skip: number): void {
    this.#skip = skip;
    this.#have = 0;
    this.#length = -1;
  }
}

/** What MQTT.js keeps of a publish in flight (not in its public types). */
interface Internals {
  streamBuilder: (client: MqttClient) => NodeJS.ReadableStream;
  outgoing: Record<number, { cb?: (error?: Error) => void } | undefined>;
  _removeOutgoingAndStoreMessage(messageId: number, done: () => void): void;
}

/**
 * Watches every connection `client` makes (create it with `manualConnect`, call this, then
 * `connect()`): a PUBACK refusal MQTT.js cannot read ends its publish, whose callback gets an
 * error with the reason code in `code`, as MQTT.js reports the codes it reads.
 */
export function watchUnreadableAcks(client: MqttClient): void {
  const internals = client as unknown as Internals;
  const build = internals.streamBuilder;
  internals.streamBuilder = (owner: MqttClient) => {
    const stream = build(owner);
    const reader = new AckReader((messageId, code) => {
      const publish = internals.outgoing[messageId];
      if (publish === undefined) return;
      internals._removeOutgoingAndStoreMessage(messageId, () =>
        publish.cb?.(Object.assign(new Error(`Publish error: reason code 0x${code.toString(16)}`), { code })),
      );
    });
    // Before MQTT.js pipes the stream into its parser (in the same tick): this listener sees
    // each chunk first, and every chunk from the first; MQTT.js's parser gets the same chunk
    // after it.
    stream.on("data", (chunk: Uint8Array) => reader.feed(chunk));
    return stream;
  };
}
