import { setTimeout as delay } from 'node:timers/promises';
import type { Job, Queue } from 'bullmq';
import type { Cluster, Redis } from 'ioredis';
import type {
  BrokerCapabilities,
  Delivery,
  MessageBroker,
  NackOptions,
  OutgoingMessage,
  QueueDepth,
  ReceiverOptions,
  RedeliveryTarget,
  SubscriptionSpec,
} from '../broker/message-broker.js';
import { noRouteError } from '../broker/no-route-error.js';
import { sumQueueDepths } from '../broker/sum-queue-depths.js';
import { assertWholeOption } from '../broker/whole-option.js';
import { systemClock, type Clock } from '../clock/clock.js';
import { withDeadline } from '../clock/deadline.js';
import { HarrierError } from '../errors/harrier-error.js';
import { consoleLogger, type Logger } from '../logging/logger.js';
import { partitionOf } from '../messages/partition.js';
import { addJobsChecked } from './add-jobs.js';
import { createBrokerClient, type ClientSettings } from './broker-connection.js';
import { BullMqReceiver } from './bullmq-receiver.js';
import { CommandRouteCache, parseCommandRoutes, type CommandRoute } from '../broker/command-route-cache.js';
import { EventRouteCache, parseRoutes, routesVersion, type Route } from '../broker/event-route-cache.js';
import {
  jobOptionDefaults,
  jobOptions,
  readJobData,
  toJobData,
  type JobData,
  type JobOptionDefaults,
} from './job-data.js';
import { ACK, PendingDeliveries, RELEASE, type Outcome } from '../broker/pending-deliveries.js';
import { DEPTH_STATES, queueDepthOf } from './queue-depth.js';
import { assertQueueNamePart, orderedCommandTypes, QueueLayout, type QueueSpec } from './queue-layout.js';
import { registerEndpoint } from './register-endpoint.js';
import { CANCEL_DELAYED_SCRIPT } from './cancel-delayed-script.js';
import { evalScript } from './redis-support.js';
import { describeConnection, isClusterConnection, type RedisConnectionOptions } from './redis-connection.js';
import { redisUnavailable } from './redis-errors.js';
import { bullmq } from './redis-peers.js';

/** See {@link BullMqBrokerOptions.lockDurationMs}. */
const DEFAULT_LOCK_DURATION_MS = 5_000;
/** See {@link BullMqBrokerOptions.stalledIntervalMs}. */
const DEFAULT_STALLED_INTERVAL_MS = 2_500;

/**
 * How long a publisher trusts the command routes it knows without reading the routes version again,
 * in ms: the longest a command type another process's registration removed is still accepted.
 */
const COMMAND_ROUTE_MAX_AGE_MS = 1_000;

/** How long `redeliver` waits for an active job of the message to settle before refusing. */
const REDELIVER_ACTIVE_WAIT_MS = 2_000;
const REDELIVER_ACTIVE_POLL_MS = 25;

