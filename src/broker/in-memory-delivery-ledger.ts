import { systemClock, type Clock } from '../clock/clock.js';
import { HarrierError } from '../errors/harrier-error.js';
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
} from './delivery-ledger.js';
import {
  checkCopy,
  checkLostCopy,
  checkMessageId,
  checkMs,
  checkQueue,
  checkToken,
  mergedExcusedEnds,
} from './ledger-arguments.js';

/** The token a queue delivers for a message id, and where its copy is. */
interface Claim {
  readonly token: string;
  readonly state: 'active' | 'waiting' | 'done';
  readonly expiresAt: number;
  /** When a receiver last admitted the token (undefined when it never did: a replay not taken yet). */
  readonly admittedAt?: number;
}

/** A copy's latest loss in an outage (`lost`). */
interface Loss {
  readonly token: string;
  readonly deliveryCount: number;
  readonly excusedEnds: number;
  readonly lostAt: number;
  readonly expiresAt: number;
}

/** A copy of a message published with a `deliverAt`. */
interface ScheduledCopy {
  readonly queue: string;
  readonly token: string;
  state: 'pending' | 'taken' | 'cancelled';
  readonly deliverAt: number;
  readonly expiresAt: number;
}

/** How often expired records are swept out, in the clock's ms. */
const SWEEP_EVERY_MS = 60_000;

/**
 * A {@link DeliveryLedger} in this process's memory: for tests, and for a broker whose every
 * publisher and receiver is in one process.
 *
 * @remarks
 * Expired records are swept out at most once a minute of the clock, on the next call.
 */
export class InMemoryDeliveryLedger implements DeliveryLedger {
  readonly #clock: Clock;
  readonly #retentionMs: number;
  /** By `<queue> NUL <messageId>`. */
  readonly #claims = new Map<string, Claim>();
  /** By message id, then `<queue> NUL <token>`. */
  readonly #scheduled = new Map<string, Map<string, ScheduledCopy>>();
  /** By `<queue> NUL <messageId>`, beside its claim. */
  readonly #losses = new Map<string, Loss>();
  #nextSweepAt = 0;
  #closed = false;

