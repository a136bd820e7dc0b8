import { systemClock, type Clock } from '../clock/clock.js';
import { WakeList } from '../clock/wake-list.js';
import { HarrierError } from '../errors/harrier-error.js';
import { settle } from '../errors/settle.js';
import { StaleDeliveryError } from '../errors/stale-delivery-error.js';
import {
  MAX_ATTEMPT_HISTORY,
  type AttemptRecord,
  type BrokerCapabilities,
  type Delivery,
  type MessageBroker,
  type NackOptions,
  type OutgoingMessage,
  type PendingDeadLetter,
  type QueueDepth,
  type ReceiverOptions,
  type RedeliveryTarget,
  type SubscriptionSpec,
} from './message-broker.js';
import { noRouteError } from './no-route-error.js';
import { commandQueue, subscriptionQueue } from './queue-names.js';
import { SETTLED } from './settled.js';
import { isSeed, newSeed, seededRandom } from './seeded-random.js';

/**
 * How an in-memory broker picks the next delivery among the messages that are ready: `'fifo'` in
 * publish order, `'shuffled'` at random (per-key order of ordered definitions kept).
 */
export type DeliveryOrder = 'fifo' | 'shuffled';

/** Options of {@link InMemoryBroker}. */
export interface InMemoryBrokerOptions {
  /**
   * Time source for delays, retries and the dedupe window.
   * @defaultValue the system clock
   */
  readonly clock?: Clock;
  /**
   * How long a published id is remembered to drop a second publish of it, in ms.
   * @defaultValue 3600000 (1 hour)
   */
  readonly dedupeWindowMs?: number;
  /**
   * Most ids remembered for dedupe; the oldest are forgotten first.
   * @defaultValue 100000
   */
  readonly dedupeMaxEntries?: number;
  /**
   * Which ready message is delivered next. `'fifo'`: publish order, taking the endpoint's queues in
   * turn. `'shuffled'`: any ready message at random, the way messages in separate Redis queues (and
   * in one queue worked with concurrency) may be handled in any order; messages of an `ordered`
   * definition still come one at a time per key in publish order. Messages published within one
   * turn of the event loop are all candidates for the next delivery. Use `'shuffled'` in tests to
   * catch code that relies on an order it never asked for (`createTestBus` does by default).
   * @defaultValue 'fifo'
   */
  readonly deliveryOrder?: DeliveryOrder;
  /**
   * Seed of the random source of `deliveryOrder: 'shuffled'`: the same seed and the same sequence
   * of publishes and settles give the same delivery order, so a failing run can be replayed.
   * A safe non-negative integer.
   * @defaultValue a random seed, readable as {@link InMemoryBroker.seed}
   */
  readonly seed?: number;
}

/** Counts of what an in-memory broker holds. */
export interface InMemoryBrokerStats {
  /** Deliverable now. */
  readonly ready: number;
  /** Waiting for a delay, a retry time or an earlier message of the same key. */
  readonly waiting: number;
  /** Delivered and not yet settled. */
  readonly inFlight: number;
  /**
   * Held in queues no endpoint consumes (not counted as ready or waiting): command types no endpoint
   * has registered yet, subscriptions their endpoint registered no more.
   */
  readonly unconsumed: number;
}

interface StoredMessage {
  readonly message: OutgoingMessage;
  readonly queue: MemoryQueue;
  /**
   * Whether it waits behind earlier messages of its key, in its queue's lane: an ordered message
   * queued where an endpoint consumes it (a command queued before any endpoint registered its type
   * waits for none, as on Redis).
   */
  readonly keyed: boolean;
  /** Failed attempts (`nack` with `retryAt`). */
  attemptsMade: number;
  /** Deliveries given up unsettled ({@link InMemoryBroker.abandon}); each counts as an attempt too. */
  unsettledEnds: number;
  /** Earlier failed attempts; made on the first failure (most messages never fail). */
  history: AttemptRecord[] | undefined;
  /** A dead-lettering decided by an earlier delivery that could not be recorded. */
  pendingDeadLetter: PendingDeadLetter | undefined;
  /** The dead letter this message replays (set by `redeliver`), kept on every delivery of it. */
  readonly replayOf: string | undefined;
  dueAt: number;
  deliveryId: string | undefined;
  /** The receiver holding the current delivery, whose prefetch it counts against. */
  holder: ReceiverSlots | undefined;
}

/** One receiver's unsettled deliveries and its prefetch. */
interface ReceiverSlots {
  held: number;
  readonly prefetch: number;
}

/**
 * The ordered messages of one endpoint's commands, or of one event subscription, per partition key:
 * one FIFO list per key across every queue and message type the lane serves.
 *
 * @remarks
 * A lane, not a queue, is what keeps per-key order: an endpoint's command types have a queue each
 * (their names, depths and dedupe windows stay per type) and share the endpoint's one command lane,
 * so a `CancelOrder` of a key waits for the `PlaceOrder` of that key sent before it. An event
 * subscription has one queue for all its types, and a lane of its own.
 */
class OrderedLane {
  /** Messages per partition key, FIFO; only the head may be delivered. */
  readonly keyed = new Map<string, StoredMessage[]>();
  /** Keys whose head is deliverable now. */
  readonly readyKeys = new Set<string>();
}

/** What an endpoint takes its deliveries from. */
interface EndpointSources {
  /** Its command types' queues and its event subscriptions' queues: their unordered messages. */
  readonly queues: readonly MemoryQueue[];
  /** Its command lane and its subscriptions' lanes: their ordered messages. */
  readonly lanes: readonly OrderedLane[];
}

