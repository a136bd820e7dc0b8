import { toErrorInfo, type ErrorInfo } from '../broker/message-broker.js';
import type { Clock } from '../clock/clock.js';
import { HarrierError } from '../errors/harrier-error.js';
import type { Logger } from '../logging/logger.js';

/** Options of the pause that an outage of a dependency puts an endpoint (or a projection lane) in. */
export interface OutageOptions {
  /**
   * The first wait before a paused endpoint tries one message again (half-open), in ms; it doubles
   * after each probe that meets the outage still.
   * @defaultValue 1000
   */
  readonly probeBaseMs?: number;
  /**
   * The longest wait between two probes, in ms: how late, at worst, an endpoint resumes after its
   * dependency came back.
   * @defaultValue 15000
   */
  readonly probeMaxMs?: number;
}

/** What paused: an endpoint's dispatcher, or one lane of a projection. */
export interface PauseSubject {
  readonly endpoint: string;
  /** The projection lane that paused, when it is one (projections pause lane by lane). */
  readonly projection?: { readonly name: string; readonly topic: string; readonly partition: number };
}

/** An endpoint or lane stopped taking messages because a dependency is unreachable. */
export interface PausedEvent extends PauseSubject {
  /** The failure that said so. */
  readonly error: ErrorInfo;
  /** When the next probe goes, in ms from now. */
  readonly probeInMs: number;
}

/** A paused endpoint or lane got a message through: its dependency answers again. */
export interface ResumedEvent extends PauseSubject {
  /** How long it was paused, in ms. */
  readonly pausedMs: number;
  /** Probes that met the outage before one got through. */
  readonly failedProbes: number;
}

/** Who hears of pauses and resumptions (the bus's hooks and telemetry). */
export interface OutageListener {
  paused(event: PausedEvent): void;
  resumed(event: ResumedEvent): void;
}

/** The longest delay a Node timer takes as given (2^31 - 1 ms). */
const MAX_TIMER_MS = 2_147_483_647;

/** Checks {@link OutageOptions}. @throws HarrierError `invalid-option` naming the fix. */
export function resolveOutageOptions(options: OutageOptions | undefined): Required<OutageOptions> {
  const probeBaseMs = options?.probeBaseMs ?? 1_000;
  const probeMaxMs = options?.probeMaxMs ?? 15_000;
  if (!Number.isFinite(probeBaseMs) || probeBaseMs <= 0 || probeBaseMs > MAX_TIMER_MS) {
    throw new HarrierError(
      'invalid-option',
      `outage.probeBaseMs is ${probeBaseMs}: use a number of milliseconds above 0 and at most ${MAX_TIMER_MS}`,
    );
  }
  if (!Number.isFinite(probeMaxMs) || probeMaxMs < probeBaseMs || probeMaxMs > MAX_TIMER_MS) {
    throw new HarrierError(
      'invalid-option',
      `outage.probeMaxMs is ${probeMaxMs}: use a number of milliseconds from probeBaseMs (${probeBaseMs}) to ${MAX_TIMER_MS}`,
    );
  }
  return { probeBaseMs, probeMaxMs };
}

/**
 * The circuit breaker of one endpoint or projection lane: closed (taking messages), open (paused,
 * waiting for its next probe) or half-open (one message, the probe, is let through).
 *
 * @remarks
 * The probe is a real message, not a health check of some dependency: Harrier cannot know which
 * dependency a handler needs, and a message that gets through proves the path works end to end. A
 * probe that fails transiently opens the breaker again for twice as long (up to `probeMaxMs`); a
 * probe that succeeds, or fails as a message failure (the dependency answered), closes it.
 */
export class OutageBreaker {
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #subject: PauseSubject;
  readonly #options: Required<OutageOptions>;
  readonly #listener: OutageListener | undefined;
  #state: 'closed' | 'open' | 'half-open' = 'closed';
  #pausedAt = 0;
  #failedProbes = 0;
  #probeAt = 0;
  /** The probe is out (half-open): nobody else may pass until it ends. */
  #probing = false;
  readonly #waiters = new Set<() => void>();
  #cancelTimer: (() => void) | undefined;

  constructor(
    clock: Clock,
    logger: Logger,
    subject: PauseSubject,
    options: Required<OutageOptions>,
    listener?: OutageListener,
  ) {
    this.#clock = clock;
    this.#logger = logger;
    this.#subject = subject;
    this.#options = options;
    this.#listener = listener;
  }