  /** @throws HarrierError `invalid-argument` for a `scheduledRetentionMs` that is not whole ms >= 0. */
  constructor(options: DeliveryLedgerOptions = {}) {
    this.#clock = options.clock ?? systemClock;
    this.#retentionMs = options.scheduledRetentionMs ?? DEFAULT_SCHEDULED_RETENTION_MS;
    checkMs('scheduledRetentionMs', this.#retentionMs);
  }

  admit(copy: LedgerCopy, windowMs: number): Promise<AdmitVerdict> {
    return this.#run(() => {
      checkCopy(copy);
      checkMs('windowMs', windowMs);
      const now = this.#now();
      const scheduled = this.#scheduled.get(copy.messageId)?.get(copyKey(copy.queue, copy.token));
      if (scheduled !== undefined && scheduled.expiresAt > now) {
        if (scheduled.state === 'cancelled') return 'cancelled';
        scheduled.state = 'taken';
      }
      const key = claimKey(copy);
      const claim = this.#live(key, now);
      if (claim !== undefined && (claim.token !== copy.token || claim.state === 'done')) return 'duplicate';
      this.#claims.set(key, {
        token: copy.token,
        state: 'active',
        expiresAt: now + windowMs,
        admittedAt: now,
      });
      return 'deliver';
    });
  }

  settle(copy: LedgerCopy, settlement: LedgerSettlement, windowMs: number): Promise<boolean> {
    return this.#run(() => {
      checkCopy(copy);
      checkMs('windowMs', windowMs);
      const now = this.#now();
      const key = claimKey(copy);
      const claim = this.#live(key, now);
      if (claim === undefined || claim.token !== copy.token || claim.state === 'done') return false;
      this.#claims.set(key, { ...claim, state: settlement, expiresAt: now + windowMs });
      this.#losses.delete(key);
      return true;
    });
  }

  lost(copies: readonly LostCopy[], windowMs: number): Promise<number> {
    return this.#run(() => {
      copies.forEach(checkLostCopy);
      checkMs('windowMs', windowMs);
      const now = this.#now();
      let recorded = 0;
      for (const copy of copies) {
        const key = claimKey(copy);
        const claim = this.#live(key, now);
        if (claim !== undefined && (claim.token !== copy.token || claim.state === 'done')) continue;
        const droppedAt = Math.min(now, copy.droppedAt ?? now);
        // Admitted since the drop (taken back, its loss taken): a late record would excuse a crash.
        if (claim !== undefined && claim.admittedAt !== undefined && claim.admittedAt > droppedAt) continue;
        const { token, deliveryCount } = copy;
        const expiresAt = now + windowMs;
        const before = this.#losses.get(key);
        const excusedEnds =
          before !== undefined && before.token === token && before.expiresAt > now
            ? mergedExcusedEnds(before, copy)
            : copy.excusedEnds;
        this.#losses.set(key, { token, deliveryCount, excusedEnds, lostAt: droppedAt, expiresAt });
        recorded++;
      }
      return recorded;
    });
  }

  takeLoss(copy: LedgerCopy): Promise<OutageLoss | undefined> {
    return this.#run(() => {
      checkCopy(copy);
      const now = this.#now();
      const key = claimKey(copy);
      const loss = this.#losses.get(key);
      if (loss === undefined || loss.token !== copy.token || loss.expiresAt <= now) return undefined;
      this.#losses.delete(key);
      const { deliveryCount, excusedEnds } = loss;
      return { deliveryCount, excusedEnds, msAgo: Math.max(0, now - loss.lostAt) };
    });
  }

  replace(copy: LedgerCopy, windowMs: number): Promise<ReplaceOutcome> {
    return this.#run(() => {
      checkCopy(copy);
      checkMs('windowMs', windowMs);
      const now = this.#now();
      const key = claimKey(copy);
      const claim = this.#live(key, now);
      if (claim?.state === 'active') return 'in-flight';
      if (claim?.state === 'waiting') return 'held';
      this.#claims.set(key, { token: copy.token, state: 'waiting', expiresAt: now + windowMs });
      return 'replaced';
    });
  }

  scheduled(messageId: string, token: string, queues: readonly string[], deliverAt: number): Promise<void> {
    return this.#run(() => {
      checkMessageId(messageId);
      checkToken(token);
      queues.forEach(checkQueue);
      checkMs('deliverAt', deliverAt);
      const now = this.#now();
      const copies = this.#scheduled.get(messageId) ?? new Map<string, ScheduledCopy>();
      this.#scheduled.set(messageId, copies);
      const expiresAt = Math.max(now, deliverAt) + this.#retentionMs;
      for (const queue of queues) {
        const key = copyKey(queue, token);
        const known = copies.get(key);
        if (known !== undefined && known.expiresAt > now) continue;
        copies.set(key, { queue, token, state: 'pending', deliverAt, expiresAt });
      }
    });
  }

  cancel(messageId: string): Promise<number> {
    return this.#run(() => {
      checkMessageId(messageId);
      const now = this.#now();
      const counted = new Set<string>();
      for (const copy of this.#scheduled.get(messageId)?.values() ?? []) {
        if (copy.expiresAt <= now || copy.state !== 'pending' || copy.deliverAt <= now) continue;
        copy.state = 'cancelled';
        const claim = this.#live(claimKey({ queue: copy.queue, messageId }), now);
        if (claim === undefined || claim.token === copy.token) counted.add(copy.queue);
      }
      return counted.size;
    });
  }

  close(): Promise<void> {
    this.#closed = true;
    this.#claims.clear();
    this.#scheduled.clear();
    this.#losses.clear();
    return Promise.resolve();
  }

  #live(key: string, now: number): Claim | undefined {
    const claim = this.#claims.get(key);
    return claim !== undefined && claim.expiresAt > now ? claim : undefined;
  }

  /** The clock's time, sweeping expired records out when a sweep is due. */
  #now(): number {
    const now = this.#clock.now();
    if (now < this.#nextSweepAt) return now;
    this.#nextSweepAt = now + SWEEP_EVERY_MS;
    for (const [key, claim] of this.#claims) if (claim.expiresAt <= now) this.#claims.delete(key);
    for (const [key, loss] of this.#losses) if (loss.expiresAt <= now) this.#losses.delete(key);
    for (const [messageId, copies] of this.#scheduled) {
      for (const [key, copy] of copies) if (copy.expiresAt <= now) copies.delete(key);
      if (copies.size === 0) this.#scheduled.delete(messageId);
    }
    return now;
  }

  #run<T>(body: () => T): Promise<T> {
    if (this.#closed) {
      return Promise.reject(
        new HarrierError(
          'store-closed',
          'The in-memory delivery ledger is closed: create a new InMemoryDeliveryLedger',
        ),
      );
    }
    try {
      return Promise.resolve(body());
    } catch (error) {
      return Promise.reject(error instanceof Error ? error : new Error(String(error)));
    }
  }
}

function claimKey(copy: Pick<LedgerCopy, 'queue' | 'messageId'>): string {
  return `${copy.queue}\u0000${copy.messageId}`;
}

function copyKey(queue: string, token: string): string {
  return `${queue}\u0000${token}`;
}
