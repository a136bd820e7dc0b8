import type { Cluster, Redis } from 'ioredis';
import {
  DEFAULT_SCHEDULED_RETENTION_MS,
  type AdmitVerdict,
  type DeliveryLedger,
  type DeliveryLedgerOptions,
  type LedgerCopy,
  type LedgerSettlement,
  type LostCopy,
  type OutageLoss,
  type ReplaceOutcome,
} from '../broker/delivery-ledger.js';
import {
  checkCopy,
  checkLostCopy,
  checkMessageId,
  checkMs,
  checkQueue,
  checkToken,
} from '../broker/ledger-arguments.js';
import { systemClock, type Clock } from '../clock/clock.js';
import { HarrierError } from '../errors/harrier-error.js';
import {
  ADMIT_SCRIPT,
  CANCEL_SCRIPT,
  LOST_SCRIPT,
  REPLACE_SCRIPT,
  SCHEDULED_SCRIPT,
  SETTLE_SCRIPT,
  TAKE_LOSS_SCRIPT,
} from './delivery-ledger-scripts.js';
import type { RedisConnectionOptions } from './redis-connection.js';
import {
  connectionFor,
  evalScript,
  keyPrefixOf,
  runCommand,
  type RedisConnection,
  type RedisErrorContext,
  type RedisScript,
} from './redis-support.js';

/** Options of {@link RedisDeliveryLedger}. */
export interface RedisDeliveryLedgerOptions extends DeliveryLedgerOptions {
  /**
   * Where Redis is: a `redis://` URL, an ioredis client to share, `{ cluster: nodes }`, or ioredis
   * options (see {@link RedisConnectionOptions}). A client passed in stays the caller's.
   * @defaultValue none; required
   */
  readonly connection: RedisConnectionOptions;
  /**
   * Prefix of every key the ledger writes; its keys are `<prefix>:ledger:<messageId>`. Every
   * publisher and receiver of one broker shares the prefix.
   * @defaultValue '\{harrier\}'
   */
  readonly prefix?: string;
}

/**
 * How long a message's hash outlives its latest record: the key's TTL is measured by Redis's clock
 * and the records by the ledger's, which may differ a little between processes.
 */
const KEY_GRACE_MS = 60_000;

/**
 * A {@link DeliveryLedger} in Redis, shared by every process of a broker.
 *
 * @remarks
 * One hash per message id, `<prefix>:ledger:<messageId>`, holds the token each queue delivers and
 * the scheduled copies; every call is one Lua script on that one key (so it is atomic, and works on
 * a Redis Cluster with any prefix), and the key expires a minute after its latest record. Failures
 * reject with `redis-unavailable`, `redis-command-failed`, or `store-closed` after
 * {@link RedisDeliveryLedger.close}.
 *
 * @example
 * ```ts
 * const ledger = new RedisDeliveryLedger({ connection: 'redis://127.0.0.1:6379' });
 * ```
 */
export class RedisDeliveryLedger implements DeliveryLedger {
  readonly #connection: RedisConnection;
  readonly #client: Redis | Cluster;
  readonly #keyspace: string;
  readonly #clock: Clock;
  readonly #retentionMs: number;
  readonly #errors: RedisErrorContext;
  #closed = false;

  /**
   * @throws HarrierError `invalid-option` when `prefix` is empty, `invalid-argument` for a
   *   `scheduledRetentionMs` that is not whole ms >= 0.
   */
  constructor(options: RedisDeliveryLedgerOptions) {
    this.#keyspace = `${keyPrefixOf(options.prefix, 'RedisDeliveryLedger')}:ledger:`;
    this.#clock = options.clock ?? systemClock;
    this.#retentionMs = options.scheduledRetentionMs ?? DEFAULT_SCHEDULED_RETENTION_MS;
    checkMs('scheduledRetentionMs', this.#retentionMs);
    this.#connection = connectionFor(options.connection);
    this.#client = this.#connection.client;
    this.#errors = {
      connection: this.#connection,
      command: 'a delivery ledger command',
      keyspace: this.#keyspace,
    };
  }