class MemoryQueue {
  /** Unordered messages deliverable now, FIFO. */
  readonly ready: StoredMessage[] = [];
  readyHead = 0;
  /**
   * Where this queue's ordered messages wait for their key: an event queue's own lane; for a command
   * queue, the command lane of its owner, or a lane of its own once no endpoint consumes it.
   */
  lane: OrderedLane | undefined;
  /** The endpoint whose command lane a command queue's ordered messages are in. */
  owner: string | undefined;
  /** This queue's messages that are the ready head of their key in {@link MemoryQueue.lane}. */
  readyKeyed = 0;
  /** Messages held (ready, waiting or in flight). */
  stored = 0;
  inFlight = 0;
  /** Messages waiting for their due time on a timer (a set, so `redeliver` can find them). */
  readonly delayed = new Set<StoredMessage>();
  /** Whether some endpoint registered to consume this queue (`consumers` is not empty). */
  consumed = false;
  /** The endpoints whose registration includes this queue (for a command queue, maybe several). */
  readonly consumers = new Set<string>();
  /** The event types routed to this queue (an event subscription's queue). */
  readonly routedTypes = new Set<string>();
  /**
   * Ids published to this queue within the dedupe window. Keyed by the id the message already holds:
   * a composite `id|queue` key made and kept a new 60-character string for every message, the bulk of
   * what a full window of 100,000 ids held. Expiries live in the broker's `#seenExpiries`.
   */
  readonly seen = new Set<string>();

  /** @param handler - the subscription its deliveries name: an event queue's handler; none for a command queue. */
  constructor(
    readonly name: string,
    readonly handler?: string,
  ) {}

  readyCount(): number {
    return this.ready.length - this.readyHead + this.readyKeyed;
  }
}

const NO_HISTORY: readonly AttemptRecord[] = Object.freeze([]);

const RECEIVER_DONE: IteratorReturnResult<undefined> = Object.freeze({ done: true, value: undefined });

/** How long `redeliver` waits for a delivery of the message to settle before refusing, in ms. */
const REDELIVER_IN_FLIGHT_WAIT_MS = 2_000;

const keyOf = (message: OutgoingMessage): string => message.partitionKey ?? '';

/** Takes the head of a lane's key whose head became deliverable first. */
function takeKeyed(lane: OrderedLane): StoredMessage | undefined {
  for (const key of lane.readyKeys) {
    lane.readyKeys.delete(key);
    const head = lane.keyed.get(key)?.[0];
    if (head !== undefined) {
      head.queue.readyKeyed--;
      return head;
    }
  }
  return undefined;
}

/** Takes the oldest unordered ready message of a queue. */
function takeHead(queue: MemoryQueue): StoredMessage | undefined {
  if (queue.readyHead >= queue.ready.length) return undefined;
  const stored = queue.ready[queue.readyHead];
  queue.ready[queue.readyHead] = undefined as never;
  queue.readyHead++;
  if (queue.readyHead > 1024 && queue.readyHead * 2 > queue.ready.length) {
    queue.ready.splice(0, queue.readyHead);
    queue.readyHead = 0;
  }
  return stored;
}

const nextTurn = (): Promise<void> =>
  new Promise<void>((resolve) => {
    setImmediate(resolve);
  });

/**
 * Ready messages in a consumed queue above which a publish resolves only after a turn of the event
 * loop (see {@link InMemoryBroker.publish}).
 */
export const PUBLISH_YIELD_BACKLOG = 1024;

/**
 * The embedded broker: every queue lives in this process's memory.
 *
 * @remarks
 * It has the semantics of the Redis broker (fan-out per subscription, per-key order with retries
 * inside the key, across an endpoint's command types and across a subscription's event types,
 * idempotent publish within a window, delays, stale delivery ids refused, the same queue names), so
 * tests and `npm start` exercise the same behaviour. Nothing survives the process. By default it delivers
 * in publish order, which Redis does not promise for messages that are not `ordered`;
 * `deliveryOrder: 'shuffled'` delivers them in a seeded random order instead.
 */
export class InMemoryBroker implements MessageBroker {
  readonly #clock: Clock;
  readonly #dedupeWindowMs: number;
  readonly #dedupeMaxEntries: number;
  /**
   * Every dedupe entry from `#seenHead` on, oldest first, as three parallel arrays (queue, id, expiry):
   * what `#trimSeen` forgets first. Expiries never decrease along the arrays, so the expired entries are
   * always a prefix.
   *
   * @remarks
   * A map from id to expiry held each expiry (a time past 2^31, so not a small integer) as a heap
   * number, one allocation per message; a number array keeps them unboxed. Not a Map's own iteration
   * order either: a Map keeps a deleted entry's slot until it grows again, and an iterator from the
   * front walks every such slot, up to 100,000 per publish in a full window.
   */
  readonly #seenQueues: MemoryQueue[] = [];
  readonly #seenIds: string[] = [];
  readonly #seenExpiries: number[] = [];
  #seenHead = 0;
  /**
   * The latest expiry given so far. A clock that goes backwards gets no earlier expiry than this: its
   * ids are remembered longer than the window, never shorter, and the expiries stay sorted.
   */
  #lastExpiry = -Infinity;
  readonly #queues = new Map<string, MemoryQueue>();
  /** The queue of each command type, by the type string: no `cmd~` name made per publish. */
  readonly #commandQueues = new Map<string, MemoryQueue>();
  readonly #eventRoutes = new Map<string, Set<MemoryQueue>>();
  readonly #endpointQueues = new Map<string, MemoryQueue[]>();
  /** What each registered endpoint takes from: its queues and lanes. */
  readonly #sources = new Map<string, EndpointSources>();
  /** Each endpoint's command lane, shared by the command queues it owns. */
  readonly #commandLanes = new Map<string, OrderedLane>();
  readonly #inFlight = new Map<string, StoredMessage>();
  readonly #waiters = new WakeList();
  readonly #listeners = new Set<() => void>();
  readonly #timers = new Set<() => void>();
  /** Messages taken back by `cancel` while their timer was pending: the timer finds them here. */
  readonly #cancelled = new WeakSet<StoredMessage>();
  readonly #shuffled: boolean;
  readonly #random: () => number;
  #rr = 0;
  #closed = false;
  /** Receivers waiting for a message (in {@link WakeList.wait}). */
  #waiting = 0;
  /** Deliveries made so far: the next delivery id (a counter never repeats, so a stale id is refused). */
  #deliveries = 0;