/** Options of {@link BullMqBroker}. */
export interface BullMqBrokerOptions {
  /**
   * Where Redis is (see {@link RedisConnectionOptions}): a `redis://` URL, an ioredis client (the
   * broker opens `duplicate()`s of it and leaves it open), `{ cluster: [...nodes], options? }` for
   * Redis Cluster, or ioredis options. Every key carries the prefix's hash tag, so each multi-key
   * script stays in one slot.
   * @defaultValue none; required
   */
  readonly connection: RedisConnectionOptions;
  /**
   * Prefix of every key. The braces make it a Redis Cluster hash tag, so all of Harrier's keys land
   * in one slot and its multi-key scripts work on a cluster.
   * @defaultValue '\{harrier\}'
   */
  readonly prefix?: string;
  /**
   * Partition queues of each endpoint's ordered command types (one set per endpoint, shared by its
   * types) and of each event subscription with ordered types; messages of one key always go to the
   * same one. Each is worked one message at a time across all processes, so this is how many keys
   * of an endpoint's ordered commands (or of a subscription's ordered events) are handled at once.
   * Every process sharing the prefix must use the same number (checked at start-up).
   * @defaultValue 8
   */
  readonly partitions?: number;
  /**
   * How long a published id is remembered per subscription to drop a second publish of it, in ms.
   *
   * @remarks
   * Each message published at the default costs one Redis key with this time-to-live per
   * subscription (see docs/redis.md#memory) and some consume speed. Messages of definitions with
   * `dedupe: 'while-queued'` get no such key: a second publish of one of them is dropped only while
   * its job exists, and delivered again once the first copy was handled.
   *
   * @defaultValue 86400000 (24 hours)
   */
  readonly dedupeWindowMs?: number;
  /**
   * How long a worker's hold on a message (its BullMQ job lock) lasts unless renewed, in ms: after a
   * worker dies, its messages wait this long at most before a stalled check may give them to another.
   *
   * @remarks
   * A live worker renews the lock every {@link BullMqBrokerOptions.lockRenewMs}, however long its
   * handler runs, so this is not a handler time-out. What it bounds is how long a worker may go without
   * renewing: a process killed, a Redis outage or network cut, or an event loop blocked for longer (a
   * synchronous, CPU-bound handler) loses its locks; another worker then takes the messages, and each
   * such delivery taken and never settled counts as an attempt and an unsettled end (a message that
   * keeps crashing its workers is dead-lettered as `worker-crashed` after the bus's `crashLimit` of
   * them, 3 by default, whatever BullMQ's own stalled limit). Raise it if handlers block the event loop for seconds or if Redis outages of a few
   * seconds must not spend attempts; lower it (with `stalledIntervalMs`) to hand a dead worker's
   * messages on sooner. A dead worker's message is back in about `lockDurationMs + 2 *
   * stalledIntervalMs` at worst (10 s with the defaults). At least 1000.
   *
   * @defaultValue 5000
   */
  readonly lockDurationMs?: number;
  /**
   * How often a worker renews the locks of the messages it holds, in ms; less than `lockDurationMs`.
   *
   * @remarks
   * BullMQ's lock timer ticks every half of this and renews each held lock at most once a tick; each
   * renewal is one Redis script per queue worker with held messages, whatever their number. The gap
   * between this and `lockDurationMs` is how late a renewal may run (a slow event-loop turn, a slow
   * Redis) before the lock is lost. At least 100.
   *
   * @defaultValue half of `lockDurationMs` (2500)
   */
  readonly lockRenewMs?: number;
  /**
   * How often workers look for messages whose worker died (locks gone), in ms.
   *
   * @remarks
   * Each queue's workers run one Redis script per interval (one of them does the check; the others'
   * find it done), so an idle endpoint of Q queues costs about Q / interval scripts per second per
   * process. A lock that lapsed is noticed by the second check after it lapsed at the latest. At least
   * 100.
   *
   * @defaultValue 2500
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
 * The production broker: BullMQ queues on Redis.
 *
 * @remarks
 * Each command type has a queue, each event subscription (endpoint, handler) has a queue, and
 * ordered messages go to one of `partitions` partition queues chosen by FNV-1a-64 of the key, each
 * worked one message at a time: those of the subscription for events, and for commands those of
 * the endpoint that handles the type, shared by all its ordered command types, so one key keeps its
 * order across them (see {@link QueueLayout}). Subscriptions are registered in Redis, so a
 * publisher reads who subscribes (and which endpoint handles a command type) and adds one job per
 * subscription, with the message id as job id and, unless its definition's `dedupe` is
 * `'while-queued'`, as deduplication id for `dedupeWindowMs`.
 * A worker's processor hands each job to the receiver and waits for the dispatcher's ack or nack,
 * so BullMQ's lock renewal and stalled-job recovery cover every delivery.
 */
export class BullMqBroker implements MessageBroker {
  readonly #prefix: string;
  readonly #partitions: number;
  readonly #dedupeWindowMs: number;
  readonly #lockDurationMs: number;
  readonly #lockRenewMs: number;
  readonly #stalledIntervalMs: number;
  readonly #publishTimeoutMs: number;
  readonly #failedRetentionMs: number;
  readonly #failedRetentionCount: number;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #connection: RedisConnectionOptions;
  readonly #layout: QueueLayout;
  /** The BullMQ options every job shares, built once: a publish only adds the per-message ones. */
  readonly #jobDefaults: JobOptionDefaults;
  readonly #client: Redis | Cluster;
  readonly #queues = new Map<string, Queue>();
  readonly #pending = new PendingDeliveries();
  readonly #registered = new Map<string, SubscriptionSpec[]>();
  /** Event routes read by earlier publishes, valid while the routes version stays. */
  readonly #eventRoutes = new EventRouteCache();
  /** Command types known to have a route, at the routes version last read. */
  readonly #commandRoutes = new CommandRouteCache(COMMAND_ROUTE_MAX_AGE_MS);
  /**
   * Per endpoint, queues it no longer fills that held jobs when it registered, which its receivers
   * work too: the partition queues of its ordered command types in the layout of earlier builds
   * (`cmd~<type>~p<n>`), and its own ordered-command partition queues once it orders no command type.
   */
  readonly #leftoverQueues = new Map<string, QueueSpec[]>();
  readonly #receivers = new Set<BullMqReceiver>();
  #ready: Promise<void> | undefined;
  #partitionsChecked: Promise<void> | undefined;
  #closed = false;

