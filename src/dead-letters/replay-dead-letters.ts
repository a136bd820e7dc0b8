import type { MessageBroker } from '../broker/message-broker.js';
import { systemClock, type Clock } from '../clock/clock.js';
import { HarrierError } from '../errors/harrier-error.js';
import { runObserved } from '../logging/run-observed.js';
import type { DeadLetterRecord, DeadLetterStore, ReplayRecord } from './dead-letter-store.js';
import { runInLanes } from './run-in-lanes.js';
import { TokenBucket } from './token-bucket.js';

/**
 * Why a dead letter was not replayed.
 *
 * - `not-found`: no record has that id.
 * - `already-replayed`: the record was replayed and has not died again since.
 * - `not-replayable`: the record cannot go back (bad input without a message id, kind or type; an
 *   event without a subscription; a query, whose caller is gone).
 * - `store-failed`: the store threw while reading the record.
 * - `redeliver-failed`: the broker threw; nothing was redelivered and the record is still dead.
 * - `mark-failed`: the message was redelivered but the record could not be marked replayed.
 * - `verify-failed`: `verify` threw.
 * - `projection-replay-needs-app`: the record died in a projection fed from an event log, and no
 *   `projections` replayer was given (the CLI): replay it from the application, or rebuild.
 * - `projection-failed`: the projection ran the event again and failed; the record is dead again.
 * - any other string: the refusal reason returned by `verify`.
 */
export type ReplayErrorCode =
  | 'not-found'
  | 'already-replayed'
  | 'not-replayable'
  | 'store-failed'
  | 'redeliver-failed'
  | 'mark-failed'
  | 'verify-failed'
  | 'projection-replay-needs-app'
  | 'projection-failed'
  | (string & {});

/** A dead letter that was replayed, or would be in a dry run. */
export interface ReplaySuccess {
  /** The dead letter's id. */
  readonly id: string;
  readonly ok: true;
  /** True when this was a dry run: the record passed every check and nothing was changed. */
  readonly dryRun?: true;
}

/** A dead letter that was not replayed, and why. */
export interface ReplayFailure {
  /** The dead letter's id. */
  readonly id: string;
  readonly ok: false;
  /** A stable code to branch on. */
  readonly error: ReplayErrorCode;
  /** What went wrong and what to do about it. */
  readonly message: string;
}

/** The outcome of replaying one dead letter. */
export type ReplayResult = ReplaySuccess | ReplayFailure;

/** Why `verify` refused a record: a stable code and what went wrong, naming the fix. */
export interface ReplayRefusal {
  readonly code: string;
  readonly message: string;
}

/**
 * Runs dead letters of projections fed from an event log through their projection again: no broker
 * queue holds those events, so only the application that has the projection's code can replay them.
 */
export interface ProjectionReplayer {
  /** Whether `record` died in a projection this replayer runs. */
  handles(record: DeadLetterRecord): boolean;
  /**
   * Runs the record's event through its projection with fresh attempts. On failure the record is
   * stored dead again (updated, its replay history kept) and a refusal says why.
   */
  replay(record: DeadLetterRecord): Promise<ReplayRefusal | undefined>;
}

/** What telemetry is told of one dead letter going back. */
export interface ReplayTraceInfo {
  readonly record: DeadLetterRecord;
  /** `redeliver`: through the broker to its subscription; `projection`: run through its projection here. */
  readonly via: 'redeliver' | 'projection';
  /** Who replays, as {@link ReplayRunOptions.by} says. */
  readonly by: string | undefined;
}

/**
 * Wraps the replay of one dead letter (harrier/telemetry makes one that traces it); `run` rejects
 * when the broker or the projection refused it.
 */
export interface ReplayTelemetry {
  replay<T>(info: ReplayTraceInfo, run: () => Promise<T>): Promise<T>;
}

