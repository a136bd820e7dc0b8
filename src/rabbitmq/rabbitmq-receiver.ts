import type { Channel, ConsumeMessage } from 'amqplib';
import type { OutageLoss } from '../broker/delivery-ledger.js';
import type { Delivery, DeliveryFacts } from '../broker/message-broker.js';
import { commandQueue, subscriptionQueue } from '../broker/queue-names.js';
import { systemClock } from '../clock/clock.js';
import { HarrierError } from '../errors/harrier-error.js';
import { sleep } from '../clock/sleep.js';
import type { Logger } from '../logging/logger.js';
import { AckCoalescer } from './ack-coalescer.js';
import { deliveryCountOf, readFacts, type CarriedFacts } from './message-headers.js';
import { excusedEnds, MAX_EXCUSED_ENDS, outageEnds, type OutageReturns } from './outage-returns.js';
import type { RabbitMqConnection } from './rabbitmq-connection.js';
import type { QueueRole } from './rabbitmq-topology.js';
import { ReadyQueues } from './ready-queues.js';

/**
 * How many of its latest acks a receiver remembers, and for how long (ms): an ack is never
 * confirmed, so one sent just before the connection dropped may not have reached RabbitMQ, which
 * then returns the message as if unsettled (a silent connection is found dead after twice the
 * heartbeat, 30 s by default).
 */
const RECENT_ACKS = 1_000;
const RECENT_ACK_MS = 60_000;

/** The longest a copy about to be put back waits for the ledger to give its loss, in ms. */
const LOSS_BEFORE_MOVE_MS = 2_000;

/** The longest a receiver that stops waits for the copies of a key moving to the tail, in ms. */
const MAX_ROTATION_WAIT_MS = 5_000;

/** The longest wait one Node timer can make, in ms. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** A message this receiver took from RabbitMQ and has not settled with it yet. */
export interface Taken {
  readonly receiver: RabbitMqReceiver;
  readonly message: ConsumeMessage;
  readonly channel: Channel;
  readonly role: QueueRole;
  /** The ordered lane (`<queue>|<key>`) of a message of a partition queue. */
  readonly lane: string | undefined;
  /** Its facts now: a retry held here (an ordered message) moves them on. */
  facts: CarriedFacts;
  /** The id of its delivery out now, if it is out. */
  id: string | undefined;
  /** Cancels the timer of a message waiting here for its time. */
  cancelTimer: (() => void) | undefined;
  /** The returns of its `x-delivery-count` that were outages, left out of `facts.ends`. */
  excused: number;
  /** Its unsettled ends as its headers tell them, none excused. */
  readonly counted: number;
  /**
   * With a delivery ledger: the ledger is still to be asked for the copy's loss in an outage
   * (a copy its queue returned before), when it is first admitted.
   */
  askLoss: boolean;
  /** Its copy is at the tail of its queue (moved there); the original is still to be acked. */
  copied: boolean;
  /** When it arrived on its channel (ms since the epoch): RabbitMQ's consumer timeout counts from then. */
  readonly takenAt: number;
  /** How long after its channel opened it arrived, in ms: the outage window is judged as of then. */
  readonly sinceOpenedMs: number;
}

/** A copy lost in an outage, for {@link ReceiverContext.recordLosses}. */
export interface LostTaken {
  readonly taken: Taken;
  /** Its `x-delivery-count` when it was held (one more after a simulated crash: see `dropChannel`). */
  readonly deliveryCount: number;
  readonly excused: number;
  /** When its channel dropped (ms since the epoch). */
  readonly droppedAt: number;
}

/** What a receiver needs from its broker. */
export interface ReceiverContext {
  readonly connection: RabbitMqConnection;
  readonly endpoint: string;
  readonly roles: readonly QueueRole[];
  readonly prefetch: number;
  /** The prefetch of each partition queue's consumer (at least `prefetch`): how far it reads ahead. */
  readonly partitionPrefetch: number;
  /** The longest a message not handed out stays unacked before it is given back and taken again, in ms. */
  readonly holdLimitMs: number;
  readonly logger: Logger;
  readonly timeoutMs: number;
  /** The copies lost in outages by the broker's receivers, whose return spends no attempt. */
  readonly outageReturns: OutageReturns;
  /** A fresh delivery id. */
  readonly nextId: () => string;
  /** Files a delivery handed out, so the broker can settle it by id. */
  readonly handOut: (taken: Taken) => void;
  /** Forgets a delivery id (settled, or stale). */
  readonly forget: (id: string) => void;
  /**
   * With a delivery ledger: whether a copy taken is to be handed out (`deliver`) or dropped (a
   * duplicate, a cancelled scheduled message); rejects when the ledger is unreachable (an outage).
   */
  readonly admit: ((taken: Taken) => Promise<'deliver' | 'drop'>) | undefined;
  /**
   * With a delivery ledger: records the copies a dropped channel held on their ledger entries, so
   * that any process that takes one back leaves the outage out of its unsettled ends; rejects when
   * the ledger is unreachable.
   */
  readonly recordLosses: ((lost: readonly LostTaken[]) => Promise<void>) | undefined;
  /** With a delivery ledger: the copy's latest loss recorded there, which it forgets; rejects as `admit`. */
  readonly takeLoss: ((taken: Taken) => Promise<OutageLoss | undefined>) | undefined;
  /** Publishes a copy of `taken` carrying `facts` back to its queue (confirmed), then acks it. */
  readonly moveBack: (taken: Taken, facts: CarriedFacts) => Promise<void>;
  /**
   * Publishes a copy of `taken` with its facts, its time included, straight to the tail of its queue
   * (confirmed); the caller acks it.
   */
  readonly copyToTail: (taken: Taken) => Promise<void>;
  /** Declares the endpoint's queues and bindings again (one was deleted under the receiver). */
  readonly declare: () => Promise<void>;
  /** Called once the receiver has ended and settled or returned everything. */
  readonly ended: (receiver: RabbitMqReceiver) => void;
}