  constructor(options: BullMqBrokerOptions) {
    this.#connection = options.connection;
    this.#prefix = options.prefix ?? '{harrier}';
    this.#partitions = options.partitions ?? 8;
    this.#dedupeWindowMs = options.dedupeWindowMs ?? 86_400_000;
    this.#lockDurationMs = options.lockDurationMs ?? DEFAULT_LOCK_DURATION_MS;
    this.#lockRenewMs = options.lockRenewMs ?? Math.floor(this.#lockDurationMs / 2);
    this.#stalledIntervalMs = options.stalledIntervalMs ?? DEFAULT_STALLED_INTERVAL_MS;
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
    assertLockTimings(this.#lockDurationMs, this.#lockRenewMs, this.#stalledIntervalMs);
    this.#layout = new QueueLayout(this.#prefix, this.#partitions);
    this.#jobDefaults = jobOptionDefaults({
      dedupeWindowMs: this.#dedupeWindowMs,
      failedRetentionMs: this.#failedRetentionMs,
      failedRetentionCount: this.#failedRetentionCount,
    });
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
    for (const sub of subscriptions) assertQueueNamePart(sub.handler, 'handler name');
    assertQueueNamePart(endpoint, 'endpoint');
    await this.#checkPartitions();
    const client = await this.#connected();
    // Publishers cache the routes they read until the routes version moves: a counter (what older
    // builds read) and a stamp no registration repeats, so a version never comes back after Redis
    // lost its data and registrations count from 1 again.
    const version = await this.#withTimeout(
      registerEndpoint(client, this.#layout, endpoint, subscriptions, this.#clock.now()),
      'register subscriptions',
    );
    // This endpoint's command types are routed at the version it wrote; the others are read when sent.
    this.#commandRoutes.confirm(version, this.#clock.now());
    const own = new Map<string, CommandRoute>();
    for (const sub of subscriptions) {
      if (sub.kind !== 'command') continue;
      for (const type of sub.types)
        own.set(type, { endpoint, ordered: (sub.orderedTypes ?? []).includes(type) });
    }
    this.#commandRoutes.learn(own);
    const leftovers = await this.#leftoversHoldingJobs(endpoint, subscriptions);
    // A partition queue is worked one job at a time across every process, not just per worker.
    const partitionQueues = [...this.#layout.queuesOf(endpoint, subscriptions), ...leftovers].filter(
      (q) => q.ordered,
    );
    await Promise.all(
      partitionQueues.map((q) =>
        this.#withTimeout(this.#queue(q.name).setGlobalConcurrency(1), 'limit partition concurrency'),
      ),
    );
    // Replaces what the endpoint registered before: its next receiver works these queues only.
    this.#leftoverQueues.set(endpoint, leftovers);
    this.#registered.set(endpoint, [...subscriptions]);
  }