/** How one replay runs, chosen per call: what the bus and the CLI pass through from their callers. */
export interface ReplayRunOptions {
  /**
   * Who or what replays, recorded in each record's replay history (`cli`, a user name).
   * @defaultValue not recorded
   */
  readonly by?: string;
  /**
   * Check every record and report what would happen, without redelivering or marking anything.
   * @defaultValue false
   */
  readonly dryRun?: boolean;
  /**
   * Records replayed at once. Records of an ordered type with the same partition key always go back
   * one at a time, in the order of `ids`, whatever this is; other records run in parallel up to it.
   * @defaultValue 1 (one record after the other, in the order of `ids`)
   */
  readonly concurrency?: number;
  /**
   * Most records sent back per second (a token bucket holding one second's worth, paced by `clock`);
   * records refused before sending and dry runs take no token.
   * @defaultValue unlimited
   */
  readonly rate?: number;
  /**
   * Called once per id as soon as its outcome is known (in completion order, before the returned
   * promise resolves), with the record as read for the replay (undefined when it could not be
   * read): drives a progress bar or a page that shows each record's outcome. A throw stops the replay:
   * no further record starts and the returned promise rejects with it.
   * @defaultValue none
   */
  readonly onResult?: (result: ReplayResult, record: DeadLetterRecord | undefined) => void;
  /**
   * Wraps each record's way back (the redelivery, or the projection run), e.g. in a span.
   * @defaultValue none
   */
  readonly telemetry?: ReplayTelemetry;
}

/** Options of {@link replayDeadLetters}. */
export interface ReplayDeadLettersOptions extends ReplayRunOptions {
  /** Where the dead letters are kept. */
  readonly store: DeadLetterStore;
  /** The broker that re-dispatches the messages. */
  readonly broker: MessageBroker;
  /** The dead letters to replay, in the order to redeliver them. */
  readonly ids: readonly string[];
  /**
   * Time source of the replay records and of the `rate` pacing.
   * @defaultValue the system clock
   */
  readonly clock?: Clock;
  /**
   * Checks a record's stored envelope against the signing keys (such as `EnvelopeSigner.verify`):
   * returns why it does not verify, or undefined when it does. A record that does not verify is
   * refused with `signature-invalid`, the reason in its message, and not sent back.
   * @defaultValue signatures are not checked
   */
  readonly verifySignature?: (envelope: string) => string | undefined;
  /**
   * Last check before a record goes back (after `verifySignature`): return a short refusal code (or
   * a {@link ReplayRefusal} with a code and an explanation) to refuse it, or undefined to let it
   * through. A throw refuses it with code `verify-failed`.
   * @defaultValue every record passes
   */
  readonly verify?: (
    record: DeadLetterRecord,
  ) => string | ReplayRefusal | undefined | Promise<string | ReplayRefusal | undefined>;
  /**
   * Replays `projection-failed` records of projections fed from an event log by running the
   * projection (the bus passes its runner). Without it such a record is refused with
   * `projection-replay-needs-app`, since redelivering it through the broker would reach no one.
   * @defaultValue none
   */
  readonly projections?: ProjectionReplayer;
}

/** Counts of a replay's results, for a final line or a page's totals. */
export interface ReplaySummary {
  /** Ids asked for. */
  readonly total: number;
  /** Records sent back (or, in a dry run, that would be). */
  readonly replayed: number;
  /** Records not sent back, except those already replayed. */
  readonly failed: number;
  /** Records skipped because they were already replayed and have not died again. */
  readonly skipped: number;
}

/** Counts `results` as replayed, failed, or skipped (`already-replayed`). */
export function summarizeReplay(results: Iterable<ReplayResult>): ReplaySummary {
  let total = 0;
  let replayed = 0;
  let skipped = 0;
  for (const result of results) {
    total++;
    if (result.ok) replayed++;
    else if (result.error === 'already-replayed') skipped++;
  }
  return { total, replayed, failed: total - replayed - skipped, skipped };
}

const messageOf = (error: unknown): string => (error instanceof Error ? error.message : String(error));

/** Records whose lane is read ahead at once. */
const PLAN_CHUNK = 100;