/**
 * One endpoint's receiver: a channel of its own consuming each of the endpoint's queues, handing out
 * at most `prefetch` unsettled deliveries, one at a time per ordered key.
 *
 * @remarks
 * Each unordered queue's consumer has `prefetch` as its window, each partition queue's the larger
 * `partitionPrefetch` (so a key waiting here with its backlog leaves room for the partition's other
 * keys); what arrives beyond what may be out waits here (unacked, so RabbitMQ keeps it if the
 * process dies), handed out queue by queue in turn. A message of a partition queue waits until
 * the earlier message of its key has settled; a retry of one waits here for its time, holding its
 * key. A message that arrives before its `not before` time goes back to the delay queues (an
 * ordered one waits here instead). Nothing waits here unacked past `holdLimitMs` (RabbitMQ's
 * consumer timeout would close the channel), nor is handed out after that long: see `#sweep` and
 * `#tooOld`. Every message
 * arrives through {@link RabbitMqReceiver.receive}.
 * When the channel drops, what it held comes back from RabbitMQ (the deliveries out are stale) and
 * the receiver opens a new channel; the return is an outage, not an unsettled end
 * ({@link OutageReturns}, and with a delivery ledger the copy's ledger entry, so that another
 * process that takes it knows too).
 */
export class RabbitMqReceiver implements AsyncIterator<Delivery> {
  readonly #context: ReceiverContext;
  /** Messages that may be handed out now, taken queue by queue in turn. */
  readonly #ready = new ReadyQueues<Taken>();
  /** Messages of ordered lanes, in arrival order; the first is out, ready or waiting for its time. */
  readonly #lanes = new Map<string, Taken[]>();
  /** Every message held from the current channel. */
  readonly #held = new Set<Taken>();
  /** The latest messages acked on the current channel, and when: their ack may be lost with it. */
  readonly #recentlyAcked = new Map<Taken, number>();
  #out = 0;
  /** The ledger failed the last admission (logged once until it answers again). */
  #ledgerDown = false;
  /** The recording of the latest losses in the ledger, one after another. */
  #recordingLosses: Promise<void> = Promise.resolve();
  #ending = false;
  #ended = false;
  #channelClosing: Promise<void> | undefined;
  #started = false;
  #channel: Channel | undefined;
  /** Coalesces the acks of the current channel. */
  #acks: AckCoalescer | undefined;
  /** When the current channel opened (ms since the epoch). */
  #channelOpenedAt = 0;
  /** The next channel drop is the test hook's simulated crash: it counts. */
  #simulatingCrash = false;
  #wake: (() => void) | undefined;
  #givingBack: Promise<void> | undefined;
  /** The consumer tag of each unordered queue's consumer on the current channel. */
  readonly #unorderedConsumers: string[] = [];
  readonly #stop = new AbortController();
  /** Resolves once the receiver stops. */
  readonly #stopped = aborted(this.#stop.signal);
  readonly #roleOf = new Map<string, QueueRole>();
  /**
   * Lanes whose waiting messages were moved to the tail of their queue (held too long), with the
   * copies still to come back, in the order they were published: until they are all back, every
   * other message of the lane that arrives goes to the tail behind them.
   */
  readonly #rotating = new Map<string, Expected[]>();
  /**
   * Of a lane in {@link #rotating}: the copy keys of originals a dropped channel held whose copy was
   * at the tail already (they come back; each is acked and dropped).
   */
  readonly #superseded = new Map<string, Set<string>>();
  /** Ending: until when the channel waits for the copies of lanes moving to the tail (ms since the epoch). */
  #rotationsUntil = 0;
  /** Copies to the tail are published one batch after the other, so they land in turn. */
  #tail: Promise<void> = Promise.resolve();
  /** Batches of copies being moved to the tail: the channel stays open until they are acked. */
  #moving = 0;
  /** What `close` waits for: see {@link #movesDone}. */
  readonly #closeWaiters = new Set<() => void>();
  /** The message being admitted by the ledger (out of the ready lists, about to be handed out). */
  #admitting: Taken | undefined;

  constructor(context: ReceiverContext, signal: AbortSignal | undefined) {
    this.#context = context;
    for (const role of context.roles) this.#roleOf.set(role.queue, role);
    if (signal?.aborted === true) this.end();
    signal?.addEventListener(
      'abort',
      () => {
        this.end();
      },
      { once: true },
    );
  }

  get endpoint(): string {
    return this.#context.endpoint;
  }

  /** Messages out or waiting here, by logical queue (for `queueDepths`). */
  heldByQueue(): Map<string, number> {
    const counts = new Map<string, number>();
    for (const taken of this.#held) {
      const queue = logicalQueue(this.#context.endpoint, taken.role, taken.facts);
      counts.set(queue, (counts.get(queue) ?? 0) + 1);
    }
    return counts;
  }

  async next(): Promise<IteratorResult<Delivery>> {
    if (!this.#started) {
      this.#started = true;
      void this.#run();
    }
    for (;;) {
      if (this.#ending) return { done: true, value: undefined };
      if (this.#out < this.#context.prefetch) {
        const taken = this.#ready.shift();
        if (taken !== undefined && this.#tooOld(taken)) continue;
        if (taken !== undefined) {
          this.#admitting = taken;
          const admitted = await this.#admitted(taken).finally(() => {
            this.#admitting = undefined;
          });
          if (admitted) return { done: false, value: this.#handOut(taken) };
          continue;
        }
      }
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
      });
    }
  }

  return(): Promise<IteratorResult<Delivery>> {
    this.end();
    return Promise.resolve({ done: true, value: undefined });
  }

  /**
   * Stops handing out. Messages not handed out go back: an unordered one as a copy (so its
   * attempt is not counted), an ordered one with the channel, in order, once every delivery out has
   * settled (on a quorum queue that counts as one unsettled end). Deliveries out stay settleable.
   */
  end(): void {
    if (this.#ending) return;
    this.#ending = true;
    this.#stop.abort();
    this.#notify();
    if (this.#rotating.size > 0) {
      const wait = Math.min(this.#context.timeoutMs, MAX_ROTATION_WAIT_MS);
      this.#rotationsUntil = Date.now() + wait;
      setTimeout(() => {
        this.#maybeClose();
      }, wait + 10).unref();
    }
    this.#givingBack = this.#giveBack().finally(() => {
      this.#maybeClose();
    });
  }

  /**
   * Closes (the broker closes): once the unordered messages not handed out are given back (bounded
   * by the publish time-out) and the moves to the tail have ended and their copies are back (for at
   * most {@link MAX_ROTATION_WAIT_MS}, as `end`), the channel closes and RabbitMQ takes back what
   * it still held, in order.
   */
  async close(): Promise<void> {
    this.end();
    await this.#givingBack;
    await this.#movesDone();
    for (const taken of this.#held) {
      taken.cancelTimer?.();
      taken.cancelTimer = undefined;
      if (taken.id !== undefined) this.#context.forget(taken.id);
    }
    this.#held.clear();
    this.#out = 0;
    await this.#closeChannel();
  }