  /**
   * Seed of this broker's random source; pass it as `seed` to replay a shuffled delivery order.
   */
  readonly seed: number;

  /** @throws HarrierError `invalid-option` when `deliveryOrder` or `seed` is not one of the allowed values. */
  constructor(options: InMemoryBrokerOptions = {}) {
    this.#clock = options.clock ?? systemClock;
    this.#dedupeWindowMs = options.dedupeWindowMs ?? 3_600_000;
    this.#dedupeMaxEntries = options.dedupeMaxEntries ?? 100_000;
    // Checked at run time too: JavaScript callers and config files pass plain strings.
    const order: string = options.deliveryOrder ?? 'fifo';
    if (order !== 'fifo' && order !== 'shuffled')
      throw new HarrierError(
        'invalid-option',
        `Unknown deliveryOrder ${JSON.stringify(order)}: use 'fifo' or 'shuffled'`,
      );
    if (options.seed !== undefined && !isSeed(options.seed))
      throw new HarrierError(
        'invalid-option',
        `Invalid seed ${String(options.seed)}: pass a safe non-negative integer, such as the seed a failing run reported`,
      );
    this.#shuffled = order === 'shuffled';
    this.seed = options.seed ?? newSeed();
    this.#random = seededRandom(this.seed);
  }

  /** The delivery order this broker was made with. */
  get deliveryOrder(): DeliveryOrder {
    return this.#shuffled ? 'shuffled' : 'fifo';
  }

  register(endpoint: string, subscriptions: readonly SubscriptionSpec[]): Promise<void> {
    return settle(() => {
      this.#register(endpoint, subscriptions);
    });
  }

  /**
   * Replaces the queues and event routes of `endpoint` with those of `subscriptions`. A queue it no
   * longer registers keeps its messages, unconsumed unless another endpoint registered it too (a
   * command type), and comes back with them if the endpoint registers it again.
   *
   * @remarks
   * A command queue's ordered messages wait in the command lane of its owner, the endpoint that
   * registered it first among those consuming it: that endpoint's ordered commands keep their order
   * per key whatever their type, as on Redis, where they share the endpoint's partition queues.
   * Another endpoint registering the type too takes its unordered messages only (a command type
   * has one handler in a system). When the owner stops consuming the queue, its ordered messages
   * move to the next consumer's lane, or to a lane of the queue's own while nobody consumes it.
   */
  #register(endpoint: string, subscriptions: readonly SubscriptionSpec[]): void {
    this.#assertOpen();
    const queues: MemoryQueue[] = [];
    const routes: [MemoryQueue, string][] = [];
    for (const sub of subscriptions) {
      if (sub.kind === 'command') {
        for (const type of sub.types) {
          const queue = this.#commandQueue(type);
          if (!queues.includes(queue)) queues.push(queue);
        }
      } else {
        const queue = this.#eventQueue(endpoint, sub.handler);
        if (!queues.includes(queue)) queues.push(queue);
        for (const type of sub.types) routes.push([queue, type]);
      }
    }
    for (const queue of this.#endpointQueues.get(endpoint) ?? []) {
      queue.consumers.delete(endpoint);
      queue.consumed = queue.consumers.size > 0;
      // Only an event queue has routes, and only its own endpoint registers it.
      for (const type of queue.routedTypes) this.#eventRoutes.get(type)?.delete(queue);
      queue.routedTypes.clear();
    }
    for (const queue of queues) {
      queue.consumers.add(endpoint);
      queue.consumed = true;
    }
    for (const [queue, type] of routes) {
      const typeRoutes = this.#eventRoutes.get(type) ?? new Set<MemoryQueue>();
      typeRoutes.add(queue);
      this.#eventRoutes.set(type, typeRoutes);
      queue.routedTypes.add(type);
    }
    const previous = this.#endpointQueues.get(endpoint) ?? [];
    this.#endpointQueues.set(endpoint, queues);
    for (const queue of new Set([...previous, ...queues])) {
      if (queue.handler === undefined) this.#assignOwner(queue);
    }
    const lanes: OrderedLane[] = [];
    if (queues.some((queue) => queue.handler === undefined)) lanes.push(this.#commandLane(endpoint));
    for (const queue of queues) if (queue.handler !== undefined && queue.lane) lanes.push(queue.lane);
    this.#sources.set(endpoint, { queues, lanes });
    // A queue that came back (registered again) may hold ready messages: wake the receivers.
    this.#wakeAll();
    this.#changed();
  }