  receiver(options: ReceiverOptions): AsyncIterable<Delivery> {
    const specs = this.#registered.get(options.endpoint);
    if (specs === undefined) {
      throw new HarrierError(
        'not-registered',
        `Endpoint "${options.endpoint}" has not registered its subscriptions: call register() first (bus.start() does)`,
      );
    }
    const queues = [
      ...this.#layout.queuesOf(options.endpoint, specs, options.prefetch ?? 16),
      ...(this.#leftoverQueues.get(options.endpoint) ?? []),
    ];
    return { [Symbol.asyncIterator]: () => this.#receive(options, queues) };
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
    const startedAt = this.#clock.now();
    const commandRoutes = this.#commandRoutes;
    // Command types that need a route (refused without one) or their endpoint (an ordered command
    // goes to the partition queues of the endpoint that handles its type), and those among them this
    // process has not seen yet: asked in the same round trip as the events.
    const routed = new Set<string>();
    let looked = false;
    const unrouted = new Set<string>();
    for (const m of messages) {
      if (m.kind === 'event') continue;
      const needsRoute = m.requireRoute !== false;
      if (!needsRoute && m.ordered !== true) continue;
      if (needsRoute) routed.add(m.type);
      looked = true;
      if (!commandRoutes.knows(m.type)) unrouted.add(m.type);
    }
    const routes = new Map<string, readonly Route[]>();
    if (eventTypes.length > 0 || unrouted.size > 0 || (looked && !commandRoutes.isFresh(startedAt))) {
      const pipeline = client.pipeline();
      // The version first: routes read after it in this pipeline are at least as new as it says.
      pipeline.get(this.#layout.key('routes-stamp'));
      pipeline.get(this.#layout.key('routes-version'));
      const uncached = this.#eventRoutes.uncached(eventTypes);
      for (const type of uncached) pipeline.hgetall(this.#layout.key('routes', type));
      // The endpoints hash is where register() records command types: read only on a cache miss.
      if (unrouted.size > 0) pipeline.hgetall(this.#layout.key('endpoints'));
      const results = await this.#withTimeout(pipeline.exec(), 'read subscriptions');
      const version = routesVersion(
        this.#reply(results, 0) as string | null,
        this.#reply(results, 1) as string | null,
      );
      for (const [type, list] of this.#eventRoutes.validAt(version, eventTypes)) routes.set(type, list);
      uncached.forEach((type, index) => {
        routes.set(type, parseRoutes(this.#reply(results, 2 + index) as Record<string, string>));
      });
      const moved = commandRoutes.confirm(version, startedAt);
      if (unrouted.size > 0) {
        const endpoints = this.#reply(results, 2 + uncached.length) as Record<string, string>;
        commandRoutes.learn(parseCommandRoutes(endpoints));
      } else if (moved && looked) {
        // A registration moved the version: the types known before are forgotten, read them again.
        const endpoints = client.hgetall(this.#layout.key('endpoints'));
        commandRoutes.learn(parseCommandRoutes(await this.#withTimeout(endpoints, 'read command routes')));
      }
      // Every command is checked before any job is added: a refused batch publishes nothing. A miss
      // is never cached: the handler's endpoint may register any time.
      for (const type of routed) if (!commandRoutes.knows(type)) throw noRouteError(type);
      // Cached at an older version: read again (after `version`, so filed under it).
      const stale = eventTypes.filter((type) => !routes.has(type));
      if (stale.length > 0) {
        const reread = client.pipeline();
        for (const type of stale) reread.hgetall(this.#layout.key('routes', type));
        const again = await this.#withTimeout(reread.exec(), 'read subscriptions');
        stale.forEach((type, index) => {
          routes.set(type, parseRoutes(this.#reply(again, index) as Record<string, string>));
        });
      }
      this.#eventRoutes.store(version, routes);
    }
    const byQueue = new Map<string, NewJob[]>();
    const add = (queue: string, job: NewJob): void => {
      const list = byQueue.get(queue);
      if (list === undefined) byQueue.set(queue, [job]);
      else list.push(job);
    };
    const now = this.#clock.now();
    /** The delayed messages of the batch, each with the queues its jobs go to (for `cancel`). */
    let delayed: Map<OutgoingMessage, string[]> | undefined;
    for (const message of messages) {
      // One data and options object per message, shared by its copies: BullMQ only reads them.
      const job: NewJob = {
        name: message.type,
        data: toJobData(message),
        opts: jobOptions(message, now, this.#jobDefaults),
      };
      const scheduled = job.opts.delay === undefined ? undefined : ([] as string[]);
      if (message.kind === 'event') {
        for (const r of routes.get(message.type) ?? []) {
          const queue = this.#layout.eventPlacement(r.endpoint, r.handler, message);
          add(queue, job);
          scheduled?.push(queue);
        }
      } else {
        // Ordered only where the endpoint registered the type as ordered: no worker takes an
        // endpoint's partition queues for a type it does not order (nor before any endpoint registered it).
        const route = message.ordered === true ? commandRoutes.routeOf(message.type) : undefined;
        const queue = this.#layout.commandPlacement(
          message,
          route?.ordered === true ? route.endpoint : undefined,
        );
        add(queue, job);
        scheduled?.push(queue);
      }
      if (scheduled !== undefined && scheduled.length > 0) (delayed ??= new Map()).set(message, scheduled);
    }
    // Recorded before the jobs are added, so a cancel finds every job that exists.
    if (delayed !== undefined) await this.#recordScheduled(client, delayed, now);
    await Promise.all([...byQueue].map(([queue, jobs]) => this.#addAll(queue, jobs)));
  }

  ack(deliveryId: string): Promise<void> {
    return this.#settle(deliveryId, ACK);
  }

  nack(deliveryId: string, options: NackOptions): Promise<void> {
    if ('release' in options) {
      return this.#settle(
        deliveryId,
        options.retryAt === undefined ? RELEASE : { kind: 'release', retryAt: options.retryAt },
      );
    }
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

  /**
   * Puts a message back into one subscription, as {@link MessageBroker.redeliver} says.
   *
   * @remarks
   * A job of the message still waiting or delayed is left as it is. An active one is waited for
   * (2 s, polling its state); an ordered message waiting for its retry keeps its job active (so no
   * later message of its key overtakes it), so replaying it then is refused as `message-in-flight`
   * once the wait is over.
   */
  async redeliver(target: RedeliveryTarget): Promise<void> {
    this.#assertOpen();
    await this.#connected();
    const { message } = target;
    const queue = this.#queue(
      message.kind === 'event'
        ? this.#layout.eventPlacement(target.endpoint, target.handler, message)
        : this.#layout.commandPlacement(
            message,
            message.ordered === true && (await this.#ordersCommand(target.endpoint, message.type))
              ? target.endpoint
              : undefined,
          ),
    );
    const existing = await this.#withTimeout(bullmq.Job.fromId<JobData>(queue, message.id), 'find job');
    if (existing !== undefined) {
      let state = await this.#withTimeout(existing.getState(), 'read job state');
      // An active job of a dead letter is one the dispatcher has recorded and not yet failed: it
      // fails within a settle, so wait for that; putting nothing back and returning would mark the
      // record replayed with nothing sent.
      const waitUntil = Date.now() + REDELIVER_ACTIVE_WAIT_MS;
      while (state === 'active' && Date.now() < waitUntil) {
        await delay(REDELIVER_ACTIVE_POLL_MS);
        state = await this.#withTimeout(existing.getState(), 'read job state');
      }
      if (state === 'active') {
        throw new HarrierError(
          'message-in-flight',
          `message ${message.id} is still being handled in queue ${queue.name} (its job stayed active for ${REDELIVER_ACTIVE_WAIT_MS} ms): replay it again once it has settled`,
        );
      }
      if (state === 'failed') {
        await this.#withTimeout(
          existing.updateData({ ...toJobData(message, target.deadLetterId) }),
          'reset job data',
        );
        // Fresh attempts: its stalls (deliveries that ended unsettled) count from 0 again, or a
        // message dead-lettered as worker-crashed would die again at its first delivery.
        await this.#withTimeout(this.#client.hdel(queue.toKey(message.id), 'stc'), 'reset stalled count');
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
        data: toJobData(message, target.deadLetterId),
        opts: jobOptions({ ...message, deliverAt: undefined }, this.#clock.now(), this.#jobDefaults),
      },
    ]);
  }

  /**
   * Removes every job of message `messageId` still in its queue's delayed set and never delivered;
   * resolves to how many it removed, as {@link MessageBroker.cancel} says.
   *
   * @remarks
   * A publish of a delayed message records the queues it went to under
   * `<prefix>:harrier:scheduled:<id>` (until its time, plus a minute), so a cancel reads one set
   * instead of every queue; a cancel later than that finds nothing. A job promoted to waiting (its
   * time came), active, or delayed for a retry is left as it is. The job's deduplication key goes
   * with it: the id can be published again.
   */
  async cancel(messageId: string): Promise<number> {
    this.#assertOpen();
    const client = await this.#connected();
    const indexKey = this.#layout.key('scheduled', messageId);
    const queues = await this.#withTimeout(client.smembers(indexKey), 'read scheduled message queues');
    let cancelled = 0;
    for (const name of queues) {
      const queue = this.#queue(name);
      const jobKey = queue.toKey(messageId);
      const raw = await this.#withTimeout(client.hget(jobKey, 'data'), 'read job');
      if (raw === null || (readJobData(parseJson(raw), messageId, 'command').attemptsMade ?? 0) > 0) continue;
      const taken = await this.#withTimeout(
        evalScript(client, CANCEL_DELAYED_SCRIPT, [queue.toKey('delayed'), jobKey], [messageId, raw]),
        'take delayed job',
      );
      if (taken !== 1) continue;
      await this.#withTimeout(queue.remove(messageId), 'remove cancelled job');
      await this.#withTimeout(queue.removeDeduplicationKey(messageId), 'clear dedupe key');
      await this.#withTimeout(client.srem(indexKey, name), 'forget cancelled queue');
      cancelled++;
    }
    return cancelled;
  }

  /** Records the queues of each delayed message (see {@link BullMqBroker.cancel}). */
  async #recordScheduled(
    client: Redis | Cluster,
    delayed: ReadonlyMap<OutgoingMessage, readonly string[]>,
    now: number,
  ): Promise<void> {
    const pipeline = client.pipeline();
    for (const [message, queues] of delayed) {
      const key = this.#layout.key('scheduled', message.id);
      pipeline.sadd(key, ...queues);
      // Kept until its time and a minute more: a running worker has promoted its jobs by then.
      pipeline.pexpire(key, Math.max(0, (message.deliverAt ?? now) - now) + SCHEDULED_INDEX_GRACE_MS);
    }
    const results = await this.#withTimeout(pipeline.exec(), 'record scheduled messages');
    for (let i = 0; i < delayed.size * 2; i++) this.#reply(results, i);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // Closing the broker gives every unsettled delivery back to its queue, so workers can stop.
    this.#pending.releaseAll();
    await Promise.all([...this.#receivers].map((r) => r.close()));
    await Promise.all([...this.#queues.values()].map((q) => q.close().catch(() => undefined)));
    this.#client.disconnect();
  }

  /** The names of the queues one endpoint works (for tooling and tests). */
  queuesOf(endpoint: string): string[] {
    return this.#queueSpecsOf(endpoint).map((q) => q.name);
  }

  #queueSpecsOf(endpoint: string): QueueSpec[] {
    return [
      ...this.#layout.queuesOf(endpoint, this.#registered.get(endpoint) ?? []),
      ...(this.#leftoverQueues.get(endpoint) ?? []),
    ];
  }

  /**
   * Jobs in each queue `endpoint` receives from, by state: one row per command type's queue and per
   * event subscription's queue (its partition queues added in), and one for the partition queues
   * its ordered command types share, `cmd~<endpoint>~ordered`. `waiting` counts BullMQ's wait and
   * prioritized jobs.
   *
   * @remarks
   * One `getJobCounts` script per BullMQ queue, all sent at once on the producer connection (so
   * they share a round trip). Only the subscriptions this broker registered for `endpoint` count.
   */
  async queueDepths(endpoint: string): Promise<readonly QueueDepth[]> {
    this.#assertOpen();
    await this.#connected();
    const queues = this.#queueSpecsOf(endpoint);
    const counts = await this.#withTimeout(
      Promise.all(queues.map(({ name }) => this.#queue(name).getJobCounts(...DEPTH_STATES))),
      'count jobs',
    );
    const byQueue = new Map<string, QueueDepth[]>();
    queues.forEach(({ name, group }, index) => {
      byQueue.set(group, [...(byQueue.get(group) ?? []), queueDepthOf(name, counts[index] ?? {})]);
    });
    return [...byQueue].map(([queue, depths]) => sumQueueDepths(queue, depths));
  }

  /**
   * Everything: the queues live in Redis, shared by every broker on the same prefix, and a job whose
   * lock lapsed (its worker died) goes back and counts as an attempt.
   *
   * @remarks
   * `durable` holds across restarts of Harrier's processes; across a restart of Redis only with
   * persistence on (AOF, see docs/redis.md). `dedupeWindowMs` is the window of messages at the
   * default `dedupe`; one with `dedupe: 'while-queued'` is deduplicated only while its job exists.
   */
  capabilities(): BrokerCapabilities {
    return {
      delayedDelivery: true,
      dedupeWindowMs: this.#dedupeWindowMs,
      orderedDelivery: true,
      queueDepths: true,
      redeliver: true,
      durable: true,
      shared: true,
      crashCounting: true,
      cancelScheduled: true,
    };
  }

  /** A receiver of its own for each iteration; it leaves the broker's set once its iteration ends. */
  #receive(options: ReceiverOptions, queues: readonly QueueSpec[]): AsyncIterator<Delivery> {
    const receiver: BullMqReceiver = new BullMqReceiver(
      {
        prefix: this.#prefix,
        lockDurationMs: this.#lockDurationMs,
        lockRenewMs: this.#lockRenewMs,
        stalledIntervalMs: this.#stalledIntervalMs,
        clock: this.#clock,
        logger: this.#logger,
        pending: this.#pending,
        toTypeQueue: (job) => this.#toTypeQueue(job),
        newClient: (settings, role) => this.#newClient(settings, role),
      },
      options,
      queues,
      () => this.#receivers.delete(receiver),
    );
    // Asked for once the broker is closed, a receiver ends at once like those the close ended: it
    // would otherwise start workers that take jobs and that nothing ever closes.
    if (this.#closed) void receiver.close();
    else this.#receivers.add(receiver);
    return receiver;
  }

  #settle(deliveryId: string, outcome: Outcome): Promise<void> {
    return this.#pending.settle(deliveryId, outcome);
  }

  /** The value of one reply of a pipeline. @throws HarrierError `redis-unavailable` for an error reply. */
  #reply(results: [Error | null, unknown][] | null, index: number): unknown {
    const [error, value] = results?.[index] ?? [new Error('no reply'), undefined];
    if (error) throw redisUnavailable(this.#describe(), error, isClusterConnection(this.#connection));
    return value;
  }

  /** Whether `endpoint`'s registration in Redis lists command `type` among its ordered types. */
  async #ordersCommand(endpoint: string, type: string): Promise<boolean> {
    const registration = await this.#withTimeout(
      this.#client.hget(this.#layout.key('endpoints'), endpoint),
      'read the endpoint registration',
    );
    if (registration === null) return false;
    return parseCommandRoutes({ [endpoint]: registration }).get(type)?.ordered === true;
  }

  /**
   * The queues `endpoint` no longer fills that hold jobs: the partition queues of `specs`' ordered
   * command types in the layout of earlier builds (one set per type, `cmd~<type>~p<n>`), and the
   * endpoint's own ordered-command partition queues when `specs` order no command type. Its
   * receivers work them beside its own queues, so nothing queued there is left behind (a job of a
   * type it does not order goes on to its type's queue).
   *
   * @remarks
   * One `EXISTS` per queue, of the BullMQ keys that hold unfinished jobs (an empty list or sorted
   * set does not exist in Redis), all in one round trip at registration.
   */
  async #leftoversHoldingJobs(endpoint: string, specs: readonly SubscriptionSpec[]): Promise<QueueSpec[]> {
    const ordered = orderedCommandTypes(specs);
    const queues = [
      ...[...ordered].flatMap((type) => this.#layout.typePartitionQueues(type)),
      ...(ordered.size === 0 ? this.#layout.orderedCommandQueues(endpoint) : []),
    ];
    if (queues.length === 0) return [];
    const pipeline = (await this.#connected()).pipeline();
    for (const { name } of queues)
      pipeline.exists(...UNFINISHED_JOB_KEYS.map((key) => `${this.#prefix}:${name}:${key}`));
    const results = await this.#withTimeout(pipeline.exec(), 'look for jobs in queues left over');
    return queues.filter((_, index) => Number(this.#reply(results, index)) > 0);
  }

  /**
   * Adds `job` as it is (its id, data and attempts) to the queue of its command type: a job found in
   * an endpoint's ordered-command partition queues that the endpoint does not order (any more).
   */
  async #toTypeQueue(job: Job<JobData>): Promise<void> {
    const message: OutgoingMessage = {
      id: job.id ?? '',
      kind: 'command',
      type: job.name,
      body: '',
      // Moved as it was published: a message without a deduplication id gets none here either.
      dedupe: job.opts.deduplication === undefined ? 'while-queued' : undefined,
    };
    await this.#addAll(this.#layout.commandQueue(job.name), [
      { name: job.name, data: job.data, opts: jobOptions(message, this.#clock.now(), this.#jobDefaults) },
    ]);
  }

  async #addAll(queueName: string, jobs: NewJob[]): Promise<void> {
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
      queue = new bullmq.Queue(name, { connection: this.#client, prefix: this.#prefix });
      queue.on('error', (error: Error) => {
        this.#logger.debug('BullMQ queue error', { queue: name, error: error.message });
      });
      this.#queues.set(name, queue);
    }
    return queue;
  }

  #newClient(settings: ClientSettings, role: string): Redis | Cluster {
    return createBrokerClient(this.#connection, this.#prefix, settings, role);
  }

  #describe(): string {
    return describeConnection(this.#connection);
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
      const key = this.#layout.key('partitions');
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

/** `text` parsed as JSON, or undefined when it is not JSON (a job written by something else). */
function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/** How long the record of a delayed message's queues outlives its time, in ms. */
const SCHEDULED_INDEX_GRACE_MS = 60_000;

/** The keys of a BullMQ queue that hold its unfinished jobs (BullMQ 5 and 6). */
const UNFINISHED_JOB_KEYS = ['wait', 'paused', 'active', 'prioritized', 'delayed', 'waiting-children'];

/** A job as `Queue.addBulk` takes it. */
interface NewJob {
  readonly name: string;
  readonly data: JobData;
  readonly opts: Record<string, unknown>;
}

/** @throws HarrierError `invalid-option` unless `value` is a whole number of at least `min`. */
function assertWhole(value: number, option: string, min: number, example: string): void {
  assertWholeOption('BullMqBroker', option, value, min, example);
}

/**
 * @throws HarrierError `invalid-option` unless the lock timings are whole numbers of at least their
 * minimum and the lock is renewed before it expires.
 */
function assertLockTimings(lockDurationMs: number, lockRenewMs: number, stalledIntervalMs: number): void {
  assertWhole(
    lockDurationMs,
    'lockDurationMs',
    1_000,
    'e.g. 5000 (a lock under a second is lost to one slow event-loop turn)',
  );
  assertWhole(
    lockRenewMs,
    'lockRenewMs',
    100,
    `e.g. ${Math.floor(lockDurationMs / 2)} (half of lockDurationMs)`,
  );
  assertWhole(stalledIntervalMs, 'stalledIntervalMs', 100, 'e.g. 2500');
  if (lockRenewMs >= lockDurationMs) {
    throw new HarrierError(
      'invalid-option',
      `BullMqBroker option lockRenewMs is ${lockRenewMs}: it must be less than lockDurationMs (${lockDurationMs}), since a lock renewed after it expired is lost; e.g. ${Math.floor(lockDurationMs / 2)} (half of lockDurationMs), or leave it out`,
    );
  }
}