  /** A delivery out was acked or dead-lettered (`ack` sent by the broker): the next of its lane may go. */
  settled(taken: Taken): void {
    this.#release(taken);
    if (taken.lane !== undefined) {
      const lane = this.#lanes.get(taken.lane);
      if (lane !== undefined && lane[0] === taken) {
        lane.shift();
        const next = lane.at(0);
        if (next === undefined) this.#lanes.delete(taken.lane);
        else this.#admit(next);
      }
    }
    this.#maybeClose();
  }

  /** An ordered delivery out is to be handed out again here at `at` (a retry, a release with a time). */
  holdForLater(taken: Taken, facts: CarriedFacts, at: number): void {
    this.#release(taken);
    taken.facts = facts;
    this.#held.add(taken);
    if (this.#ending) {
      this.#maybeClose();
      return;
    }
    this.#schedule(taken, at);
  }

  /**
   * Acks `taken` on the channel it came from, with the other acks of this event-loop turn (see
   * {@link AckCoalescer}); false at once when that channel is gone, else resolves once the ack was
   * written to the channel (true) or the channel failed first (false).
   */
  ackMessage(taken: Taken): false | Promise<boolean> {
    const acks = this.#acks;
    if (taken.channel !== this.#channel || acks?.channel !== taken.channel) return false;
    this.#rememberAck(taken);
    return acks.ack(taken.message);
  }

  #rememberAck(taken: Taken): void {
    const now = Date.now();
    this.#recentlyAcked.set(taken, now);
    for (const [oldest, at] of this.#recentlyAcked) {
      if (this.#recentlyAcked.size <= RECENT_ACKS && now - at <= RECENT_ACK_MS) break;
      this.#recentlyAcked.delete(oldest);
    }
  }

  /** Returns an ordered `taken` to its queue now (nack with requeue); false when its channel is gone. */
  requeue(taken: Taken): boolean {
    const acks = this.#acks;
    if (taken.channel !== this.#channel || acks?.channel !== taken.channel) return false;
    return acks.nack(taken.message, true);
  }

  /** Whether `taken` is still held on a live channel (its delivery id is current). */
  holds(taken: Taken): boolean {
    return this.#held.has(taken) && taken.channel === this.#channel;
  }

  /**
   * Takes one message from RabbitMQ: the one path every delivery comes through (where a dedupe
   * ledger would be consulted).
   */
  receive(message: ConsumeMessage, role: QueueRole, channel: Channel): void {
    const read = readFacts(message.properties, role.kind);
    const { dropped } = read;
    const deliveryCount = deliveryCountOf(message.properties);
    // The returns this broker's own outages explain, and the facts the copy had here when lost (an
    // ordered message's failed attempts since it was taken): only for the message itself, returned
    // (`redelivered`); another copy of it (published again, or a retry whose publish was under way)
    // carries facts of its own.
    const back = this.#context.outageReturns.excuse(
      role.queue,
      read.facts.messageId,
      deliveryCount,
      this.#channelOpenedAt,
      Date.now(),
      { token: read.facts.token, redelivered: message.fields.redelivered },
    );
    if (dropped.length > 0) {
      this.#context.logger.warn('Malformed delivery facts in AMQP headers were dropped', {
        queue: role.queue,
        headers: dropped,
      });
    }
    const { excused } = back;
    if (back.capped) this.#warnCapped(role.queue, read.facts.messageId);
    const counted = read.facts.ends;
    const facts = { ...(back.facts ?? read.facts), ends: Math.max(0, counted - excused) };
    const taken: Taken = {
      receiver: this,
      message,
      channel,
      role,
      lane: role.ordered ? `${role.queue}|${facts.partitionKey ?? ''}` : undefined,
      facts,
      id: undefined,
      cancelTimer: undefined,
      excused,
      takenAt: Date.now(),
      sinceOpenedMs: Math.max(0, Date.now() - this.#channelOpenedAt),
      counted,
      askLoss:
        this.#context.takeLoss !== undefined &&
        message.fields.redelivered &&
        deliveryCount > 0 &&
        facts.token !== undefined,
      copied: false,
    };
    if (this.#acks?.channel === channel) this.#acks.delivered(message);
    this.#held.add(taken);
    if (this.#ending) {
      // Arrived as its consumer was being cancelled: back it goes (an ordered one with the channel,
      // after the copies its key waits for, see #maybeClose).
      if (taken.lane === undefined) void this.#moveBack(taken);
      else {
        const pending = this.#rotating.get(taken.lane);
        if (pending !== undefined) this.#passes(taken, pending);
        this.#maybeClose();
      }
      return;
    }
    if (taken.lane === undefined) {
      if (facts.notBefore !== undefined && facts.notBefore > Date.now()) {
        // Early: back to the delay queues, uncounted.
        void this.#moveBack(taken);
        return;
      }
      this.#ready.push(taken.role.queue, taken);
      this.#notify();
      return;
    }
    const pending = this.#rotating.get(taken.lane);
    if (pending !== undefined && !this.#passes(taken, pending)) return;
    const lane = this.#lanes.get(taken.lane);
    if (lane === undefined) {
      this.#lanes.set(taken.lane, [taken]);
      this.#admit(taken);
    } else {
      lane.push(taken);
    }
  }

  /**
   * Whether `taken`, an ordered message of a lane whose messages are moving to the tail of their
   * queue, is the next of its key (a copy it waits for, or a message it held when its channel
   * dropped, returned to the head of the queue); else it goes to the tail behind them (or, the
   * original of a copy already there, is acked and dropped).
   */
  #passes(taken: Taken, pending: Expected[]): boolean {
    const lane = taken.lane ?? '';
    const key = copyKey(taken.facts);
    const done = (): true => {
      if (pending.length === 0) {
        this.#rotating.delete(lane);
        this.#superseded.delete(lane);
        if (this.#ending) this.#maybeClose();
      }
      return true;
    };
    if (taken.message.fields.redelivered) {
      // Returned from a dropped channel: these come first, in their order.
      const superseded = this.#superseded.get(lane);
      if (superseded?.delete(key) === true) {
        // Its copy is at the tail already.
        void this.ackMessage(taken);
        this.#held.delete(taken);
        return false;
      }
      const index = pending.findIndex((expected) => expected.returned === true && expected.key === key);
      if (index >= 0) {
        pending.splice(0, index + 1);
        return done();
      }
    } else {
      // Everything the dropped channel held came back before the copies: what did not was settled.
      while (pending[0]?.returned === true) pending.shift();
      const index = pending.findIndex((expected) => expected.key === key);
      // Copies published before this one that did not come first are gone (a purge): not awaited.
      if (index > 0) pending.splice(0, index);
      if (index >= 0 && pending[0]?.again !== true) {
        pending.shift();
        return done();
      }
      if (index >= 0) pending.shift();
    }
    // Ahead of the lane's copies in the queue but behind them in its key's order (a message queued
    // before they were, a copy of one that moved again since, or one being moved when its channel
    // dropped): to the tail too.
    const copy: CopyState = { state: 'pending' };
    pending.push({ key, again: false, copy, at: Date.now() });
    this.#moveToTail([taken], [copy]);
    return false;
  }

  /** The head of a lane: ready now, or at its time. */
  #admit(taken: Taken): void {
    const at = taken.facts.notBefore;
    if (at !== undefined && at > Date.now()) this.#schedule(taken, at);
    else {
      this.#ready.push(taken.role.queue, taken);
      this.#notify();
    }
  }

  #schedule(taken: Taken, at: number): void {
    // Node's timers fire at once past 2^31 - 1 ms: a longer wait is made of several.
    const timer = setTimeout(
      () => {
        taken.cancelTimer = undefined;
        if (!this.#held.has(taken) || this.#ending) return;
        if (Date.now() < at) {
          this.#schedule(taken, at);
          return;
        }
        this.#ready.push(taken.role.queue, taken);
        this.#notify();
      },
      Math.min(MAX_TIMER_MS, Math.max(0, at - Date.now())),
    );
    timer.unref();
    taken.cancelTimer = () => {
      clearTimeout(timer);
    };
  }

  #handOut(taken: Taken): Delivery {
    const id = this.#context.nextId();
    taken.id = id;
    this.#out++;
    this.#context.handOut(taken);
    const { facts, role } = taken;
    const deliveryFacts: DeliveryFacts = {
      messageId: facts.messageId,
      kind: facts.kind ?? role.kind,
      type: role.type ?? facts.type,
      endpoint: this.#context.endpoint,
      handler: role.handler,
      attempt: facts.failures + facts.ends + 1,
      unsettledEnds: facts.ends,
      history: facts.history,
      partitionKey: facts.partitionKey,
      queue: logicalQueue(this.#context.endpoint, role, facts),
      ...(facts.replayOf !== undefined ? { replayOf: facts.replayOf } : {}),
      ...(facts.pendingDeadLetter !== undefined ? { pendingDeadLetter: facts.pendingDeadLetter } : {}),
    };
    // Decoded only now: a message read ahead keeps its raw bytes alone while it waits.
    return { id, body: taken.message.content.toString('utf8'), facts: deliveryFacts };
  }

  /**
   * Whether `taken` goes out: without a ledger, or a token (foreign bytes), at once; with one, when
   * the ledger admits it. A duplicate or a cancelled copy is acked on its channel and dropped. A
   * ledger that cannot be reached is an outage: the copy goes back to the front, uncounted, and the
   * receiver pauses a second before it asks again.
   */
  async #admitted(taken: Taken): Promise<boolean> {
    const admit = this.#context.admit;
    if (admit === undefined || taken.facts.token === undefined) return true;
    let verdict: 'deliver' | 'drop' | undefined;
    try {
      const admitted = await admit(taken);
      if (admitted === 'deliver' && taken.askLoss) await this.#takeLoss(taken);
      verdict = admitted;
      this.#ledgerDown = false;
    } catch (error) {
      if (!this.#ledgerDown) {
        this.#ledgerDown = true;
        this.#context.logger.warn('A RabbitMQ receiver is waiting for its delivery ledger', {
          endpoint: this.#context.endpoint,
          error: error instanceof Error ? error.message : String(error),
        });
      }
    }
    if (!this.holds(taken)) return false; // Its channel dropped: RabbitMQ gives it again.
    if (verdict === 'drop') {
      void this.ackMessage(taken);
      this.settled(taken);
      return false;
    }
    if (verdict === undefined) {
      this.#ready.unshift(taken.role.queue, taken);
      // Back in the ready lists: the sweep may give it back meanwhile (a long outage).
      if (this.#admitting === taken) this.#admitting = undefined;
      await sleep(systemClock, 1_000, this.#stop.signal);
    }
    if (this.#isEnding()) {
      // giveBack ran while it was being admitted: it goes back as the others did (unless it left
      // the ready lists meanwhile, given back by the sweep or by giveBack).
      if (!this.#ready.remove(taken.role.queue, taken) && verdict === undefined) return false;
      if (taken.lane === undefined) await this.#moveBack(taken);
      else this.#maybeClose();
      return false;
    }
    return verdict === 'deliver';
  }

  /**
   * Leaves out of `taken`'s unsettled ends the outage returns its ledger entry explains (a loss any
   * process recorded), when they are more than this broker knew of.
   */
  async #takeLoss(taken: Taken): Promise<void> {
    const loss = await this.#context.takeLoss?.(taken);
    taken.askLoss = false;
    if (loss === undefined) return;
    // As of its arrival: a copy that waited here for its turn came back when it arrived.
    const waited = Math.max(0, Date.now() - taken.takenAt);
    const outage = { ...loss, msAgo: Math.max(0, loss.msAgo - waited), outage: true };
    const deliveryCount = deliveryCountOf(taken.message.properties);
    const sinceOpened = taken.sinceOpenedMs;
    const excused = excusedEnds(outage, deliveryCount, sinceOpened);
    if (outageEnds(outage, deliveryCount, sinceOpened) > MAX_EXCUSED_ENDS)
      this.#warnCapped(taken.role.queue, taken.facts.messageId);
    if (excused <= taken.excused) return;
    taken.excused = excused;
    taken.facts = { ...taken.facts, ends: Math.max(0, taken.counted - excused) };
  }

  /**
   * Before a copy not admitted yet goes back as a new copy (which starts its queue's count again),
   * takes its loss from the ledger when it is still to be asked for one, so the outage returns are
   * left out of the ends its facts carry on; best effort, for at most {@link LOSS_BEFORE_MOVE_MS}
   * (a ledger that does not answer leaves them counted).
   */
  async #lossBeforeMove(taken: Taken): Promise<void> {
    await this.#lossesBeforeMove([taken]);
  }

  /** {@link #lossBeforeMove} for a batch, asked together within one {@link LOSS_BEFORE_MOVE_MS}. */
  async #lossesBeforeMove(batch: readonly Taken[]): Promise<void> {
    const asking = batch.filter((taken) => taken.askLoss);
    if (asking.length === 0) return;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, LOSS_BEFORE_MOVE_MS);
      timer.unref();
    });
    const losses = Promise.all(asking.map((taken) => this.#takeLoss(taken).catch(() => undefined)));
    await Promise.race([losses, late]).finally(() => {
      clearTimeout(timer);
    });
  }

  /**
   * Outages explain more returns of a message than are ever excused: the rest count toward the
   * crash limit (a handler that drops its own connection would otherwise run for ever).
   */
  #warnCapped(queue: string, messageId: string | undefined): void {
    this.#context.logger.warn(
      `A message came back from more connection drops than are excused (${String(MAX_EXCUSED_ENDS)}): its further returns count as unsettled ends toward the crash limit. If no outage is under way, its handler may block the event loop past twice the heartbeat or run past consumer_timeout`,
      { endpoint: this.#context.endpoint, queue, messageId },
    );
  }

  /** `taken` is no longer out (settled, or held here for later). */
  #release(taken: Taken): void {
    if (taken.id !== undefined) {
      this.#context.forget(taken.id);
      taken.id = undefined;
      this.#out = Math.max(0, this.#out - 1);
    }
    this.#held.delete(taken);
    this.#notify();
  }

  /** Puts `taken` back as a copy carrying its facts, its outage returns left out (see {@link #lossBeforeMove}). */
  async #moveBack(taken: Taken): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        await this.#lossBeforeMove(taken);
        await this.#context.moveBack(taken, taken.facts);
        break;
      } catch (error) {
        if (attempt === 0) {
          this.#context.logger.warn('A RabbitMQ receiver could not put a message back; trying again', {
            queue: taken.role.queue,
            error: error instanceof Error ? error.message : String(error),
          });
        }
      }
      if (!this.holds(taken)) return; // Its channel dropped: RabbitMQ gives it again.
      if (this.#ending && attempt > 0) {
        // Stopping: left unacked, it returns with the channel, which closes without it.
        this.#held.delete(taken);
        this.#maybeClose();
        return;
      }
      if (!this.#ending) await sleep(systemClock, 1_000, this.#stop.signal);
      if (!this.holds(taken)) return;
      const due = taken.facts.notBefore === undefined || taken.facts.notBefore <= Date.now();
      if (!this.#ending && due) {
        // Waits here again, where the sweep (or the hand-out) gives it back once more.
        this.#ready.push(taken.role.queue, taken);
        this.#notify();
        return;
      }
    }
    this.#held.delete(taken);
    this.#maybeClose();
  }

  /**
   * Stops the unordered queues' consumers (a partition queue's consumer stays until the channel
   * closes, so its next consumer starts after this one's last message settled) and gives back the
   * unordered messages not handed out, as copies.
   */
  async #giveBack(): Promise<void> {
    const channel = this.#channel;
    const tags = this.#unorderedConsumers.splice(0);
    if (channel !== undefined) {
      await Promise.all(tags.map((tag) => channel.cancel(tag).catch(() => undefined)));
    }
    const waiting = this.#ready.drain();
    for (const taken of waiting) taken.cancelTimer?.();
    await Promise.all(
      waiting.filter((taken) => taken.lane === undefined).map((taken) => this.#moveBack(taken)),
    );
  }

  /**
   * Resolves once no batch is being moved to the tail and no lane waits for its copies (they are
   * back, held here), or the channel is gone, or the wait for copies set when ending is over (at
   * most {@link MAX_ROTATION_WAIT_MS}).
   */
  #movesDone(): Promise<void> {
    // The wait set when the receiver ended, if it awaited copies then.
    if (this.#rotationsUntil === 0)
      this.#rotationsUntil = Date.now() + Math.min(this.#context.timeoutMs, MAX_ROTATION_WAIT_MS);
    const until = this.#rotationsUntil;
    return new Promise<void>((resolve) => {
      const check = (): void => {
        const done =
          this.#ended ||
          this.#channel === undefined ||
          Date.now() >= until ||
          (this.#moving === 0 && this.#rotating.size === 0);
        if (!done) return;
        clearTimeout(timer);
        this.#closeWaiters.delete(check);
        resolve();
      };
      const timer = setTimeout(check, Math.max(0, until - Date.now()) + 10);
      timer.unref();
      this.#closeWaiters.add(check);
      check();
    });
  }

  /** Once ending and nothing is out: closes the channel (ordered messages held return in order). */
  #maybeClose(): void {
    for (const check of [...this.#closeWaiters]) check();
    if (!this.#ending || this.#ended || this.#out > 0 || this.#moving > 0) return;
    for (const taken of this.#held) if (taken.lane === undefined) return;
    // A key moving to the tail: its copies come back first (held, they return to the head in order
    // with the channel), for a bounded time.
    if (this.#rotating.size > 0 && this.#channel !== undefined && Date.now() < this.#rotationsUntil) return;
    void this.#closeChannel();
  }

  /**
   * Closes the channel once; every caller waits for the same close, so the broker's close never
   * closes the connection before the channel's close-ok, which would send the last acks' messages
   * back to their queue.
   */
  #closeChannel(): Promise<void> {
    this.#channelClosing ??= this.#closeChannelOnce();
    return this.#channelClosing;
  }

  async #closeChannelOnce(): Promise<void> {
    this.#ended = true;
    this.#stop.abort();
    const channel = this.#channel;
    this.#channel = undefined;
    // The acks of this turn go before the close.
    this.#acks?.flush();
    this.#acks = undefined;
    await channel?.close().catch(() => undefined);
    this.#context.ended(this);
  }

  /** Read through a call: end() flips it while the run loop awaits. */
  #isEnding(): boolean {
    return this.#ending;
  }

  #notify(): void {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }

  /** Keeps a channel consuming the endpoint's queues until the receiver ends. */
  async #run(): Promise<void> {
    const sweep = setInterval(
      () => {
        this.#sweep();
      },
      Math.max(250, Math.min(60_000, this.#context.holdLimitMs / 4)),
    );
    sweep.unref();
    try {
      await this.#consume();
    } finally {
      clearInterval(sweep);
    }
  }

  async #consume(): Promise<void> {
    let failed = false;
    while (!this.#ending) {
      if (failed) {
        await this.#context.declare().catch((error: unknown) => {
          this.#context.logger.warn('A RabbitMQ receiver could not declare its queues again', {
            endpoint: this.#context.endpoint,
            error: error instanceof Error ? error.message : String(error),
          });
        });
        failed = false;
      }
      let channel: Channel;
      try {
        channel = await this.#context.connection.openChannel(this.#context.timeoutMs, 'receiving');
      } catch (error) {
        if (this.#isEnding()) return;
        this.#context.logger.warn('A RabbitMQ receiver is waiting for its connection', {
          endpoint: this.#context.endpoint,
          error: error instanceof Error ? error.message : String(error),
        });
        await sleep(systemClock, 1_000, this.#stop.signal);
        continue;
      }
      if (this.#isEnding()) {
        await channel.close().catch(() => undefined);
        return;
      }
      const closed = new Promise<void>((resolve) => {
        channel.once('close', resolve);
      });
      let closedBy: unknown;
      channel.once('error', (error: unknown) => {
        closedBy = error;
      });
      this.#channel = channel;
      const acks = new AckCoalescer(channel);
      this.#acks = acks;
      this.#channelOpenedAt = Date.now();
      this.#recentlyAcked.clear();
      this.#unorderedConsumers.length = 0;
      try {
        // Per consumer (not global): each queue's consumer gets the prefetch set when it starts. A
        // partition queue reads further ahead, so that a key waiting for its retry (its backlog held
        // here) does not fill the window the other keys of the partition need.
        let window = 0;
        for (const role of this.#context.roles) {
          const wanted = role.ordered ? this.#context.partitionPrefetch : this.#context.prefetch;
          if (wanted !== window) {
            await channel.prefetch(wanted, false);
            window = wanted;
          }
          const { consumerTag } = await channel.consume(
            role.queue,
            (message) => {
              if (message === null) {
                // The queue was deleted: start over on a new channel, declaring it again.
                failed = true;
                void channel.close().catch(() => undefined);
              } else if (channel === this.#channel) {
                this.receive(message, role, channel);
              }
            },
            { noAck: false },
          );
          if (role.ordered) continue;
          // Ended meanwhile: #giveBack cancelled the consumers it knew of, not this one.
          if (this.#isEnding()) await channel.cancel(consumerTag);
          else this.#unorderedConsumers.push(consumerTag);
        }
      } catch (error) {
        // Ended meanwhile: its channel was closed under the consume.
        if (this.#isEnding()) return;
        failed = true;
        this.#context.logger.warn('A RabbitMQ receiver could not consume its queues; trying again', {
          endpoint: this.#context.endpoint,
          error: error instanceof Error ? error.message : String(error),
        });
        await channel.close().catch(() => undefined);
      }
      await Promise.race([closed, this.#stopped]);
      if (this.#channel !== channel || this.#isEnding()) return;
      // The channel dropped: what it held comes back from RabbitMQ; the deliveries out are stale.
      this.#channel = undefined;
      // RabbitMQ's consumer timeout: the delivery held longest (a handler that ran past it) counts
      // as an unsettled end, as a lock lost on Redis does; the rest of the channel is an outage.
      const overdue = isConsumerTimeout(closedBy) ? this.#heldLongest(channel) : undefined;
      if (isConsumerTimeout(closedBy)) {
        this.#context.logger.warn(
          "RabbitMQ closed a receiver's channel: a delivery stayed unacknowledged past the server's consumer_timeout (a handler ran longer). That delivery counts as an unsettled end (as a crash); the channel's other messages come back as after an outage. Raise consumer_timeout in rabbitmq.conf above the longest handler run",
          {
            endpoint: this.#context.endpoint,
            queue: overdue?.role.queue,
            messageId: overdue?.facts.messageId,
            heldMs: overdue === undefined ? undefined : Date.now() - overdue.takenAt,
            error: closedBy instanceof Error ? closedBy.message : String(closedBy),
          },
        );
      }
      acks.flush();
      this.#acks = undefined;
      this.#loseAll(channel, !this.#simulatingCrash, overdue);
      this.#simulatingCrash = false;
      this.#dropAll();
      await sleep(systemClock, 200, this.#stop.signal);
    }
  }

  /**
   * The channel dropped under a live receiver (the connection or RabbitMQ went away): what it held
   * goes back to its queues as outage returns, remembered so that they spend no attempt (with a
   * delivery ledger, on their ledger entries too, for any process that takes them), and so may what
   * it acked last (the ack may have been lost with the connection; with a ledger such a copy is
   * settled `done` there, a duplicate when it comes back). A simulated crash (`outage` false)
   * counts, and so does the return of `overdue` (RabbitMQ's consumer timeout fired for it); only
   * the outage returns excused before carry on.
   */
  #loseAll(channel: Channel, outage: boolean, overdue?: Taken): void {
    const now = Date.now();
    const acked = [...this.#recentlyAcked].filter(([, at]) => now - at <= RECENT_ACK_MS);
    this.#recentlyAcked.clear();
    // An original moved to the tail whose ack may be lost with the channel: when it comes back, its
    // copy is at the tail already.
    for (const [taken] of acked) if (taken.channel === channel) this.#supersede(taken);
    const held = [...this.#held].filter((taken) => taken.channel === channel);
    const lose = (taken: Taken, facts: boolean): void => {
      this.#context.outageReturns.lose(
        taken.role.queue,
        taken.facts.messageId,
        deliveryCountOf(taken.message.properties),
        taken.excused,
        now,
        outage && taken !== overdue,
        // The facts of a message held (an ordered retry's failures live only here) carry on.
        facts ? { token: taken.facts.token, facts: taken.facts } : undefined,
      );
    };
    for (const taken of held) lose(taken, true);
    for (const [taken] of acked) if (taken.channel === channel) lose(taken, false);
    if (this.#context.recordLosses === undefined) return;
    // After a crash the return counts: recorded as if held after it, only the ends excused before
    // carry on (nothing to record when there are none).
    const outageFor = (taken: Taken): boolean => outage && taken !== overdue;
    const lost: LostTaken[] = held
      .filter((taken) => taken.facts.token !== undefined && (outageFor(taken) || taken.excused > 0))
      .map((taken) => ({
        taken,
        deliveryCount: deliveryCountOf(taken.message.properties) + (outageFor(taken) ? 0 : 1),
        excused: taken.excused,
        droppedAt: now,
      }));
    if (lost.length > 0) {
      this.#recordingLosses = this.#recordingLosses.then(() => this.#recordLosses(lost));
    }
  }

  /**
   * Records `lost` in the ledger, best effort: a ledger that cannot be reached is asked again every
   * second while the receiver runs (a process that takes a copy before then counts its return),
   * for the copies not recorded yet, one by one; an error that asking again cannot mend (a bad
   * argument, an outdated schema, a closed ledger) ends it. Each loss carries its drop time, so a
   * write that lands after another process took the copy back records nothing.
   */
  async #recordLosses(lost: readonly LostTaken[]): Promise<void> {
    const record = this.#context.recordLosses;
    if (record === undefined) return;
    let warned = false;
    let pending = lost;
    for (let attempt = 0; ; attempt++) {
      let failure: unknown;
      if (attempt === 0) {
        try {
          await record(pending);
          return;
        } catch (error) {
          failure = error;
        }
      } else {
        const results = await Promise.allSettled(pending.map((one) => record([one])));
        const failed = results.flatMap((result, i) => (result.status === 'rejected' ? [i] : []));
        const first = results.find((result) => result.status === 'rejected');
        if (first === undefined) return;
        failure = first.reason;
        pending = failed.map((i) => pending[i]).filter((one) => one !== undefined);
      }
      const message = failure instanceof Error ? failure.message : String(failure);
      if (!isPassing(failure)) {
        this.#context.logger.error(
          'A RabbitMQ receiver could not record the messages it held as outage returns in its delivery ledger; their returns count as unsettled ends',
          { endpoint: this.#context.endpoint, messages: pending.length, error: message },
        );
        return;
      }
      if (!warned) {
        warned = true;
        this.#context.logger.warn(
          'A RabbitMQ receiver could not record the messages it held as outage returns in its delivery ledger; trying again',
          { endpoint: this.#context.endpoint, error: message },
        );
      }
      if (this.#isEnding()) return;
      await sleep(systemClock, 1_000, this.#stop.signal);
    }
  }

  #dropAll(): void {
    // A key moving to the tail keeps waiting for its copies on the next channel (what was queued
    // ahead of them still goes to the tail behind them): first back, to the head of the queue, come
    // the messages the channel held, in order; those of the lane go first.
    for (const [lane, pending] of this.#rotating) {
      const returned = (this.#lanes.get(lane) ?? []).map((taken) => ({
        key: copyKey(taken.facts),
        again: false,
        returned: true,
        copy: { state: 'confirmed' as const },
        at: Date.now(),
      }));
      // A copy never published (the move stopped at the drop) is not awaited: its original comes
      // back with the channel.
      const published = pending.filter(
        (expected) => expected.returned !== true && expected.copy.state !== 'pending',
      );
      if (returned.length + published.length === 0) {
        this.#rotating.delete(lane);
        this.#superseded.delete(lane);
      } else this.#rotating.set(lane, [...returned, ...published]);
    }
    for (const taken of this.#held) this.#supersede(taken);
    for (const taken of this.#held) {
      taken.cancelTimer?.();
      if (taken.id !== undefined) this.#context.forget(taken.id);
    }
    this.#held.clear();
    this.#ready.drain();
    this.#lanes.clear();
    this.#out = 0;
    this.#notify();
  }

  /**
   * Whether `taken`, an original whose copy is at the tail of its queue, is to be acked and dropped
   * when it comes back (its channel dropped before its ack was sure to reach RabbitMQ).
   */
  #supersede(taken: Taken): void {
    if (!taken.copied || taken.lane === undefined || !this.#rotating.has(taken.lane)) return;
    const superseded = this.#superseded.get(taken.lane) ?? new Set<string>();
    superseded.add(copyKey(taken.facts));
    this.#superseded.set(taken.lane, superseded);
  }

  /**
   * Gives back what this receiver has held unacked for `holdLimitMs` without handing it out, before
   * RabbitMQ's consumer timeout closes the channel over it: an unordered message as a copy (as an
   * early one goes back), and the waiting messages of an ordered lane as copies to the tail of
   * their queue, in their order, which come back here in turn (a retry keeps its time, failures
   * and history). A lane with copies still to come back moves what it has too: those copies then
   * arrive first, and go round once more, behind.
   */
  #sweep(): void {
    const channel = this.#channel;
    if (this.#ending || channel === undefined) return;
    const oldest = Date.now() - this.#context.holdLimitMs;
    // Copies not back long after they were awaited (another process took the queue after a drop,
    // the queue was purged) are no longer awaited.
    const stale = Date.now() - 2 * this.#context.holdLimitMs;
    for (const [lane, pending] of this.#rotating) {
      const fresh = pending.filter((expected) => expected.at > stale);
      if (fresh.length === pending.length) continue;
      if (fresh.length > 0) this.#rotating.set(lane, fresh);
      else {
        this.#rotating.delete(lane);
        this.#superseded.delete(lane);
      }
    }
    for (const [lane, entries] of this.#lanes) {
      // The head out to a handler stays: it cannot be renewed.
      const waiting = entries[0]?.id === undefined ? [...entries] : entries.slice(1);
      if (waiting.some((taken) => taken.takenAt <= oldest)) this.#rotate(lane, entries);
    }
    const overdue = this.#ready.takeWhere(
      (taken) => taken.lane === undefined && taken.takenAt <= oldest && taken !== this.#admitting,
    );
    for (const taken of overdue) void this.#moveBack(taken);
  }

  /**
   * Moves the waiting messages of `lane` (all but a head out to a handler) to the tail of their
   * queue, in order; false when it cannot now (one is being admitted, or is of a dropped channel).
   */
  #rotate(lane: string, entries: Taken[]): boolean {
    const channel = this.#channel;
    const waiting = entries[0]?.id === undefined ? [...entries] : entries.slice(1);
    if (waiting.length === 0 || channel === undefined) return false;
    if (waiting.some((taken) => taken === this.#admitting || taken.channel !== channel)) return false;
    if (waiting.length === entries.length) this.#lanes.delete(lane);
    else entries.length = 1;
    for (const taken of waiting) {
      taken.cancelTimer?.();
      taken.cancelTimer = undefined;
      this.#ready.remove(taken.role.queue, taken);
    }
    // Copies still to come back (a full window kept them out) are behind these in the key's
    // order but ahead of their copies in the queue: each goes to the tail once more on arrival.
    const copies = waiting.map((): CopyState => ({ state: 'pending' }));
    const now = Date.now();
    this.#rotating.set(lane, [
      ...(this.#rotating.get(lane) ?? []).map((expected) => ({
        ...expected,
        again: true,
        returned: undefined,
      })),
      ...waiting.map((taken, i) => ({
        key: copyKey(taken.facts),
        again: false,
        copy: copies[i] ?? { state: 'pending' as const },
        at: now,
      })),
    ]);
    this.#moveToTail(waiting, copies);
    return true;
  }

  /**
   * Whether `taken`, just taken from the ready lists, waited here `holdLimitMs` or longer since
   * RabbitMQ delivered it (its consumer timeout counts from then): if so it is not handed out, so
   * every handler has at least `consumer_timeout` minus `holdLimitMs`; it goes back as the sweep
   * gives it back (an unordered one as a copy, an ordered one's lane to the tail), for a fresh
   * delivery.
   */
  #tooOld(taken: Taken): boolean {
    if (taken.takenAt > Date.now() - this.#context.holdLimitMs) return false;
    if (!this.holds(taken)) return true;
    if (taken.lane === undefined) {
      void this.#moveBack(taken);
      return true;
    }
    const entries = this.#lanes.get(taken.lane);
    if (entries?.[0] !== taken || !this.#rotate(taken.lane, entries)) return false;
    return true;
  }

  /**
   * Copies `batch` (ordered messages of one lane, in order) to the tail of their queue after the
   * batches before it, then acks them. When a copy cannot be published, the channel is closed:
   * every original still unacked goes back to the head of its queue in order (an outage return),
   * and a copy published already is a later duplicate.
   */
  #moveToTail(batch: readonly Taken[], copies: readonly CopyState[]): void {
    this.#moving++;
    this.#tail = this.#tail
      .then(async () => {
        const channel = batch[0]?.channel;
        try {
          await this.#lossesBeforeMove(batch);
          for (const [i, taken] of batch.entries()) {
            // Its channel dropped: the rest come back to the head of the queue, in order.
            if (taken.channel !== this.#channel) return;
            const copy = copies[i];
            if (copy !== undefined) copy.state = 'publishing';
            await this.#context.copyToTail(taken);
            if (copy !== undefined) copy.state = 'confirmed';
            taken.copied = true;
            // Its channel dropped while the copy was published: the original comes back too.
            if (taken.channel !== this.#channel) this.#supersede(taken);
          }
        } catch (error) {
          if (channel === undefined || channel !== this.#channel) return;
          this.#context.logger.warn(
            'A RabbitMQ receiver could not move messages held too long to the tail of their queue; their channel is closed so they return in order',
            {
              queue: batch[0]?.role.queue,
              error: error instanceof Error ? error.message : String(error),
            },
          );
          await channel.close().catch(() => undefined);
          return;
        }
        let acked = 0;
        for (const taken of batch) {
          if (!this.#held.delete(taken)) continue;
          void this.ackMessage(taken);
          acked++;
        }
        if (acked > 0) {
          this.#context.logger.debug(
            'A RabbitMQ receiver moved messages of a key to the tail of their queue',
            {
              queue: batch[0]?.role.queue,
              lane: batch[0]?.lane,
              messages: acked,
            },
          );
        }
      })
      .finally(() => {
        this.#moving--;
        this.#maybeClose();
      });
  }

  /** The message held longest from `channel`: the one RabbitMQ's consumer timeout fired for. */
  #heldLongest(channel: Channel): Taken | undefined {
    let longest: Taken | undefined;
    for (const taken of this.#held) {
      if (taken.channel === channel && (longest === undefined || taken.takenAt < longest.takenAt))
        longest = taken;
    }
    return longest;
  }

  /** Test hook: the channel drops as if its process died (an unsettled end that counts). */
  async dropChannel(): Promise<void> {
    if (this.#channel === undefined) return;
    this.#simulatingCrash = true;
    await this.#channel.close().catch(() => undefined);
  }
}

/** Errors of a ledger that asking again cannot mend. */
const LASTING_LEDGER_ERRORS: ReadonlySet<string> = new Set([
  'invalid-argument',
  'schema-outdated',
  'store-closed',
]);

/** Whether a ledger's failure may pass (an outage): any error but a HarrierError of a lasting kind. */
function isPassing(error: unknown): boolean {
  return !(error instanceof HarrierError && LASTING_LEDGER_ERRORS.has(error.code));
}

/** Whether a channel was closed by RabbitMQ's consumer timeout (406, "delivery acknowledgement ... timed out"). */
function isConsumerTimeout(error: unknown): boolean {
  return error instanceof Error && /delivery acknowledgement on channel \d+ timed out/i.test(error.message);
}

/** A copy a lane waits for: its {@link copyKey}, and whether it goes to the tail once more. */
interface Expected {
  readonly key: string;
  readonly again: boolean;
  /** Where its copy is (shared by the entries of one copy). */
  readonly copy: CopyState;
  /** When it was first awaited (ms since the epoch): {@link RabbitMqReceiver.#sweep} forgets it after `2 × holdLimitMs`. */
  readonly at: number;
  /** Held by a channel that dropped: comes back to the head of the queue, ahead of the copies. */
  readonly returned?: boolean;
}

/** A copy to the tail: not published yet, being published, or confirmed by RabbitMQ. */
interface CopyState {
  state: 'pending' | 'publishing' | 'confirmed';
}

/** What identifies a copy of a message moved to the tail of its queue, within its lane. */
function copyKey(facts: CarriedFacts): string {
  return JSON.stringify([facts.messageId ?? null, facts.token ?? null]);
}

/** The queue a delivery reports: `cmd~<type>`, or `evt~<endpoint>~<handler>`. */
export function logicalQueue(endpoint: string, role: QueueRole, facts: CarriedFacts): string {
  if (role.kind === 'event') return subscriptionQueue(endpoint, role.handler ?? '');
  return commandQueue(role.type ?? facts.type ?? '');
}

/** Resolves when `signal` aborts (at once if it has). */
function aborted(signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    signal.addEventListener(
      'abort',
      () => {
        resolve();
      },
      { once: true },
    );
  });
}