/**
 * Sends dead letters back to the subscriptions they died in, with the same message id and fresh
 * attempts, and marks them replayed: the one replay behind `bus.replayDeadLetters` and
 * `harrier dlq replay`.
 *
 * @remarks
 * Each id is handled on its own: one that fails never stops the others, and this function never
 * rejects for a single record. Records of an ordered type with the same partition key form a lane
 * and go back one at a time in the order of `ids`; other records run in parallel up to
 * `concurrency`, at most `rate` a second. Each record is read again just before it goes back, so a
 * record replayed meanwhile (or listed twice) is reported `already-replayed`. The message goes back
 * through {@link MessageBroker.redeliver}, so it is handled by a dispatcher of its endpoint like any
 * other delivery and dead-letters again (updating the same record) if it fails again.
 *
 * @returns one result per id, in the order of `ids`; `onResult` sees each one as it is known.
 * @throws HarrierError `invalid-option` for a `concurrency` or `rate` that is not a positive number.
 *
 * @example
 * ```ts
 * const results = await replayDeadLetters({
 *   store, broker, ids, by: 'ops', concurrency: 16, rate: 100,
 *   onResult: (r) => { if (!r.ok) console.error(`${r.id}: ${r.error}: ${r.message}`); },
 * });
 * console.log(summarizeReplay(results));
 * ```
 */
export async function replayDeadLetters(options: ReplayDeadLettersOptions): Promise<ReplayResult[]> {
  const concurrency = options.concurrency ?? 1;
  if (!Number.isSafeInteger(concurrency) || concurrency < 1) {
    throw new HarrierError(
      'invalid-option',
      `replay concurrency ${String(concurrency)} is not a whole number from 1: pass how many records may be replayed at once, e.g. 16`,
    );
  }
  if (options.rate !== undefined && !(Number.isFinite(options.rate) && options.rate > 0)) {
    throw new HarrierError(
      'invalid-option',
      `replay rate ${String(options.rate)} is not a number above 0: pass the most records to send back per second, or leave it out for no limit`,
    );
  }
  const clock = options.clock ?? systemClock;
  const bucket = options.rate === undefined ? undefined : new TokenBucket(options.rate, clock);
  const pace = bucket === undefined ? undefined : () => bucket.take();
  const lanes = await lanesOf(options.store, options.ids);
  const results: ReplayResult[] = [];
  await runInLanes(lanes, concurrency, async (index) => {
    const id = options.ids[index] ?? '';
    const { result, record } = await replayOne(id, options, clock, pace);
    results[index] = result;
    options.onResult?.(result, record);
  });
  return results;
}

/**
 * The lane of each id: its partition key for a record of an ordered type, else its own id (so an id
 * listed twice never runs twice at once). A record that cannot be read here gets its own lane; its
 * replay reads it again and reports why.
 */
async function lanesOf(store: DeadLetterStore, ids: readonly string[]): Promise<string[]> {
  const lanes: string[] = [];
  for (let start = 0; start < ids.length; start += PLAN_CHUNK) {
    const chunk = ids.slice(start, start + PLAN_CHUNK);
    const records = await Promise.all(chunk.map((id) => store.get(id).catch(() => undefined)));
    chunk.forEach((id, i) => {
      const record = records[i];
      lanes.push(record?.ordered === true ? `key:${record.partitionKey ?? ''}` : `id:${id}`);
    });
  }
  return lanes;
}

/** A result and the record it was about (undefined when it could not be read). */
interface Outcome {
  readonly result: ReplayResult;
  readonly record: DeadLetterRecord | undefined;
}

const failure = (id: string, error: ReplayErrorCode, message: string): ReplayFailure => ({
  id,
  ok: false,
  error,
  message,
});

/** Reads one record again and replays it; `pace` waits for the rate limit just before it goes back. */
async function replayOne(
  id: string,
  options: ReplayDeadLettersOptions,
  clock: Clock,
  pace: (() => Promise<void>) | undefined,
): Promise<Outcome> {
  let record: DeadLetterRecord | undefined;
  try {
    record = await options.store.get(id);
  } catch (error) {
    return {
      result: failure(id, 'store-failed', `Could not read dead letter "${id}": ${messageOf(error)}`),
      record: undefined,
    };
  }
  if (record === undefined) {
    return {
      result: failure(
        id,
        'not-found',
        `No dead letter "${id}": check the id; the record may have been removed or purged`,
      ),
      record: undefined,
    };
  }
  return { result: await replayRecord(record, options, clock, pace), record };
}

