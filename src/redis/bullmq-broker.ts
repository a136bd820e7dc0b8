import {
  DelayedError,
  Job,
  Queue,
  UnrecoverableError as BullUnrecoverableError,
  WaitingError,
  Worker,
} from 'bullmq';

/** The stored form of a job, as BullMQ reads it from Redis. */
type JobJson = Parameters<typeof Job.fromJSON>[1];
import {
  Cluster,
  Redis,
  type ClusterNode,
  type ClusterOptions,
  type RedisOptions as IoRedisOptions,
} from 'ioredis';

/** ioredis connection options (ioredis's own type, less `replyMapping`, which clashes with exactOptionalPropertyTypes). */
export type RedisOptions = Omit<IoRedisOptions, 'replyMapping'>;

import {
  MAX_ATTEMPT_HISTORY,
  type AttemptRecord,
  type Delivery,
  type MessageBroker,
  type NackOptions,
  type OutgoingMessage,
  type PendingDeadLetter,
  type ReceiverOptions,
  type RedeliveryTarget,
  type SubscriptionSpec,
} from '../broker/message-broker.js';
import { parseAttemptHistory, parsePendingDeadLetter } from '../broker/delivery-facts.js';
import { noRouteError } from '../broker/no-route-error.js';
import { systemClock, type Clock } from '../clock/clock.js';
import { settlesWithin, withDeadline } from '../clock/deadline.js';
import { sleep } from '../clock/sleep.js';
import { HarrierError } from '../errors/harrier-error.js';
import { StaleDeliveryError } from '../errors/stale-delivery-error.js';
import { consoleLogger, type Logger } from '../logging/logger.js';
import type { MessageKind } from '../messages/definition.js';
import { partitionOf } from '../messages/partition.js';
import { addJobsChecked } from './add-jobs.js';
import { AsyncInbox } from './async-inbox.js';
import { describeCluster, describeRedisUrl, redisUnavailable } from './redis-errors.js';

/** A Redis Cluster to connect to: some of its nodes (the rest are discovered) and ioredis cluster options. */
export interface RedisClusterConnection {
  /** Seed nodes, e.g. `[{ host: '10.0.0.1', port: 7000 }]` or `['redis://10.0.0.1:7000']`. */
  readonly cluster: readonly ClusterNode[];
  /** ioredis `Cluster` options; `redisOptions` applies to every node connection. */
  readonly options?: ClusterOptions;
}

function isClusterConnection(connection: unknown): connection is RedisClusterConnection {
  return typeof connection === 'object' && connection !== null && 'cluster' in connection;
}

/** Options of {@link BullMqBroker}. */
export interface BullMqBrokerOptions {
  /**
   * A `redis://` URL, ioredis options, or `{ cluster: [...nodes], options? }` for Redis Cluster (every
   * key carries the prefix's hash tag, so each multi-key script stays in one slot).
   */
  readonly connection: string | RedisOptions | RedisClusterConnection;
  /**
   * Prefix of every key. The braces make it a Redis Cluster hash tag, so all of Harrier's keys land
   * in one slot and its multi-key scripts work on a cluster.
   * @defaultValue '\{harrier\}'
   */
  readonly prefix?: string;
  /**
   * Partition queues per ordered subscription; messages of one key always go to the same one. Every
   * process sharing the prefix must use the same number (checked at start-up).
   * @defaultValue 8
   */
  readonly partitions?: number;
  /**
   * How long a published id is remembered per subscription to drop a second publish of it, in ms.
   * @defaultValue 86400000 (24 hours)
   */
  readonly dedupeWindowMs?: number;
  /**
   * How long a worker holds a message before another may take it, renewed while it runs, in ms.
   * @defaultValue 30000
   */
  readonly lockDurationMs?: number;
  /**
   * How often workers look for messages whose worker died, in ms.
   * @defaultValue 30000
   */
  readonly stalledIntervalMs?: number;
  /**
   * How long a publish waits for Redis before it fails, in ms.
   * @defaultValue 5000
   */
  readonly publishTimeoutMs?: number;
  /**
   * How long dead-lettered jobs stay in BullMQ's failed set (so replay can `retry` them), in ms.
   *
   * @remarks
   * BullMQ applies it when another job of the same queue fails (it runs no timer), so a queue that
   * stops failing keeps its last failed jobs until the next failure. Like
   * {@link BullMqBrokerOptions.failedRetentionCount}, it is fixed on each job when it is published,
   * so the publisher's setting counts.
   *
   * @defaultValue 604800000 (7 days)
   */
  readonly failedRetentionMs?: number;
  /**
   * Most dead-lettered jobs kept in each queue's failed set; when one more fails, the oldest go.
   *
   * @remarks
   * The dead-letter store holds the record of every dead letter; a failed job only lets a replay
   * `retry` the job in place (once it is gone, replay adds the message again under the same id), so
   * dropping old ones loses nothing. The cap bounds a queue that fails in bulk: each failed job is
   * its envelope, attempt history and stack traces, about 6 KB for a small envelope that failed five
   * times (measured by `npm run bench:redis-memory`; see docs/redis.md), so about 60 MB per queue at
   * the default cap. 0 keeps none.
   *
   * @defaultValue 10000
   */
  readonly failedRetentionCount?: number;
  /** @defaultValue the system clock */
  readonly clock?: Clock;
  /** @defaultValue warnings and errors as JSON lines on stderr */
  readonly logger?: Logger;
}

