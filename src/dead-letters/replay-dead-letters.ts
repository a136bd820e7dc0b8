import type { MessageBroker } from '../broker/message-broker.js';
import { systemClock, type Clock } from '../clock/clock.js';
import type { DeadLetterRecord, DeadLetterStore, ReplayRecord } from './dead-letter-store.js';

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

/** Options of {@link replayDeadLetters}. */
export interface ReplayDeadLettersOptions {
  /** Where the dead letters are kept. */
  readonly store: DeadLetterStore;
  /** The broker that re-dispatches the messages. */
  readonly broker: MessageBroker;
  /** The dead letters to replay, in the order to redeliver them. */
  readonly ids: readonly string[];
  /**
   * Who or what replays, recorded in each record's replay history (`cli`, a user name).
   * @defaultValue not recorded
   */
  readonly by?: string;
  /**
   * Time source of the replay records.
   * @defaultValue the system clock
   */
  readonly clock?: Clock;
  /**
   * Check every record and report what would happen, without redelivering or marking anything.
   * @defaultValue false
   */
  readonly dryRun?: boolean;
  /**
   * Last check before a record goes back (such as its envelope signature): return a short refusal
   * code such as `signature-invalid` (or a {@link ReplayRefusal} with a code and an explanation) to
   * refuse it, or undefined to let it through. A throw refuses it with code `verify-failed`.
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

const messageOf = (error: unknown): string => (error instanceof Error ? error.message : String(error));

/**
 * Sends dead letters back to the subscriptions they died in, with the same message id and fresh
 * attempts, and marks them replayed.
 *
 * @remarks
 * Each id is handled on its own and in the given order: one that fails never stops the others, and
 * this function never rejects for a single record. The message goes back through
 * {@link MessageBroker.redeliver}, so it is handled by a dispatcher of its endpoint like any other
 * delivery and dead-letters again (updating the same record) if it fails again.
 *
 * @returns one result per id, in the order of `ids`.
 *
 * @example
 * ```ts
 * const results = await replayDeadLetters({ store, broker, ids: [id], by: 'cli' });
 * for (const r of results) if (!r.ok) console.error(`${r.id}: ${r.error}: ${r.message}`);
 * ```
 */
export async function replayDeadLetters(options: ReplayDeadLettersOptions): Promise<ReplayResult[]> {
  const results: ReplayResult[] = [];
  for (const id of options.ids) results.push(await replayOne(id, options));
  return results;
}

async function replayOne(id: string, options: ReplayDeadLettersOptions): Promise<ReplayResult> {
  const { store, broker } = options;
  const fail = (error: ReplayErrorCode, message: string): ReplayFailure => ({
    id,
    ok: false,
    error,
    message,
  });

  let record: DeadLetterRecord | undefined;
  try {
    record = await store.get(id);
  } catch (error) {
    return fail('store-failed', `Could not read dead letter "${id}": ${messageOf(error)}`);
  }
  if (record === undefined) {
    return fail(
      'not-found',
      `No dead letter "${id}": check the id; the record may have been removed or purged`,
    );
  }
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

  const replay: ReplayRecord = {
    at: (options.clock ?? systemClock).now(),
    ...(options.by !== undefined ? { by: options.by } : {}),
  };

  // The message goes back first and the record is marked after: a crash in between leaves the record
  // dead, so it can be replayed again (at worst a second delivery), never marked with nothing sent.
  if (viaProjection) {
    let refusal: ReplayRefusal | undefined;
    try {
      refusal = await options.projections.replay(record);
    } catch (error) {
      refusal = { code: 'projection-failed', message: messageOf(error) };
    }
    if (refusal === undefined) return markReplayed(id, record, replay, store, 'handled by its projection');
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

  try {
    await broker.redeliver({
      endpoint: record.endpoint,
      handler: record.handler ?? '',
      message: {
        id: messageId,
        kind,
        type,
        body: record.envelope,
        partitionKey: record.partitionKey,
        ordered: record.ordered,
      },
    });
  } catch (error) {
    return fail(
      'redeliver-failed',
      `The broker refused to redeliver dead letter "${id}" (nothing was sent; it is still dead): ${messageOf(error)}`,
    );
  }
  return markReplayed(id, record, replay, store, 'redelivered');
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