async function replayRecord(
  record: DeadLetterRecord,
  options: ReplayDeadLettersOptions,
  clock: Clock,
  pace: (() => Promise<void>) | undefined,
): Promise<ReplayResult> {
  const { store, broker } = options;
  const id = record.id;
  const fail = (error: ReplayErrorCode, message: string): ReplayFailure => failure(id, error, message);

  if (record.status === 'replayed') {
    return fail(
      'already-replayed',
      `Dead letter "${id}" was already replayed and has not failed again since; it is kept for its history`,
    );
  }
  const { messageId, kind, type } = record;
  if (messageId === undefined || kind === undefined || type === undefined) {
    return fail(
      'not-replayable',
      `Dead letter "${id}" (reason "${record.reason}") has no message id, kind or type because its bytes never decoded to an envelope, so there is nothing to redeliver: inspect its envelope, republish a corrected message, and remove the record`,
    );
  }
  if (kind === 'query') {
    return fail(
      'not-replayable',
      `Dead letter "${id}" is the query "${type}": nobody awaits its result any more, so it is not redelivered; run the query again instead and remove the record`,
    );
  }
  if (kind === 'event' && record.handler === undefined) {
    return fail(
      'not-replayable',
      `Dead letter "${id}" is the event "${type}" on endpoint "${record.endpoint}" without a subscription to return to: publish the event again if its subscribers should see it, and remove the record`,
    );
  }

  const unverified = options.verifySignature?.(record.envelope);
  if (unverified !== undefined) {
    return fail(
      'signature-invalid',
      `Dead letter "${id}" was refused before replay: its envelope does not verify with the signing keys (${unverified}): if it was signed with a retired key, add that key back after the first one and replay again; otherwise the record was changed and should be removed`,
    );
  }

  if (options.verify !== undefined) {
    let refusal: string | ReplayRefusal | undefined;
    try {
      refusal = await options.verify(record);
    } catch (error) {
      return fail('verify-failed', `Dead letter "${id}" could not be verified: ${messageOf(error)}`);
    }
    if (typeof refusal === 'string') {
      return fail(refusal, `Dead letter "${id}" was refused before replay: ${refusal}`);
    }
    if (refusal !== undefined) {
      return fail(refusal.code, `Dead letter "${id}" was refused before replay: ${refusal.message}`);
    }
  }

  const viaProjection = options.projections?.handles(record) === true;
  if (!viaProjection && record.logPosition !== undefined) {
    const { topic, partition, offset } = record.logPosition;
    return fail(
      'projection-replay-needs-app',
      `Dead letter "${id}" is the event "${type}" that projection "${record.handler ?? '?'}" failed on while reading the event log (topic "${topic}", partition ${partition}, offset ${offset}); no broker queue holds it, so replaying it means running the projection's code, which only the application has: call bus.replayDeadLetters(["${id}"]) in the application, or rebuild the projection (bus.projections.rebuild("${record.handler ?? '?'}") or \`harrier projections rebuild\`) to apply every event again in order`,
    );
  }

  if (options.dryRun === true) return { id, ok: true, dryRun: true };

  if (pace !== undefined) await pace();
  const replay: ReplayRecord = {
    at: clock.now(),
    ...(options.by !== undefined ? { by: options.by } : {}),
  };

  // The message goes back first and the record is marked after: a crash in between leaves the record
  // dead, so it can be replayed again (at worst a second delivery), never marked with nothing sent.
  if (viaProjection) {
    let refusal: ReplayRefusal | undefined;
    const projections = options.projections;
    const telemetry = options.telemetry;
    const run = (): Promise<ReplayRefusal | undefined> => projections.replay(record);
    try {
      refusal = await (telemetry === undefined
        ? run()
        : runObserved(
            (observed) =>
              telemetry.replay({ record, via: 'projection', by: options.by }, async () => {
                const refused = await observed();
                // A refusal fails the replay's span too.
                if (refused !== undefined) throw new ProjectionReplayRefused(refused);
                return refused;
              }),
            run,
            ignoreTelemetryFailure,
          ));
    } catch (error) {
      refusal = { code: 'projection-failed', message: messageOf(error) };
    }
    if (refusal === undefined) {
      const result = await markReplayed(id, record, replay, store, 'handled by its projection');
      // The projection ran here and succeeded: no dispatcher will see this message, so the replay
      // records its own outcome. Best effort: without the mark the outcome only stays `pending`.
      if (result.ok) await store.markReplayHandled?.(id, clock.now()).catch(() => undefined);
      return result;
    }
    // Keep the try in the replay history; the record stays (or is set back to) dead.
    await store
      .markReplayed(id, replay)
      .then(() => store.get(id))
      .then((current) => (current === undefined ? undefined : store.add(current)))
      .catch(() => undefined);
    return fail(
      refusal.code,
      `Dead letter "${id}" was run through projection "${record.handler ?? '?'}" again and failed (it is still dead): ${refusal.message}`,
    );
  }

  const redeliver = (): Promise<void> =>
    broker.redeliver({
      endpoint: record.endpoint,
      handler: record.handler ?? '',
      deadLetterId: id,
      message: {
        id: messageId,
        kind,
        type,
        body: record.envelope,
        partitionKey: record.partitionKey,
        ordered: record.ordered,
      },
    });
  try {
    const telemetry = options.telemetry;
    await (telemetry === undefined
      ? redeliver()
      : runObserved(
          (observed) => telemetry.replay({ record, via: 'redeliver', by: options.by }, observed),
          redeliver,
          ignoreTelemetryFailure,
        ));
  } catch (error) {
    return fail(
      'redeliver-failed',
      `The broker refused to redeliver dead letter "${id}" (nothing was sent; it is still dead): ${messageOf(error)}`,
    );
  }
  return markReplayed(id, record, replay, store, 'redelivered');
}