  /** True while paused (open or half-open). */
  isPaused(): boolean {
    return this.#state !== 'closed';
  }

  /**
   * Resolves when one more message may be taken: at once while closed; while paused, when the next
   * probe is due and no other probe is out (that caller's message is the probe). Resolves early, as
   * a refusal, when `signal` aborts.
   * @returns true when the caller may take a message, false when `signal` aborted first.
   */
  async admit(signal: AbortSignal): Promise<boolean> {
    for (;;) {
      if (signal.aborted) return false;
      if (this.#state === 'closed') return true;
      if (!this.#probing && this.#clock.now() >= this.#probeAt) {
        this.#state = 'half-open';
        this.#probing = true;
        this.#logger.info('Probing whether the dependency answers again', this.#fields());
        return true;
      }
      await this.#wait(signal);
    }
  }

  /** A message went through (or failed as a message failure): the dependency answers. */
  succeeded(): void {
    if (this.#state === 'closed') return;
    const pausedMs = this.#clock.now() - this.#pausedAt;
    const failedProbes = this.#failedProbes;
    this.#state = 'closed';
    this.#probing = false;
    this.#failedProbes = 0;
    this.#cancelTimer?.();
    this.#cancelTimer = undefined;
    this.#logger.info('Resumed: the dependency answers again', { ...this.#fields(), pausedMs, failedProbes });
    this.#wakeAll();
    this.#listener?.resumed({ ...this.#subject, pausedMs, failedProbes });
  }

  /**
   * A message met an outage: pause (or stay paused, the next probe later). A failure of a message
   * taken before the pause began does not push the next probe back.
   */
  tripped(error: unknown): void {
    const now = this.#clock.now();
    let delay: number;
    if (this.#state === 'closed') {
      this.#state = 'open';
      this.#pausedAt = now;
      this.#failedProbes = 0;
      delay = this.#options.probeBaseMs;
    } else if (this.#probing) {
      this.#failedProbes++;
      this.#state = 'open';
      this.#probing = false;
      delay = Math.min(this.#options.probeMaxMs, this.#options.probeBaseMs * 2 ** this.#failedProbes);
    } else {
      return;
    }
    this.#probeAt = now + delay;
    this.#arm(delay);
    const info = toErrorInfo(error);
    if (this.#failedProbes === 0) {
      this.#logger.warn('Paused: a dependency is unreachable; no attempt is counted while it lasts', {
        ...this.#fields(),
        error: info.message,
        probeInMs: delay,
      });
      this.#listener?.paused({ ...this.#subject, error: info, probeInMs: delay });
    } else {
      this.#logger.warn('Still paused: the probe met the outage', {
        ...this.#fields(),
        error: info.message,
        failedProbes: this.#failedProbes,
        probeInMs: delay,
      });
    }
  }

  /**
   * The probe ended without saying anything of the dependency (abandoned, or its dead letter could
   * not be stored): the next probe goes after the current wait, no longer.
   */
  probeEnded(): void {
    if (!this.#probing) return;
    this.#probing = false;
    this.#state = 'open';
    const delay = Math.min(this.#options.probeMaxMs, this.#options.probeBaseMs * 2 ** this.#failedProbes);
    this.#probeAt = this.#clock.now() + delay;
    this.#arm(delay);
  }

  /** Stops the timer and wakes every waiter (a stop). */
  close(): void {
    this.#cancelTimer?.();
    this.#cancelTimer = undefined;
    this.#wakeAll();
  }

  #arm(delay: number): void {
    this.#cancelTimer?.();
    this.#cancelTimer = this.#clock.setTimer(delay, () => {
      this.#cancelTimer = undefined;
      this.#wakeAll();
    });
  }

  #wait(signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        this.#waiters.delete(done);
        signal.removeEventListener('abort', done);
        resolve();
      };
      this.#waiters.add(done);
      signal.addEventListener('abort', done, { once: true });
    });
  }

  #wakeAll(): void {
    for (const wake of [...this.#waiters]) wake();
  }

  #fields(): Record<string, unknown> {
    const { endpoint, projection } = this.#subject;
    return projection === undefined
      ? { endpoint }
      : { endpoint, projection: projection.name, topic: projection.topic, partition: projection.partition };
  }
}
