import { randomUUID } from 'node:crypto';
import type { DeadLetterStore } from '../dead-letters/dead-letter-store.js';
import type { ReplayResult, ReplayRunOptions } from '../dead-letters/replay-dead-letters.js';
import { replayOutcome, type ReplayOutcome } from '../dead-letters/replay-outcome.js';

/** The replay the dashboard runs: the shape of `bus.replayDeadLetters`. */
export type DashboardReplay = (
  ids: readonly string[],
  options: ReplayRunOptions,
) => Promise<readonly ReplayResult[]>;

/**
 * What the progress page says of one record of a job: not reached yet (`queued`), refused or skipped
 * by the replay, or the replayed message's {@link ReplayOutcome}; `gone` when the record was removed
 * (or re-added) since.
 */
export type JobRowState = 'queued' | 'refused' | 'skipped' | ReplayOutcome | 'gone';

/** One replay started from the dashboard, kept in memory. */
export interface ReplayJob {
  /** Random and unguessable: it is the job page's address. */
  readonly id: string;
  /** When it started, on the dashboard's clock (the bus's, so replay times compare). */
  readonly startedAt: number;
  /** What was selected, in words. */
  readonly description: string;
  readonly ids: readonly string[];
  /** Each record's result, as the replay reports it. */
  readonly results: Map<string, ReplayResult>;
  /** Outcomes that will not change any more (handled, failed again), so they are not read again. */
  readonly settled: Map<string, JobRowState>;
  finished: boolean;
  /** Why the replay stopped before the end, when it did. */
  failure: string | undefined;
}

/** Replays run at once by a dashboard job (as `harrier dlq replay` by default). */
export const REPLAY_CONCURRENCY = 16;

/** Jobs kept; the oldest is forgotten when another starts. */
export const KEPT_JOBS = 20;

/** Records read at once when a job's outcomes are refreshed. */
const READ_CHUNK = 100;

/** The last {@link KEPT_JOBS} replay jobs of one dashboard, in memory (gone on restart). */
export class ReplayJobs {
  readonly #jobs = new Map<string, ReplayJob>();

  /** Starts replaying `ids` in the background and returns its job at once. */
  start(ids: readonly string[], description: string, startedAt: number, replay: DashboardReplay): ReplayJob {
    const job: ReplayJob = {
      id: randomUUID(),
      startedAt,
      description,
      ids,
      results: new Map(),
      settled: new Map(),
      finished: false,
      failure: undefined,
    };
    this.#jobs.set(job.id, job);
    for (const old of this.#jobs.keys()) {
      if (this.#jobs.size <= KEPT_JOBS) break;
      this.#jobs.delete(old);
    }
    // Run after this turn, so the caller can answer (303 to the job page) before the first record goes.
    void Promise.resolve()
      .then(() =>
        replay(ids, {
          by: 'dashboard',
          concurrency: REPLAY_CONCURRENCY,
          onResult: (result) => {
            job.results.set(result.id, result);
          },
        }),
      )
      .then(
        () => {
          job.finished = true;
        },
        (error: unknown) => {
          job.failure = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
          job.finished = true;
        },
      );
    return job;
  }

  /** The job with that id, if it is still kept. */
  get(id: string): ReplayJob | undefined {
    return this.#jobs.get(id);
  }
}

/** Each id's state in `job`, reading the replayed records' outcomes from `store`. */
export async function jobRows(job: ReplayJob, store: DeadLetterStore): Promise<Map<string, JobRowState>> {
  const rows = new Map<string, JobRowState>();
  const toRead: string[] = [];
  for (const id of job.ids) {
    const result = job.results.get(id);
    const settled = job.settled.get(id);
    if (result === undefined) rows.set(id, 'queued');
    else if (!result.ok) rows.set(id, result.error === 'already-replayed' ? 'skipped' : 'refused');
    else if (settled !== undefined) rows.set(id, settled);
    else toRead.push(id);
  }
  for (let start = 0; start < toRead.length; start += READ_CHUNK) {
    const chunk = toRead.slice(start, start + READ_CHUNK);
    const records = await Promise.all(chunk.map((id) => store.get(id)));
    chunk.forEach((id, i) => {
      const record = records[i];
      const state = record === undefined ? 'gone' : (replayOutcome(record, job.startedAt) ?? 'gone');
      rows.set(id, state);
      if (state === 'handled' || state === 'failed-again') job.settled.set(id, state);
    });
  }
  return rows;
}