  /** Keeps a command queue's owner among its consumers, moving its ordered messages with it. */
  #assignOwner(queue: MemoryQueue): void {
    const { owner } = queue;
    if (owner !== undefined && queue.consumers.has(owner)) return;
    const next = queue.consumers.values().next();
    queue.owner = next.done === true ? undefined : next.value;
    const lane = queue.owner === undefined ? new OrderedLane() : this.#commandLane(queue.owner);
    if (queue.lane === undefined) queue.lane = lane;
    else this.#moveToLane(queue, lane);
  }

  #commandLane(endpoint: string): OrderedLane {
    let lane = this.#commandLanes.get(endpoint);
    if (lane === undefined) {
      lane = new OrderedLane();
      this.#commandLanes.set(endpoint, lane);
    }
    return lane;
  }

  /**
   * Moves `queue`'s ordered messages from its lane to `lane`, in their order, behind what `lane`
   * holds of their keys: the messages left behind in the old lane and the ones moved are each
   * scheduled again when they become the head of their key.
   */
  #moveToLane(queue: MemoryQueue, lane: OrderedLane): void {
    const from = queue.lane;
    queue.lane = lane;
    if (from === undefined || from === lane) return;
    for (const [key, list] of [...from.keyed]) {
      const moving = list.filter((stored) => stored.queue === queue);
      if (moving.length === 0) continue;
      const head = list[0] as StoredMessage;
      const staying = list.filter((stored) => stored.queue !== queue);
      if (head.queue === queue && from.readyKeys.delete(key)) queue.readyKeyed--;
      if (staying.length === 0) from.keyed.delete(key);
      else {
        from.keyed.set(key, staying);
        if (staying[0] !== head) this.#schedule(staying[0] as StoredMessage);
      }
      const target = lane.keyed.get(key);
      if (target === undefined) {
        lane.keyed.set(key, moving);
        const first = moving[0] as StoredMessage;
        // A delivery in flight or a timer pending makes it ready (or not) in its own time.
        if (first.deliveryId === undefined && !queue.delayed.has(first)) this.#schedule(first);
      } else {
        target.push(...moving);
      }
    }
  }

  /**
   * The deliveries of `endpoint`, one per `next()`, until the broker closes or `signal` aborts; at
   * most `prefetch` of them unsettled at once (a `next()` then waits for a settle).
   *
   * @remarks
   * A hand-written iterator, not an async generator: `next()` answers a ready delivery with one
   * resolved promise, where a generator's `yield` awaits its value and resumes through its own queue
   * of requests (two promises and three ticks more per delivery, measured on the send path).
   * @throws HarrierError `not-registered` when `endpoint` has not called `register` on this broker.
   */
  receiver(options: ReceiverOptions): AsyncIterable<Delivery> {
    const { endpoint, signal } = options;
    if (!this.#endpointQueues.has(endpoint)) {
      throw new HarrierError(
        'not-registered',
        `Endpoint "${endpoint}" has not registered its subscriptions: call register() first (bus.start() does)`,
      );
    }
    const slots: ReceiverSlots = { held: 0, prefetch: Math.max(1, options.prefetch ?? 16) };
    let sinceYield = 0;
    let finished = false;
    const next = (): Promise<IteratorResult<Delivery>> => {
      try {
        if (finished || this.#closed || signal?.aborted === true) {
          finished = true;
          return Promise.resolve(RECEIVER_DONE);
        }
        // A backlog is served from promise continuations alone; give timers and I/O a turn now and then.
        if (sinceYield >= 64) {
          sinceYield = 0;
          return nextTurn().then(next);
        }
        // At its prefetch, the receiver waits like an idle one: a settle wakes it.
        const delivery = slots.held < slots.prefetch ? this.#take(endpoint, slots) : undefined;
        if (delivery !== undefined) {
          sinceYield++;
          return Promise.resolve({ done: false, value: delivery });
        }
        // Shuffled: let the rest of this turn publish too, so that two messages sent one after the
        // other are both candidates, as they are for competing Redis workers.
        this.#waiting++;
        return this.#waiters.wait(signal).then(() => {
          this.#waiting--;
          return this.#shuffled ? nextTurn().then(next) : next();
        });
      } catch (error) {
        finished = true;
        // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
        return Promise.reject(error);
      }
    };
    const iterator: AsyncIterableIterator<Delivery> = {
      next,
      return: (): Promise<IteratorResult<Delivery>> => {
        finished = true;
        return Promise.resolve(RECEIVER_DONE);
      },
      [Symbol.asyncIterator]: () => iterator,
    };
    return iterator;
  }

  /**
   * Queues `message` for each of its subscriptions (a command: its one queue).
   *
   * @remarks
   * Resolves at once, unless a queue it went to holds more than {@link PUBLISH_YIELD_BACKLOG} ready
   * messages: then it resolves after one turn of the event loop. A receiver with a backlog gives the
   * event loop a turn now and then, and a producer that awaits each publish runs on promise
   * continuations alone, so without that turn it would queue its whole run before the first handler
   * ran (the heap growing with the run). The message is queued either way; nothing waits for a
   * consumer, so a queue nobody reads never blocks a publisher.
   */
  publish(message: OutgoingMessage): Promise<void> {
    let backlog: boolean;
    try {
      this.#assertOpen();
      this.#assertRouted(message);
      backlog = this.#route(message);
      this.#changed();
    } catch (error) {
      // A refusal reaches the caller as a rejection, as from an async publish.
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
      return Promise.reject(error);
    }
    return backlog ? nextTurn() : SETTLED;
  }

  /** Queues every message, or none when a command has no route; resolves as {@link InMemoryBroker.publish}. */
  publishBatch(messages: readonly OutgoingMessage[]): Promise<void> {
    let backlog = false;
    try {
      this.#assertOpen();
      // Every command is checked before any message is queued: a refused batch publishes nothing.
      for (const message of messages) this.#assertRouted(message);
      for (const message of messages) backlog = this.#route(message) || backlog;
      this.#changed();
    } catch (error) {
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
      return Promise.reject(error);
    }
    return backlog ? nextTurn() : SETTLED;
  }

  ack(deliveryId: string): Promise<void> {
    // Not through `settle`: no closure and no promise executor per ack, the same rejection on a throw.
    try {
      const stored = this.#settle(deliveryId);
      this.#remove(stored);
      this.#changed();
    } catch (error) {
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
      return Promise.reject(error);
    }
    return SETTLED;
  }

  nack(deliveryId: string, options: NackOptions): Promise<void> {
    return settle(() => {
      this.#nack(deliveryId, options);
    });
  }

  #nack(deliveryId: string, options: NackOptions): void {
    const stored = this.#settle(deliveryId);
    if ('deadLetter' in options) {
      this.#remove(stored);
    } else if ('release' in options) {
      this.#requeue(stored, options.retryAt ?? this.#clock.now());
    } else {
      stored.attemptsMade++;
      stored.pendingDeadLetter = options.pendingDeadLetter ?? stored.pendingDeadLetter;
      if (options.error !== undefined) {
        const history = (stored.history ??= []);
        const attempt = stored.attemptsMade + stored.unsettledEnds;
        history.push({ attempt, at: this.#clock.now(), error: options.error });
        if (history.length > MAX_ATTEMPT_HISTORY) history.shift();
      }
      this.#requeue(stored, options.retryAt);
    }
    this.#changed();
  }

  /**
   * Gives up an unsettled delivery as a worker that died holding it would: the message goes back to
   * its queue at once, its next delivery's `attempt` and `unsettledEnds` one higher, and the id is
   * refused from then on.
   *
   * @remarks
   * For tests of what a crash does (the conformance suite, a test of a `crashLimit`): in one
   * process nothing else leaves a delivery unsettled, since the queues die with the process, and a
   * receiver whose iteration ends keeps its deliveries settleable (see `DeliveryFacts.unsettledEnds`).
   * @throws StaleDeliveryError when the id is not current.
   */
  abandon(deliveryId: string): void {
    const stored = this.#settle(deliveryId);
    stored.unsettledEnds++;
    this.#requeue(stored, this.#clock.now());
    this.#changed();
  }

  /**
   * Puts a message back into one subscription with fresh attempts, unless the subscription still
   * holds it.
   *
   * @remarks
   * A message still queued (not delivered yet, or waiting for a retry) stays as it is: replaying a
   * dead letter twice delivers it once. A delivery of it not settled yet is waited for (2 s on the
   * broker's clock), as the dispatcher records a dead letter before it nacks the delivery.
   * @throws HarrierError `message-in-flight` when the delivery stays unsettled throughout the wait.
   */
  redeliver(target: RedeliveryTarget): Promise<void> {
    return this.#redeliver(target, this.#clock.now() + REDELIVER_IN_FLIGHT_WAIT_MS);
  }

  #redeliver(target: RedeliveryTarget, waitUntil: number): Promise<void> {
    let held: StoredMessage | undefined;
    try {
      this.#assertOpen();
      const { message } = target;
      const queue =
        message.kind === 'command'
          ? this.#commandQueue(message.type)
          : this.#eventQueue(target.endpoint, target.handler);
      held = this.#held(queue, message.id);
      if (held === undefined) {
        this.#enqueue(queue, { ...message, deliverAt: undefined }, target.deadLetterId);
        this.#changed();
        return SETTLED;
      }
    } catch (error) {
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
      return Promise.reject(error);
    }
    const deliveryId = held.deliveryId;
    if (deliveryId === undefined) return SETTLED;
    return this.#settledWithin(deliveryId, waitUntil - this.#clock.now()).then((settled) => {
      if (settled) return this.#redeliver(target, waitUntil);
      throw new HarrierError(
        'message-in-flight',
        `message ${target.message.id} is still being handled in queue ${held.queue.name} (its delivery stayed unsettled for ${REDELIVER_IN_FLIGHT_WAIT_MS} ms): replay it again once it has settled`,
      );
    });
  }

  /**
   * Takes back every copy of message `messageId` still waiting for its `deliverAt` and never
   * delivered, in every queue; resolves to how many it removed.
   *
   * @remarks
   * A copy delivered, waiting for a retry, or due already is left as it is. The id is forgotten in
   * the queues it was removed from, so publishing it again there delivers it. A scan of the delayed
   * messages (and of the ordered ones waiting behind their key), not an index kept per publish: the
   * send path pays nothing for it.
   */
  cancel(messageId: string): Promise<number> {
    try {
      this.#assertOpen();
    } catch (error) {
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
      return Promise.reject(error);
    }
    const now = this.#clock.now();
    const waiting = (stored: StoredMessage): boolean =>
      stored.message.id === messageId &&
      stored.deliveryId === undefined &&
      stored.attemptsMade === 0 &&
      stored.unsettledEnds === 0 &&
      stored.dueAt > now;
    const found = new Set<StoredMessage>();
    for (const queue of this.#queues.values()) {
      for (const stored of queue.delayed) if (waiting(stored)) found.add(stored);
      for (const list of queue.lane?.keyed.values() ?? [])
        for (const stored of list) if (stored.queue === queue && waiting(stored)) found.add(stored);
    }
    for (const stored of found) {
      this.#cancelled.add(stored);
      stored.queue.delayed.delete(stored);
      this.#remove(stored);
      this.#forgetSeen(stored.queue, messageId);
    }
    if (found.size > 0) this.#changed();
    return Promise.resolve(found.size);
  }

  /** Drops `id` from `queue`'s dedupe window (its entry in the expiry arrays is blanked). */
  #forgetSeen(queue: MemoryQueue, id: string): void {
    if (!queue.seen.delete(id)) return;
    for (let i = this.#seenHead; i < this.#seenIds.length; i++) {
      if (this.#seenIds[i] === id && this.#seenQueues[i] === queue) this.#seenIds[i] = '';
    }
  }

  /** The message `id` that `queue` holds (ready, waiting, delayed or delivered), if any. */
  #held(queue: MemoryQueue, id: string): StoredMessage | undefined {
    // A scan, not an index kept per publish: replays are rare and the send path pays nothing.
    for (let i = queue.readyHead; i < queue.ready.length; i++) {
      const stored = queue.ready[i];
      if (stored?.message.id === id) return stored;
    }
    for (const list of queue.lane?.keyed.values() ?? [])
      for (const stored of list) if (stored.queue === queue && stored.message.id === id) return stored;
    for (const stored of queue.delayed) if (stored.message.id === id) return stored;
    for (const stored of this.#inFlight.values()) {
      if (stored.queue === queue && stored.message.id === id) return stored;
    }
    return undefined;
  }

  /** Resolves true once `deliveryId` is settled (or the broker closed), false after `waitMs`. */
  #settledWithin(deliveryId: string, waitMs: number): Promise<boolean> {
    return new Promise<boolean>((resolve) => {
      const done = (settled: boolean): void => {
        this.#listeners.delete(check);
        cancel();
        resolve(settled);
      };
      const check = (): void => {
        if (!this.#inFlight.has(deliveryId) || this.#closed) done(true);
      };
      const cancel = this.#clock.setTimer(Math.max(0, waitMs), () => {
        done(false);
      });
      this.#listeners.add(check);
    });
  }

  close(): Promise<void> {
    this.#closed = true;
    for (const cancel of this.#timers) cancel();
    this.#timers.clear();
    this.#wakeAll();
    this.#changed();
    return Promise.resolve();
  }

  /** What the broker holds now; used by `whenIdle` in tests. */
  stats(): InMemoryBrokerStats {
    let ready = 0;
    let waiting = 0;
    let unconsumed = 0;
    for (const queue of this.#queues.values()) {
      if (!queue.consumed) {
        unconsumed += queue.stored;
        continue;
      }
      const queueReady = queue.readyCount();
      ready += queueReady;
      waiting += queue.stored - queueReady - queue.inFlight;
    }
    return { ready, waiting, inFlight: this.#inFlight.size, unconsumed };
  }

  /**
   * Messages in each queue `endpoint` receives from (its command types' queues and its event
   * subscriptions' queues), by state: `waiting` (ready, or behind an earlier message of the same
   * key), `active` (delivered, not settled) and `delayed` (waiting for a delay or a retry time).
   */
  queueDepths(endpoint: string): Promise<readonly QueueDepth[]> {
    const queues = this.#endpointQueues.get(endpoint) ?? [];
    return Promise.resolve(
      queues.map((queue) => ({
        queue: queue.name,
        waiting: queue.stored - queue.inFlight - queue.delayed.size,
        active: queue.inFlight,
        delayed: queue.delayed.size,
      })),
    );
  }

  /** Calls `listener` after every change of what the broker holds; returns an unsubscribe function. */
  onChange(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Delayed delivery, idempotent publish within `dedupeWindowMs`, per-key order, queue depths,
   * redelivery and cancelling scheduled messages; nothing survives the process or is shared with another one (each instance is a
   * system of its own). A delivery never settled is held until the broker closes, unless
   * {@link InMemoryBroker.abandon} gives it up as a dead worker would: that end is counted.
   */
  capabilities(): BrokerCapabilities {
    return {
      delayedDelivery: true,
      dedupeWindowMs: this.#dedupeWindowMs,
      orderedDelivery: true,
      queueDepths: true,
      redeliver: true,
      durable: false,
      shared: false,
      crashCounting: true,
      cancelScheduled: true,
    };
  }

  #assertOpen(): void {
    if (this.#closed)
      throw new HarrierError(
        'broker-closed',
        'The in-memory broker is closed: create a new one (or a new bus) to publish again',
      );
  }

  /** Refuses a command whose queue no endpoint registered to consume, unless it opts out. */
  #assertRouted(message: OutgoingMessage): void {
    if (message.kind === 'event' || message.requireRoute === false) return;
    if (this.#commandQueues.get(message.type)?.consumed !== true) throw noRouteError(message.type);
  }

  #commandQueue(type: string): MemoryQueue {
    let queue = this.#commandQueues.get(type);
    if (queue === undefined) {
      queue = this.#queue(commandQueue(type));
      this.#commandQueues.set(type, queue);
    }
    return queue;
  }

  #queue(name: string): MemoryQueue {
    let queue = this.#queues.get(name);
    if (queue === undefined) {
      queue = new MemoryQueue(name);
      this.#queues.set(name, queue);
    }
    return queue;
  }

  /**
   * The queue of `endpoint`'s subscription `handler`, with its own lane, named
   * `evt~<endpoint>~<handler>` but kept under both parts apart: a `~` in either never makes two
   * subscriptions share one queue.
   */
  #eventQueue(endpoint: string, handler: string): MemoryQueue {
    const key = JSON.stringify([endpoint, handler]);
    let queue = this.#queues.get(key);
    if (queue === undefined) {
      queue = new MemoryQueue(subscriptionQueue(endpoint, handler), handler);
      queue.lane = new OrderedLane();
      this.#queues.set(key, queue);
    }
    return queue;
  }

  /** Queues a message; true when a consumed queue it went to has a backlog past the yield mark. */
  #route(message: OutgoingMessage): boolean {
    const now = this.#clock.now();
    // Expired ids, and the oldest beyond dedupeMaxEntries, leave before any lookup: an id still in a
    // queue's `seen` set is inside its window. (Between two publishes the sets may hold one message's
    // fan-out more than the cap; nothing reads them then.)
    this.#trimSeen(now);
    let backlog = false;
    if (message.kind === 'event') {
      const routes = this.#eventRoutes.get(message.type);
      if (routes !== undefined)
        for (const queue of routes) backlog = this.#routeTo(queue, message, now) || backlog;
    } else {
      // A command goes to its one queue: no list of targets made per message.
      backlog = this.#routeTo(this.#commandQueue(message.type), message, now);
    }
    return backlog;
  }

  /** Queues a message in one queue unless its id is in the queue's dedupe window; true on a backlog. */
  #routeTo(queue: MemoryQueue, message: OutgoingMessage, now: number): boolean {
    if (queue.seen.has(message.id)) return false;
    queue.seen.add(message.id);
    let expiry = now + this.#dedupeWindowMs;
    if (expiry < this.#lastExpiry) expiry = this.#lastExpiry;
    else this.#lastExpiry = expiry;
    this.#seenQueues.push(queue);
    this.#seenIds.push(message.id);
    this.#seenExpiries.push(expiry);
    this.#enqueue(queue, message);
    return queue.consumed && queue.readyCount() > PUBLISH_YIELD_BACKLOG;
  }

  /** Forgets expired entries and the oldest beyond `dedupeMaxEntries`. */
  #trimSeen(now: number): void {
    const queues = this.#seenQueues;
    const ids = this.#seenIds;
    const expiries = this.#seenExpiries;
    let head = this.#seenHead;
    while (head < ids.length) {
      if ((expiries[head] as number) > now && ids.length - head <= this.#dedupeMaxEntries) break;
      (queues[head] as MemoryQueue).seen.delete(ids[head] as string);
      // Lets the id string go; the few queues stay referenced by the broker anyway.
      ids[head] = '';
      head++;
    }
    this.#seenHead = head;
    if (head > 2048 && head * 2 > ids.length) {
      queues.splice(0, head);
      ids.splice(0, head);
      expiries.splice(0, head);
      this.#seenHead = 0;
    }
  }

  #enqueue(queue: MemoryQueue, message: OutgoingMessage, replayOf?: string): void {
    const lane = message.ordered === true && queue.consumed ? queue.lane : undefined;
    const stored: StoredMessage = {
      message,
      queue,
      keyed: lane !== undefined,
      attemptsMade: 0,
      unsettledEnds: 0,
      history: undefined,
      pendingDeadLetter: undefined,
      replayOf,
      dueAt: message.deliverAt ?? 0,
      deliveryId: undefined,
      holder: undefined,
    };
    queue.stored++;
    if (lane !== undefined) {
      const key = keyOf(message);
      const list = lane.keyed.get(key) ?? [];
      list.push(stored);
      lane.keyed.set(key, list);
      if (list.length === 1) this.#schedule(stored);
    } else {
      this.#schedule(stored);
    }
  }

  /** Makes a message deliverable at its due time: now, or through a clock timer. */
  #schedule(stored: StoredMessage): void {
    // Due at 0 (no delay, no retry time): ready now, without reading the clock.
    const delay = stored.dueAt <= 0 ? 0 : stored.dueAt - this.#clock.now();
    if (delay <= 0) {
      this.#makeReady(stored);
      return;
    }
    stored.queue.delayed.add(stored);
    const cancel = this.#clock.setTimer(delay, () => {
      this.#timers.delete(cancel);
      stored.queue.delayed.delete(stored);
      if (!this.#closed && !this.#cancelled.has(stored)) {
        this.#makeReady(stored);
        this.#changed();
      }
    });
    this.#timers.add(cancel);
  }

  #makeReady(stored: StoredMessage): void {
    if (stored.keyed) {
      const lane = stored.queue.lane as OrderedLane;
      const key = keyOf(stored.message);
      // A timer set before the message moved lanes (its queue changed owner) may find it behind
      // another message of its key, or made ready already: it is scheduled again as a head.
      if (lane.keyed.get(key)?.[0] !== stored || stored.deliveryId !== undefined || lane.readyKeys.has(key))
        return;
      lane.readyKeys.add(key);
      stored.queue.readyKeyed++;
    } else {
      stored.queue.ready.push(stored);
    }
    this.#wakeAll();
  }

  #requeue(stored: StoredMessage, dueAt: number): void {
    stored.deliveryId = undefined;
    stored.dueAt = dueAt;
    this.#schedule(stored);
  }

  #remove(stored: StoredMessage): void {
    stored.queue.stored--;
    if (!stored.keyed) return;
    const lane = stored.queue.lane as OrderedLane;
    const key = keyOf(stored.message);
    const list = lane.keyed.get(key);
    if (list === undefined) return;
    // The head, but for a delivery whose queue moved lanes while it was in flight.
    const at = list[0] === stored ? 0 : list.indexOf(stored);
    if (at < 0) return;
    list.splice(at, 1);
    if (list.length === 0) {
      lane.keyed.delete(key);
      return;
    }
    const next = list[0];
    if (at === 0 && next !== undefined) this.#schedule(next);
  }

  #settle(deliveryId: string): StoredMessage {
    const stored = this.#inFlight.get(deliveryId);
    if (stored === undefined) throw new StaleDeliveryError(deliveryId);
    this.#inFlight.delete(deliveryId);
    stored.queue.inFlight--;
    const holder = stored.holder;
    if (holder !== undefined) {
      stored.holder = undefined;
      // A receiver waiting at its prefetch may take again.
      if (holder.held-- === holder.prefetch) this.#wakeAll();
    }
    return stored;
  }

  #take(endpoint: string, slots: ReceiverSlots): Delivery | undefined {
    const sources = this.#sources.get(endpoint);
    if (sources === undefined) return undefined;
    const stored = this.#shuffled ? this.#takeAtRandom(sources) : this.#takeInTurn(sources);
    if (stored === undefined) return undefined;
    const delivery = this.#deliver(endpoint, stored, slots);
    this.#changed();
    return delivery;
  }

  /** The next ready message, taking the endpoint's queues (unordered) and lanes (ordered) in turn. */
  #takeInTurn({ queues, lanes }: EndpointSources): StoredMessage | undefined {
    const count = queues.length + lanes.length;
    for (let i = 0; i < count; i++) {
      const at = (this.#rr + i) % count;
      const stored =
        at < queues.length
          ? takeHead(queues[at] as MemoryQueue)
          : takeKeyed(lanes[at - queues.length] as OrderedLane);
      if (stored !== undefined) {
        this.#rr = (at + 1) % count;
        return stored;
      }
    }
    return undefined;
  }

  /** Any ready message of the endpoint, each as likely as the others (for an ordered key: its head). */
  #takeAtRandom({ queues, lanes }: EndpointSources): StoredMessage | undefined {
    let total = 0;
    for (const queue of queues) total += queue.ready.length - queue.readyHead;
    for (const lane of lanes) total += lane.readyKeys.size;
    if (total === 0) return undefined;
    let pick = Math.floor(this.#random() * total);
    for (const queue of queues) {
      const unordered = queue.ready.length - queue.readyHead;
      if (pick < unordered) {
        // Swap the pick to the head, then take the head as the FIFO path does.
        const at = queue.readyHead + pick;
        const chosen = queue.ready[at];
        queue.ready[at] = queue.ready[queue.readyHead] as StoredMessage;
        queue.ready[queue.readyHead] = chosen as StoredMessage;
        return takeHead(queue);
      }
      pick -= unordered;
    }
    for (const lane of lanes) {
      if (pick < lane.readyKeys.size) {
        for (const key of lane.readyKeys) {
          if (pick-- > 0) continue;
          lane.readyKeys.delete(key);
          const head = lane.keyed.get(key)?.[0];
          if (head !== undefined) head.queue.readyKeyed--;
          return head;
        }
      }
      pick -= lane.readyKeys.size;
    }
    return undefined;
  }

  #deliver(endpoint: string, stored: StoredMessage, slots: ReceiverSlots): Delivery {
    const id = `d${++this.#deliveries}`;
    stored.deliveryId = id;
    stored.holder = slots;
    slots.held++;
    this.#inFlight.set(id, stored);
    stored.queue.inFlight++;
    const { message } = stored;
    const { queue } = stored;
    const handler = queue.handler;
    return {
      id,
      body: message.body,
      facts: {
        messageId: message.id,
        kind: message.kind,
        type: message.type,
        endpoint,
        handler,
        attempt: stored.attemptsMade + stored.unsettledEnds + 1,
        unsettledEnds: stored.unsettledEnds,
        // A copy, as the history changes with later attempts; none is made for a first delivery.
        history: stored.history === undefined ? NO_HISTORY : [...stored.history],
        partitionKey: message.partitionKey,
        queue: stored.queue.name,
        // Set directly, not spread in: one object shape for every delivery, and no object made per
        // delivery for facts almost always absent.
        pendingDeadLetter: stored.pendingDeadLetter,
        replayOf: stored.replayOf,
      },
    };
  }

  #wakeAll(): void {
    // Most publishes find the receiver busy: no waiter to wake, and no copy of the empty list made.
    if (this.#waiting > 0) this.#waiters.wakeAll();
  }

  #changed(): void {
    if (this.#listeners.size === 0) return;
    for (const listener of this.#listeners) listener();
  }
}