/**
 * What a job carries: the envelope untouched, plus delivery facts kept beside it. The message id is
 * the job id and the kind follows from the queue (`cmd~` or `evt~`), so neither is repeated here;
 * `i` and `k` are still read when present (jobs queued by earlier builds).
 */
interface JobData {
  /** Encoded envelope. */
  readonly b: string;
  /** Message id (earlier builds only: now the job id). */
  readonly i?: string;
  /** Kind (earlier builds only: now from the queue name). */
  readonly k?: MessageKind;
  /** Partition key. */
  readonly p?: string | undefined;
  /** Ordered. */
  readonly o?: boolean | undefined;
  /** Failed attempts so far. */
  readonly a?: number;
  /** Attempt history, newest last. */
  readonly h?: readonly AttemptRecord[];
  /** A dead-lettering decided by an earlier delivery that could not be recorded. */
  readonly d?: PendingDeadLetter;
}

type Outcome =
  | { readonly kind: 'ack' }
  | {
      readonly kind: 'retry';
      readonly retryAt: number;
      readonly record: AttemptRecord | undefined;
      readonly pendingDeadLetter: PendingDeadLetter | undefined;
    }
  | { readonly kind: 'dead'; readonly reason: string }
  | { readonly kind: 'release' }
  | { readonly kind: 'lost' };

interface Pending {
  readonly queue: string;
  readonly jobId: string;
  readonly settle: (outcome: Outcome) => void;
}

interface Route {
  readonly endpoint: string;
  readonly handler: string;
  readonly orderedTypes: readonly string[];
}

/** What the broker sets on each client it makes: how hard commands retry, and whether they queue. */
interface ClientSettings {
  readonly maxRetriesPerRequest: number | null;
  readonly enableOfflineQueue?: boolean;
  readonly lazyConnect?: boolean;
}

const SEPARATOR = '~';
/** How long closing a receiver waits for BullMQ's workers once none of its jobs is held any more. */
const WORKER_CLOSE_GRACE_MS = 3_000;
const KEEP_ATTEMPTS = 1_000_000;

/**
 * The production broker: BullMQ queues on Redis.
 *
 * @remarks
 * Each command type has a queue, each event subscription (endpoint, handler) has a queue, and
 * ordered types go to one of `partitions` partition queues chosen by FNV-1a-64 of the key, each
 * worked one message at a time. Subscriptions are registered in Redis, so a publisher reads who
 * subscribes and adds one job per subscription, with the message id as job id and deduplication id.
 * A worker's processor hands each job to the receiver and waits for the dispatcher's ack or nack,
 * so BullMQ's lock renewal and stalled-job recovery cover every delivery.
 */
export class BullMqBroker implements MessageBroker {
  readonly #prefix: string;
  readonly #partitions: number;
  readonly #dedupeWindowMs: number;
  readonly #lockDurationMs: number;
  readonly #stalledIntervalMs: number;
  readonly #publishTimeoutMs: number;
  readonly #failedRetentionMs: number;
  readonly #failedRetentionCount: number;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #connection: string | RedisOptions | RedisClusterConnection;
  readonly #client: Redis | Cluster;
  readonly #queues = new Map<string, Queue>();
  readonly #pending = new Map<string, Pending>();
  readonly #registered = new Map<string, SubscriptionSpec[]>();
  /** Command types known to have a route; a route is never removed, so a hit stays true. */
  readonly #commandRoutes = new Set<string>();
  readonly #receivers = new Set<{ close: () => Promise<void> }>();
  #ready: Promise<void> | undefined;
  #partitionsChecked: Promise<void> | undefined;
  #closed = false;

