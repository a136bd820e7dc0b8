import { MAX_TIMER_MS } from '../clock/timeouts.js';
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
  /**
   * How many probes in a row one message may be, meeting the outage each time, before its attempt
   * counts: the bound that keeps a message whose own failure looks like an outage (a host only it
   * names) from holding a paused endpoint for ever. With the default probe waits, an outage shorter
   * than about 2 minutes spends no attempt even of the message that probes it.
   * @defaultValue 10
   */
  readonly maxProbesPerMessage?: number;
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

/** A paused endpoint or lane got a message through (its dependency answers again), or stopped. */
export interface ResumedEvent extends PauseSubject {
  /** How long it was paused, in ms. */
  readonly pausedMs: number;
  /** Probes that met the outage before one got through. */
  readonly failedProbes: number;
  /** True when the endpoint or lane stopped while paused, rather than getting a message through. */
  readonly stopped: boolean;
}

/** What {@link OutageBreaker.admit} answers: take a message, take it as the probe, or stop. */
export type Admission = 'go' | 'probe' | 'stopped';

/** Who hears of pauses and resumptions (the bus's hooks and telemetry). */
export interface OutageListener {
  paused(event: PausedEvent): void;
  resumed(event: ResumedEvent): void;
}

/** Checks {@link OutageOptions}. @throws HarrierError `invalid-option` naming the fix. */
export function resolveOutageOptions(options: OutageOptions | undefined): Required<OutageOptions> {
  const probeBaseMs = options?.probeBaseMs ?? 1_000;
  const probeMaxMs = options?.probeMaxMs ?? 15_000;
  const maxProbesPerMessage = options?.maxProbesPerMessage ?? 10;
  if (!Number.isInteger(maxProbesPerMessage) || maxProbesPerMessage < 1) {
    throw new HarrierError(
      'invalid-option',
      `outage.maxProbesPerMessage is ${maxProbesPerMessage}: use a whole number of at least 1`,
    );
  }
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
  return { probeBaseMs, probeMaxMs, maxProbesPerMessage };
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
  /** Each resumption moves it on: a message that meets the outage again after one is suspect. */
  #generation = 0;
  /** Stopped: no pause begins and no timer is armed until {@link OutageBreaker.reopen}. */
  #closed = false;
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

  /** How many times the breaker resumed: changes whenever messages got through after a pause. */
  get generation(): number {
    return this.#generation;
  }

  /**
   * Resolves when one more message may be taken: at once while closed (`go`); while paused, when
   * the next probe is due and no other probe is out (`probe`: that caller's message is the probe,
   * and it must end it with {@link OutageBreaker.succeeded}, {@link OutageBreaker.tripped} or
   * {@link OutageBreaker.probeEnded}). Resolves `stopped` as soon as `signal` aborts.
   */
  async admit(signal: AbortSignal): Promise<Admission> {
    for (;;) {
      if (signal.aborted) return 'stopped';
      if (this.#state === 'closed') return 'go';
      if (!this.#probing && this.#clock.now() >= this.#probeAt) {
        this.#state = 'half-open';
        this.#probing = true;
        this.#logger.info('Probing whether the dependency answers again', this.#fields());
        return 'probe';
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
    this.#generation++;
    this.#cancelTimer?.();
    this.#cancelTimer = undefined;
    this.#logger.info('Resumed: the dependency answers again', { ...this.#fields(), pausedMs, failedProbes });
    this.#wakeAll();
    this.#listener?.resumed({ ...this.#subject, pausedMs, failedProbes, stopped: false });
  }

  /**
   * A message met an outage: pause (or stay paused, the next probe later). A failure of a message
   * taken before the pause began does not push the next probe back.
   */
  tripped(error: unknown): void {
    // A stop is under way: what fails during its grace period goes back anyway, and a pause now
    // would outlive the stop.
    if (this.#closed) return;
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

  /**
   * Stops: the timer is cancelled, waiters wake, and a pause ends (reported as resumed with
   * `stopped: true`, so a gauge of paused endpoints goes back to 0).
   */
  close(): void {
    this.#closed = true;
    this.#cancelTimer?.();
    this.#cancelTimer = undefined;
    if (this.#state !== 'closed') {
      const pausedMs = this.#clock.now() - this.#pausedAt;
      const failedProbes = this.#failedProbes;
      this.#state = 'closed';
      this.#probing = false;
      this.#failedProbes = 0;
      this.#logger.info('Stopped while paused', { ...this.#fields(), pausedMs });
      this.#listener?.resumed({ ...this.#subject, pausedMs, failedProbes, stopped: true });
    }
    this.#wakeAll();
  }

  /** Takes messages again after {@link OutageBreaker.close} (a restart), closed. */
  reopen(): void {
    this.#closed = false;
  }

  #arm(delay: number): void {
    if (this.#closed) return;
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