  async admit(copy: LedgerCopy, windowMs: number): Promise<AdmitVerdict> {
    checkCopy(copy);
    checkMs('windowMs', windowMs);
    const now = this.#clock.now();
    const reply = await this.#eval(ADMIT_SCRIPT, copy.messageId, [
      copy.queue,
      copy.token,
      String(now),
      String(now + windowMs),
      String(KEY_GRACE_MS),
    ]);
    return reply === 'cancelled' || reply === 'duplicate' ? reply : 'deliver';
  }

  async settle(copy: LedgerCopy, settlement: LedgerSettlement, windowMs: number): Promise<boolean> {
    checkCopy(copy);
    checkMs('windowMs', windowMs);
    const now = this.#clock.now();
    const reply = await this.#eval(SETTLE_SCRIPT, copy.messageId, [
      copy.queue,
      copy.token,
      settlement,
      String(now),
      String(now + windowMs),
      String(KEY_GRACE_MS),
    ]);
    return Number(reply) === 1;
  }

  /** One script per copy (each on its message id's key), all sent at once. */
  async lost(copies: readonly LostCopy[], windowMs: number): Promise<number> {
    copies.forEach(checkLostCopy);
    checkMs('windowMs', windowMs);
    this.#assertOpen();
    const at = this.#clock.now();
    const now = String(at);
    const replies = await Promise.all(
      copies.map((copy) =>
        this.#eval(LOST_SCRIPT, copy.messageId, [
          copy.queue,
          copy.token,
          String(copy.deliveryCount),
          String(copy.excusedEnds),
          now,
          String(at + windowMs),
          String(KEY_GRACE_MS),
          String(copy.droppedAt ?? at),
        ]),
      ),
    );
    return replies.filter((reply) => Number(reply) === 1).length;
  }

  async takeLoss(copy: LedgerCopy): Promise<OutageLoss | undefined> {
    checkCopy(copy);
    const now = this.#clock.now();
    const reply = await this.#eval(TAKE_LOSS_SCRIPT, copy.messageId, [copy.queue, copy.token, String(now)]);
    if (typeof reply !== 'string') return undefined;
    const [deliveryCount, excusedEnds, lostAt] = reply.split('|').map(Number);
    if (deliveryCount === undefined || excusedEnds === undefined || lostAt === undefined) return undefined;
    return { deliveryCount, excusedEnds, msAgo: Math.max(0, now - lostAt) };
  }

  async replace(copy: LedgerCopy, windowMs: number): Promise<ReplaceOutcome> {
    checkCopy(copy);
    checkMs('windowMs', windowMs);
    const now = this.#clock.now();
    const reply = await this.#eval(REPLACE_SCRIPT, copy.messageId, [
      copy.queue,
      copy.token,
      String(now),
      String(now + windowMs),
      String(KEY_GRACE_MS),
    ]);
    return reply === 'held' || reply === 'in-flight' ? reply : 'replaced';
  }

  async scheduled(
    messageId: string,
    token: string,
    queues: readonly string[],
    deliverAt: number,
  ): Promise<void> {
    checkMessageId(messageId);
    checkToken(token);
    queues.forEach(checkQueue);
    checkMs('deliverAt', deliverAt);
    if (queues.length === 0) {
      this.#assertOpen();
      return;
    }
    const now = this.#clock.now();
    await this.#eval(SCHEDULED_SCRIPT, messageId, [
      token,
      String(deliverAt),
      String(now),
      String(Math.max(now, deliverAt) + this.#retentionMs),
      String(KEY_GRACE_MS),
      ...queues,
    ]);
  }

  async cancel(messageId: string): Promise<number> {
    checkMessageId(messageId);
    return Number(await this.#eval(CANCEL_SCRIPT, messageId, [String(this.#clock.now())]));
  }

  /** Quits the client the ledger created from a URL; a client passed in is left open. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#connection.close();
  }

  #eval(script: RedisScript, messageId: string, args: readonly string[]): Promise<unknown> {
    this.#assertOpen();
    return runCommand(
      () => evalScript(this.#client, script, [`${this.#keyspace}${messageId}`], args),
      this.#errors,
    );
  }

  #assertOpen(): void {
    if (this.#closed) {
      throw new HarrierError(
        'store-closed',
        'The Redis delivery ledger is closed: create a new RedisDeliveryLedger to use it again',
      );
    }
  }
}