  constructor(options: BullMqBrokerOptions) {
    this.#connection = options.connection;
    this.#prefix = options.prefix ?? '{harrier}';
    this.#partitions = options.partitions ?? 8;
    this.#dedupeWindowMs = options.dedupeWindowMs ?? 86_400_000;
    this.#lockDurationMs = options.lockDurationMs ?? 30_000;
    this.#stalledIntervalMs = options.stalledIntervalMs ?? 30_000;
    this.#publishTimeoutMs = options.publishTimeoutMs ?? 5_000;
    this.#failedRetentionMs = options.failedRetentionMs ?? 604_800_000;
    this.#failedRetentionCount = options.failedRetentionCount ?? 10_000;
    this.#clock = options.clock ?? systemClock;
    this.#logger = options.logger ?? consoleLogger;
    if (this.#prefix.includes(':') || this.#prefix.length === 0) {
      throw new HarrierError(
        'invalid-option',
        `prefix "${this.#prefix}" must be non-empty and without ':', e.g. "{harrier}"`,
      );
    }
    partitionOf('', this.#partitions);
    assertWhole(this.#dedupeWindowMs, 'dedupeWindowMs', 1, 'e.g. 86400000 for 24 hours');
    assertWhole(this.#failedRetentionMs, 'failedRetentionMs', 0, 'e.g. 604800000 for 7 days');
    assertWhole(this.#failedRetentionCount, 'failedRetentionCount', 0, 'e.g. 10000 (0 keeps none)');
    // Producer connection: commands fail fast while Redis is away instead of queueing in memory.
    this.#client = this.#newClient(
      { maxRetriesPerRequest: 1, enableOfflineQueue: false, lazyConnect: true },
      'producer',
    );
    this.#client.on('error', (error: Error) => {
      this.#logger.debug('Redis producer connection error', { error: error.message });
    });
  }

  /** The key prefix in use. */
  get prefix(): string {
    return this.#prefix;
  }

  async register(endpoint: string, subscriptions: readonly SubscriptionSpec[]): Promise<void> {
    this.#assertOpen();
    for (const sub of subscriptions) assertName(sub.handler, 'handler name');
    assertName(endpoint, 'endpoint');
    await this.#checkPartitions();
    const client = await this.#connected();
    const multi = client.multi();
    const commandTypes = subscriptions.flatMap((sub) => (sub.kind === 'command' ? sub.types : []));
    for (const sub of subscriptions) {
      if (sub.kind !== 'event') continue;
      const route: Route = { endpoint, handler: sub.handler, orderedTypes: sub.orderedTypes ?? [] };
      for (const type of sub.types)
        multi.hset(
          this.#key('routes', type),
          this.#subscriptionQueue(endpoint, sub.handler),
          JSON.stringify(route),
        );
    }
    multi.hset(
      this.#key('endpoints'),
      endpoint,
      JSON.stringify({ subscriptions, registeredAt: this.#clock.now() }),
    );
    await this.#withTimeout(multi.exec(), 'register subscriptions');
    for (const type of commandTypes) this.#commandRoutes.add(type);
    // A partition queue is worked one job at a time across every process, not just per worker.
    const partitionQueues = subscriptions.flatMap((spec) =>
      this.#queuesFor(endpoint, spec).filter((q) => q.ordered),
    );
    await Promise.all(
      partitionQueues.map((q) =>
        this.#withTimeout(this.#queue(q.name).setGlobalConcurrency(1), 'limit partition concurrency'),
      ),
    );
    // Registration adds to what the endpoint registered before; a handler registered again replaces itself.
    const merged = new Map(
      (this.#registered.get(endpoint) ?? []).map((spec) => [`${spec.kind}/${spec.handler}`, spec]),
    );
    for (const spec of subscriptions) merged.set(`${spec.kind}/${spec.handler}`, spec);
    this.#registered.set(endpoint, [...merged.values()]);
  }

  receiver(options: ReceiverOptions): AsyncIterable<Delivery> {
    const specs = this.#registered.get(options.endpoint);
    if (specs === undefined) {
      throw new HarrierError(
        'not-registered',
        `Endpoint "${options.endpoint}" has not registered its subscriptions: call register() first (bus.start() does)`,
      );
    }
    return this.#receive(options, specs);
  }

  async publish(message: OutgoingMessage): Promise<void> {
    await this.publishBatch([message]);
  }

  async publishBatch(messages: readonly OutgoingMessage[]): Promise<void> {
    this.#assertOpen();
    if (messages.length === 0) return;
    await this.#checkPartitions();
    const client = await this.#connected();
    const eventTypes = [...new Set(messages.filter((m) => m.kind === 'event').map((m) => m.type))];
    // Commands whose route this process has not seen yet: asked in the same round trip as the events.
    const unrouted = new Set<string>();
    for (const m of messages) {
      if (m.kind !== 'event' && m.requireRoute !== false && !this.#commandRoutes.has(m.type))
        unrouted.add(m.type);
    }
    const routes = new Map<string, Route[]>();
    if (eventTypes.length > 0 || unrouted.size > 0) {
      const pipeline = client.pipeline();
      for (const type of eventTypes) pipeline.hgetall(this.#key('routes', type));
      // The endpoints hash is where register() records command types: read only on a cache miss.
      if (unrouted.size > 0) pipeline.hvals(this.#key('endpoints'));
      const results = (await this.#withTimeout(pipeline.exec(), 'read subscriptions')) ?? [];
      const reply = (index: number): unknown => {
        const [error, value] = results[index] ?? [new Error('no reply'), undefined];
        if (error) throw redisUnavailable(this.#describe(), error, isClusterConnection(this.#connection));
        return value;
      };
      eventTypes.forEach((type, index) => {
        routes.set(
          type,
          Object.values(reply(index) as Record<string, string>).map((v) => JSON.parse(v) as Route),
        );
      });
      if (unrouted.size > 0) this.#learnCommandRoutes(reply(eventTypes.length) as string[]);
      // Every command is checked before any job is added: a refused batch publishes nothing. A miss
      // is never cached: the handler's endpoint may register any time.
      for (const type of unrouted) if (!this.#commandRoutes.has(type)) throw noRouteError(type);
    }
    const byQueue = new Map<string, { name: string; data: JobData; opts: Record<string, unknown> }[]>();
    const now = this.#clock.now();
    for (const message of messages) {
      const targets =
        message.kind === 'event'
          ? (routes.get(message.type) ?? []).map((r) => this.#subscriptionQueue(r.endpoint, r.handler))
          : [this.#commandQueue(message.type)];
      for (const base of targets) {
        const queue = this.#placement(base, message);
        const list = byQueue.get(queue) ?? [];
        list.push({ name: message.type, data: jobData(message), opts: this.#jobOptions(message, now) });
        byQueue.set(queue, list);
      }
    }
    await Promise.all([...byQueue].map(([queue, jobs]) => this.#addAll(queue, jobs)));
  }

  ack(deliveryId: string): Promise<void> {
    return this.#settle(deliveryId, { kind: 'ack' });
  }

  nack(deliveryId: string, options: NackOptions): Promise<void> {
    if ('release' in options) return this.#settle(deliveryId, { kind: 'release' });
    if ('deadLetter' in options)
      return this.#settle(deliveryId, { kind: 'dead', reason: options.deadLetter });
    return this.#settle(deliveryId, {
      kind: 'retry',
      retryAt: options.retryAt,
      record:
        options.error === undefined ? undefined : { attempt: 0, at: this.#clock.now(), error: options.error },
      pendingDeadLetter: options.pendingDeadLetter,
    });
  }

  async redeliver(target: RedeliveryTarget): Promise<void> {
    this.#assertOpen();
    await this.#connected();
    const { message } = target;
    const base =
      message.kind === 'command'
        ? this.#commandQueue(message.type)
        : this.#subscriptionQueue(target.endpoint, target.handler);
    const queue = this.#queue(this.#placement(base, message));
    const existing = await this.#withTimeout(Job.fromId<JobData>(queue, message.id), 'find job');
    if (existing !== undefined) {
      const state = await this.#withTimeout(existing.getState(), 'read job state');
      if (state === 'failed') {
        await this.#withTimeout(existing.updateData({ ...jobData(message) }), 'reset job data');
        await this.#withTimeout(
          existing.retry('failed', { resetAttemptsMade: true, resetAttemptsStarted: true }),
          'retry job',
        );
        return;
      }
      if (state !== 'completed' && state !== 'unknown') return; // already queued or running
      await this.#withTimeout(existing.remove(), 'remove finished job');
    }
    await this.#withTimeout(queue.removeDeduplicationKey(message.id), 'clear dedupe key');
    await this.#addAll(queue.name, [
      {
        name: message.type,
        data: jobData(message),
        opts: this.#jobOptions({ ...message, deliverAt: undefined }, this.#clock.now()),
      },
    ]);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // Closing the broker gives every unsettled delivery back to its queue, so workers can stop.
    for (const [id, pending] of this.#pending) {
      this.#pending.delete(id);
      pending.settle({ kind: 'release' });
    }
    await Promise.all([...this.#receivers].map((r) => r.close()));
    await Promise.all([...this.#queues.values()].map((q) => q.close().catch(() => undefined)));
    this.#client.disconnect();
  }

  /** The queue names of one endpoint's subscriptions (for tooling and tests). */
  queuesOf(endpoint: string): string[] {
    return (this.#registered.get(endpoint) ?? []).flatMap((spec) =>
      this.#queuesFor(endpoint, spec).map((q) => q.name),
    );
  }

  async *#receive(options: ReceiverOptions, specs: readonly SubscriptionSpec[]): AsyncGenerator<Delivery> {
    const { endpoint, signal } = options;
    const prefetch = options.prefetch ?? 16;
    const inbox = new AsyncInbox<{ delivery: Delivery; pending: Pending }>();
    const workers: Worker[] = [];
    const clients: (Redis | Cluster)[] = [];
    /** This receiver's processors that have not returned yet. */
    const running = new Set<Promise<void>>();
    let closing: Promise<void> | undefined;
    const close = (): Promise<void> => {
      closing ??= (async () => {
        inbox.close();
        // Deliveries handed to the receiver but never taken go straight back to their queue.
        for (const { delivery, pending } of inbox.drain()) {
          if (this.#pending.delete(delivery.id)) pending.settle({ kind: 'release' });
        }
        const closed = Promise.all(workers.map((w) => w.close().catch(() => undefined)));
        // Each processor ends once its delivery is settled (acked, nacked or released by the
        // dispatcher, or released by broker.close()): that wait has no bound of its own.
        await Promise.all([...running]);
        // After that BullMQ only has its own loop to end. On Redis Cluster, BullMQ 6.7 can spend up to
        // 30 s re-connecting the blocking connection it is closing; nothing is held by then, so stop
        // waiting after a short while and let it finish in the background.
        if (!(await settlesWithin(closed, WORKER_CLOSE_GRACE_MS))) {
          this.#logger.warn('BullMQ workers still closing; not waiting for them', {
            endpoint,
            waitedMs: WORKER_CLOSE_GRACE_MS,
          });
        }
        for (const client of clients) client.disconnect();
      })();
      return closing;
    };
    const handle = { close };
    this.#receivers.add(handle);
    try {
      // One command connection for every worker of this receiver (BullMQ gives each worker its own
      // blocking duplicate): queues + 1 connections instead of 2 per queue.
      const connection = this.#newClient({ maxRetriesPerRequest: null }, `workers:${endpoint}`);
      connection.on('error', () => undefined);
      clients.push(connection);
      for (const spec of specs) {
        for (const { name, concurrency, handler, ordered } of this.#queuesFor(endpoint, spec, prefetch)) {
          const worker = new LenientWorker<JobData>(
            name,
            (job, token) => {
              const processing = this.#process(job, token ?? '', name, endpoint, handler, ordered, inbox);
              const done: Promise<void> = processing.then(forget, forget).then(() => {
                running.delete(done);
              });
              running.add(done);
              return processing;
            },
            {
              connection,
              prefix: this.#prefix,
              concurrency,
              lockDuration: this.#lockDurationMs,
              stalledInterval: this.#stalledIntervalMs,
              maxStalledCount: KEEP_ATTEMPTS,
              settings: { backoffStrategy: () => 1_000 },
              runRetryDelay: 1_000,
            },
          );
          let lastWarned = 0;
          worker.on('error', (error: Error) => {
            // Connection errors repeat while Redis is away: warn at most every 10 s per worker.
            const now = Date.now();
            if (now - lastWarned < 10_000) return;
            lastWarned = now;
            this.#logger.warn('BullMQ worker error', { queue: name, error: error.message });
          });
          worker.on('lockRenewalFailed', (jobIds: string[]) => {
            const lost = new Set(jobIds);
            for (const [id, pending] of this.#pending) {
              // A message id is the job id in every subscription queue: match the queue too.
              if (pending.queue !== name || !lost.has(pending.jobId)) continue;
              this.#pending.delete(id);
              pending.settle({ kind: 'lost' });
            }
          });
          workers.push(worker);
        }
      }
      for (;;) {
        const next = await inbox.next(signal);
        if (next === undefined) break;
        yield next.delivery;
      }
    } finally {
      this.#receivers.delete(handle);
      await close();
    }
  }

  async #process(
    job: Job<JobData>,
    token: string,
    queueName: string,
    endpoint: string,
    handler: string | undefined,
    ordered: boolean,
    inbox: AsyncInbox<{ delivery: Delivery; pending: Pending }>,
  ): Promise<void> {
    const jobId = job.id ?? '';
    let data = job.data as unknown;
    for (let round = 0; ; round++) {
      const parsed = readJobData(data, jobId, queueName);
      if (round === 0 && parsed.dropped.length > 0) {
        this.#logger.warn('Malformed delivery facts in a job were dropped', {
          queue: queueName,
          jobId,
          fields: parsed.dropped,
        });
      }
      const attempt = (parsed.attemptsMade ?? 0) + (job.stalledCounter > 0 ? job.stalledCounter : 0) + 1;
      // The delivery id starts with the job's lock token (BullMQ's `<worker id>:<n>`). BullMQ hands the
      // same token on to the next job a worker slot fetches, even the same job again after a release, so
      // the job id and its start count follow: a settle from an earlier delivery never matches. An ordered
      // retry keeps the lock and runs again in place: each round after the first gets its own suffix.
      const held = `${token}|${jobId}|${job.attemptsStarted}`;
      const deliveryId = round === 0 ? held : `${held}#${round}`;
      let settle!: (outcome: Outcome) => void;
      const outcome = new Promise<Outcome>((resolve) => (settle = resolve));
      const pending: Pending = { queue: queueName, jobId, settle };
      if (inbox.closed) {
        await job.moveToWait(token);
        throw new WaitingError();
      }
      this.#pending.set(deliveryId, pending);
      inbox.push({
        pending,
        delivery: {
          id: deliveryId,
          body: parsed.body,
          facts: {
            messageId: parsed.messageId,
            kind: parsed.kind,
            type: parsed.kind === undefined ? undefined : job.name,
            endpoint,
            handler,
            attempt,
            history: parsed.history,
            partitionKey: parsed.partitionKey,
            queue: baseQueueName(queueName),
            ...(parsed.pendingDeadLetter !== undefined
              ? { pendingDeadLetter: parsed.pendingDeadLetter }
              : {}),
          },
        },
      });
      const result = await outcome;
      switch (result.kind) {
        case 'ack':
          return;
        case 'dead':
          throw new BullUnrecoverableError(`dead-lettered: ${result.reason}`);
        case 'lost':
          // Another worker owns the job now; nothing this one does can settle it.
          throw new HarrierError('lock-lost', `Lost the lock of job ${jobId}`);
        case 'release':
          await job.moveToWait(token);
          throw new WaitingError();
        case 'retry': {
          const failed = (parsed.attemptsMade ?? 0) + 1;
          const history =
            result.record === undefined
              ? parsed.history
              : [...parsed.history, { ...result.record, attempt: attempt }].slice(-MAX_ATTEMPT_HISTORY);
          // Rebuilt from the parsed facts, so a malformed field read from Redis is not written back.
          const next: JobData = {
            b: parsed.body,
            ...(parsed.messageId !== undefined && parsed.messageId !== jobId ? { i: parsed.messageId } : {}),
            ...(parsed.partitionKey !== undefined ? { p: parsed.partitionKey } : {}),
            ...(parsed.ordered ? { o: true } : {}),
            a: failed,
            h: history,
            ...(result.pendingDeadLetter !== undefined ? { d: result.pendingDeadLetter } : {}),
          };
          await job.updateData(next);
          data = next;
          if (!ordered) {
            await job.moveToDelayed(Math.max(result.retryAt, Date.now()), token);
            throw new DelayedError();
          }
          // Ordered: keep the job (and its partition) until the retry, so no later message overtakes it.
          await sleep(this.#clock, result.retryAt - this.#clock.now(), inbox.closedSignal);
          continue;
        }
      }
    }
  }

  #settle(deliveryId: string, outcome: Outcome): Promise<void> {
    const pending = this.#pending.get(deliveryId);
    if (pending === undefined) return Promise.reject(new StaleDeliveryError(deliveryId));
    this.#pending.delete(deliveryId);
    pending.settle(outcome);
    return Promise.resolve();
  }

  /** Adds the command types of every registered endpoint (values of the `endpoints` hash) to the cache. */
  #learnCommandRoutes(endpoints: readonly string[]): void {
    for (const json of endpoints) {
      let subscriptions: unknown;
      try {
        ({ subscriptions } = JSON.parse(json) as { subscriptions?: unknown });
      } catch {
        continue;
      }
      if (!Array.isArray(subscriptions)) continue;
      for (const sub of subscriptions as Partial<SubscriptionSpec>[]) {
        if (sub.kind !== 'command' || !Array.isArray(sub.types)) continue;
        for (const type of sub.types) if (typeof type === 'string') this.#commandRoutes.add(type);
      }
    }
  }

  #queuesFor(
    endpoint: string,
    spec: SubscriptionSpec,
    prefetch = 16,
  ): { name: string; concurrency: number; handler: string | undefined; ordered: boolean }[] {
    const result: { name: string; concurrency: number; handler: string | undefined; ordered: boolean }[] = [];
    const ordered = new Set(spec.orderedTypes ?? []);
    if (spec.kind === 'command') {
      for (const type of spec.types) {
        const base = this.#commandQueue(type);
        result.push({ name: base, concurrency: prefetch, handler: undefined, ordered: false });
        if (ordered.has(type))
          for (let p = 0; p < this.#partitions; p++)
            result.push({
              name: `${base}${SEPARATOR}p${p}`,
              concurrency: 1,
              handler: undefined,
              ordered: true,
            });
      }
      return result;
    }
    const base = this.#subscriptionQueue(endpoint, spec.handler);
    result.push({ name: base, concurrency: prefetch, handler: spec.handler, ordered: false });
    if (ordered.size > 0)
      for (let p = 0; p < this.#partitions; p++)
        result.push({
          name: `${base}${SEPARATOR}p${p}`,
          concurrency: 1,
          handler: spec.handler,
          ordered: true,
        });
    return result;
  }

  #placement(base: string, message: OutgoingMessage): string {
    return message.ordered === true
      ? `${base}${SEPARATOR}p${partitionOf(message.partitionKey ?? '', this.#partitions)}`
      : base;
  }

  #jobOptions(message: OutgoingMessage, now: number): Record<string, unknown> {
    const delay = message.deliverAt === undefined ? 0 : Math.max(0, message.deliverAt - now);
    return {
      jobId: message.id,
      deduplication: { id: message.id, ttl: this.#dedupeWindowMs },
      ...(delay > 0 ? { delay } : {}),
      // Our dispatcher decides retries; BullMQ's own retry only catches a processor that crashed mid-settle.
      attempts: KEEP_ATTEMPTS,
      backoff: { type: 'harrier' },
      removeOnComplete: true,
      // BullMQ keeps a failed job while both hold: younger than `age` seconds and among the newest `count`.
      removeOnFail: {
        age: Math.ceil(this.#failedRetentionMs / 1000),
        count: this.#failedRetentionCount,
      },
    };
  }

  async #addAll(
    queueName: string,
    jobs: { name: string; data: JobData; opts: Record<string, unknown> }[],
  ): Promise<void> {
    const queue = this.#queue(queueName);
    await addJobsChecked(
      queueName,
      jobs,
      (batch) => this.#withTimeout(queue.addBulk([...batch]), `add ${batch.length} job(s) to ${queueName}`),
      (failed) => {
        this.#logger.warn('addBulk partly failed; retrying the failed jobs', { queue: queueName, failed });
      },
    );
  }

  #queue(name: string): Queue {
    let queue = this.#queues.get(name);
    if (queue === undefined) {
      queue = new Queue(name, { connection: this.#client, prefix: this.#prefix });
      queue.on('error', (error: Error) => {
        this.#logger.debug('BullMQ queue error', { queue: name, error: error.message });
      });
      this.#queues.set(name, queue);
    }
    return queue;
  }

  #commandQueue(type: string): string {
    return `cmd${SEPARATOR}${type}`;
  }

  #subscriptionQueue(endpoint: string, handler: string): string {
    return `evt${SEPARATOR}${endpoint}${SEPARATOR}${handler}`;
  }

  #key(...parts: string[]): string {
    return [this.#prefix, 'harrier', ...parts].join(':');
  }

  /**
   * A new ioredis client. Its name in `CLIENT LIST` is `<prefix>:harrier:<role>`, unless the
   * connection options set `connectionName`.
   */
  #newClient(extra: ClientSettings, role: string): Redis | Cluster {
    const connection = this.#connection;
    const connectionName = `${this.#prefix}:harrier:${role}`;
    if (typeof connection === 'string') return new Redis(connection, { connectionName, ...extra });
    if (isClusterConnection(connection)) {
      const { enableOfflineQueue, lazyConnect, maxRetriesPerRequest } = extra;
      const options = connection.options ?? {};
      return new Cluster([...connection.cluster], {
        ...options,
        ...(enableOfflineQueue !== undefined ? { enableOfflineQueue } : {}),
        ...(lazyConnect !== undefined ? { lazyConnect } : {}),
        redisOptions: { connectionName, ...options.redisOptions, maxRetriesPerRequest } as RedisOptions,
      });
    }
    const options: RedisOptions = { connectionName, ...connection, ...extra };
    return new Redis(options);
  }

  #describe(): string {
    const connection = this.#connection;
    if (typeof connection === 'string') return describeRedisUrl(connection);
    if (isClusterConnection(connection)) {
      return describeCluster(
        connection.cluster.map((node) =>
          typeof node === 'string'
            ? node.includes('://')
              ? describeRedisUrl(node)
              : node
            : typeof node === 'number'
              ? `127.0.0.1:${node}`
              : `${node.host ?? '127.0.0.1'}:${node.port ?? 6379}`,
        ),
      );
    }
    return `${connection.host ?? '127.0.0.1'}:${connection.port ?? 6379}`;
  }

  #connected(): Promise<Redis | Cluster> {
    this.#ready ??= (async () => {
      if (this.#client.status === 'wait') {
        await this.#withTimeout(this.#client.connect(), 'connect');
      }
    })().catch((error: unknown) => {
      this.#ready = undefined;
      throw error;
    });
    return this.#ready.then(() => this.#client);
  }

  #checkPartitions(): Promise<void> {
    this.#partitionsChecked ??= (async () => {
      const client = await this.#connected();
      const key = this.#key('partitions');
      await this.#withTimeout(client.set(key, String(this.#partitions), 'NX'), 'store partition count');
      const stored = Number(await this.#withTimeout(client.get(key), 'read partition count'));
      if (stored !== this.#partitions) {
        throw new HarrierError(
          'partition-mismatch',
          `This broker uses ${this.#partitions} partitions but prefix "${this.#prefix}" was set up with ${stored}: every process must use partitions: ${stored} (changing it needs an empty set of ordered queues)`,
        );
      }
    })().catch((error: unknown) => {
      this.#partitionsChecked = undefined;
      throw error;
    });
    return this.#partitionsChecked;
  }

  async #withTimeout<T>(promise: Promise<T>, what: string): Promise<T> {
    try {
      return await withDeadline(promise, this.#publishTimeoutMs, () =>
        redisUnavailable(
          this.#describe(),
          new Error(`${what} timed out after ${this.#publishTimeoutMs} ms`),
          isClusterConnection(this.#connection),
        ),
      );
    } catch (error) {
      if (HarrierError.is(error)) throw error;
      throw redisUnavailable(this.#describe(), error, isClusterConnection(this.#connection));
    }
  }

  #assertOpen(): void {
    if (this.#closed)
      throw new HarrierError(
        'broker-closed',
        'The BullMQ broker is closed: create a new one to publish again',
      );
  }
}

/**
 * A Worker that survives job data that is not JSON (written into Redis by something other than
 * BullMQ): the raw text reaches the processor as a string and is dead-lettered as malformed, instead
 * of failing inside BullMQ before the processor and stalling forever.
 */
class LenientWorker<T> extends Worker<T> {
  protected override createJob(data: JobJson, jobId: string): Job<T> {
    try {
      return super.createJob(data, jobId);
    } catch {
      return super.createJob({ ...data, data: JSON.stringify(data.data) }, jobId);
    }
  }
}

/** Ignores a settled promise's value or reason. */
function forget(): void {
  // Nothing to do: the caller only needs to know that the promise settled.
}

function assertName(name: string, what: string): void {
  if (name.length === 0 || name.includes(SEPARATOR) || name.includes(':')) {
    throw new HarrierError(
      'invalid-option',
      `The ${what} "${name}" cannot be used on Redis: it must be non-empty and contain neither '${SEPARATOR}' nor ':'`,
    );
  }
}

/** @throws HarrierError `invalid-option` unless `value` is a whole number of at least `min`. */
function assertWhole(value: number, option: string, min: number, example: string): void {
  if (!Number.isSafeInteger(value) || value < min) {
    throw new HarrierError(
      'invalid-option',
      `BullMqBroker option ${option} is ${String(value)}: it must be a whole number of at least ${min}, ${example}`,
    );
  }
}

function jobData(message: OutgoingMessage): JobData {
  return {
    b: message.body,
    ...(message.partitionKey !== undefined ? { p: message.partitionKey } : {}),
    ...(message.ordered === true ? { o: true } : {}),
  };
}

/** A queue's name without the partition suffix of an ordered queue: the subscription's own queue. */
function baseQueueName(queueName: string): string {
  return queueName.replace(PARTITION_SUFFIX, '');
}

const PARTITION_SUFFIX = new RegExp(`${SEPARATOR}p\\d+$`);

/** The kind of message a queue carries, from its name. */
function kindOfQueue(queueName: string): MessageKind {
  return queueName.startsWith(`cmd${SEPARATOR}`) ? 'command' : 'event';
}

/** Job data as the broker reads it: every field checked, since anything could have written it. */
interface ParsedJobData {
  body: string;
  messageId: string | undefined;
  kind: MessageKind | undefined;
  partitionKey: string | undefined;
  ordered: boolean;
  attemptsMade: number | undefined;
  history: readonly AttemptRecord[];
  pendingDeadLetter: PendingDeadLetter | undefined;
  /** Fields that were present but unusable and were dropped, for a log line. */
  dropped: string[];
}

/**
 * Reads job data leniently and never throws: anything pushed into a queue by something else still
 * becomes a delivery, and a malformed fact beside the envelope is dropped (and named in `dropped`).
 */
function readJobData(data: unknown, jobId: string, queueName: string): ParsedJobData {
  if (typeof data === 'object' && data !== null && typeof (data as JobData).b === 'string') {
    const d = data as Partial<Record<keyof JobData, unknown>> & { b: string };
    const dropped: string[] = [];
    const optional = <T>(field: keyof JobData, ok: (value: unknown) => value is T): T | undefined => {
      const value = d[field];
      if (value === undefined) return undefined;
      if (ok(value)) return value;
      dropped.push(field);
      return undefined;
    };
    const history = d.h === undefined ? undefined : parseAttemptHistory(d.h);
    if (history !== undefined && history.dropped > 0) dropped.push(`h (${history.dropped} entries)`);
    const pendingDeadLetter = d.d === undefined ? undefined : parsePendingDeadLetter(d.d);
    if (d.d !== undefined && pendingDeadLetter === undefined) dropped.push('d');
    const kind = optional('k', isKind);
    return {
      body: d.b,
      messageId: optional('i', isString) ?? jobId,
      kind: kind ?? kindOfQueue(queueName),
      partitionKey: optional('p', isString),
      ordered: optional('o', isBoolean) ?? false,
      attemptsMade: optional('a', isAttemptCount),
      history: history?.history ?? [],
      pendingDeadLetter,
      dropped,
    };
  }
  const body = typeof data === 'string' ? data : ((JSON.stringify(data) as string | undefined) ?? '');
  return {
    body,
    // The job id still tells this job from another with the same bytes, so their dead letters stay apart.
    messageId: jobId === '' ? undefined : jobId,
    kind: undefined,
    partitionKey: undefined,
    ordered: false,
    attemptsMade: undefined,
    history: [],
    pendingDeadLetter: undefined,
    dropped: [],
  };
}

const isString = (value: unknown): value is string => typeof value === 'string';
const isBoolean = (value: unknown): value is boolean => typeof value === 'boolean';
const isKind = (value: unknown): value is MessageKind =>
  value === 'command' || value === 'event' || value === 'query';
const isAttemptCount = (value: unknown): value is number =>
  typeof value === 'number' && Number.isInteger(value) && value >= 0;