/**
 * A failure of the replay's telemetry itself: the replay's result stays its own (runObserved), and
 * a replay has no logger to report it to.
 */
function ignoreTelemetryFailure(): void {}

/** A projection's refusal, thrown inside the replay's telemetry so its span fails. */
class ProjectionReplayRefused extends Error {
  constructor(readonly refusal: ReplayRefusal) {
    super(refusal.message);
    this.name = 'ProjectionReplayRefused';
  }
}

/** Whether the stored record shows a failure newer than the one `before` recorded. */
function diedAgain(before: DeadLetterRecord, now: DeadLetterRecord): boolean {
  return (
    now.lastFailedAt !== before.lastFailedAt ||
    now.attemptCount !== before.attemptCount ||
    now.reason !== before.reason ||
    now.error.message !== before.error.message
  );
}

/**
 * Marks a record replayed after its message went back; if the message already died again (a fast
 * consumer), sets the record back to dead so the mark does not hide the new failure.
 */
async function markReplayed(
  id: string,
  record: DeadLetterRecord,
  replay: ReplayRecord,
  store: DeadLetterStore,
  done: string,
): Promise<ReplayResult> {
  try {
    if (!(await store.markReplayed(id, replay))) {
      return {
        id,
        ok: false,
        error: 'mark-failed',
        message: `Dead letter "${id}" was ${done}, but its record disappeared before it could be marked replayed (removed meanwhile?)`,
      };
    }
  } catch (error) {
    return {
      id,
      ok: false,
      error: 'mark-failed',
      message: `Dead letter "${id}" was ${done}, but could not be marked replayed: ${messageOf(error)}. Do not replay it again, or the message is delivered twice`,
    };
  }
  try {
    const current = await store.get(id);
    if (current !== undefined && diedAgain(record, current)) await store.add(current);
  } catch {
    // Best effort: the record says replayed though the message failed again; its next failure fixes it.
  }
  return { id, ok: true };
}
