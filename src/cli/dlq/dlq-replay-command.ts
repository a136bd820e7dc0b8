import type { DeadLetterRecord } from '../../dead-letters/dead-letter-store.js';
import {
  replayDeadLetters,
  summarizeReplay,
  type ReplayResult,
} from '../../dead-letters/replay-dead-letters.js';
import { HarrierError } from '../../errors/harrier-error.js';
import { createEnvelopeSigner, type EnvelopeSigner } from '../../messages/signing.js';
import { loadGlobalTracing, type GlobalTracing } from '../../telemetry/load-tracing.js';
import { SELECTOR_OPTIONS, contextOf, parse } from '../cli-context.js';
import { ExitCode, nothingMatched, usageError, writeJson, type CliIo } from '../cli-io.js';
import { ProgressBar } from '../progress.js';
import { help, positiveInteger, positiveNumber } from '../cli-args.js';
import { REPLAY_HELP } from './dlq-help.js';
import { withDlqBackend } from './dlq-backend.js';
import { describeSelection, selectRecords, selectionOf } from './dlq-selection.js';

/**
 * `harrier dlq replay`: parses the flags, runs {@link replayDeadLetters} (which owns lanes, rate,
 * concurrency and verification) and draws its per-record results.
 *
 * @remarks
 * Traces each replay (`replay <type>` spans) through the globally registered OpenTelemetry SDK when
 * `@opentelemetry/api` is installed (see docs/telemetry.md), and flushes the spans before returning.
 */
export async function replayCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parse(argv, {
    ...SELECTOR_OPTIONS,
    all: { type: 'boolean' },
    'dry-run': { type: 'boolean' },
    rate: { type: 'string' },
    concurrency: { type: 'string' },
    by: { type: 'string' },
    'signing-keys': { type: 'string' },
  });
  if (values.help === true) return help(io, REPLAY_HELP);
  const selection = selectionOf('replay', positionals, values, 'dead', true);
  const rate = values.rate === undefined ? undefined : positiveNumber('rate', values.rate);
  const concurrency = positiveInteger('concurrency', values.concurrency ?? '16');
  const dryRun = values['dry-run'] === true;
  const user = io.env.USER ?? io.env.USERNAME;
  const by = values.by ?? (user !== undefined && user !== '' ? `cli:${user}` : 'cli');
  const signer = signerOf(values['signing-keys'] ?? io.env.HARRIER_SIGNING_KEYS);
  const ctx = contextOf(io, values);

  return withDlqBackend(ctx, async ({ store, openBroker }) => {
    const records = await selectRecords(store, selection);
    const found = records.filter((r): r is DeadLetterRecord => r !== undefined);
    if (found.length === 0) {
      throw nothingMatched(`No dead letters match (${describeSelection(selection)}): nothing to replay`);
    }
    const ids = selection.kind === 'ids' ? selection.ids : found.map((r) => r.id);
    const broker = await openBroker();
    const progress = new ProgressBar(io.stderr, ids.length, dryRun ? 'checking' : 'replaying');
    const report = (result: ReplayResult, record: DeadLetterRecord | undefined): void => {
      progress.tick();
      if (result.ok) {
        if (ctx.json) {
          progress.finish();
          writeJson(io.stdout, result);
        } else if (dryRun) {
          progress.finish();
          io.stdout.write(
            `would replay ${result.id}  ${record?.type ?? '?'} -> ${record?.endpoint ?? '?'}/${record?.handler ?? '-'}\n`,
          );
        }
        return;
      }
      progress.finish();
      if (ctx.json) writeJson(io.stdout, result);
      else {
        io.stderr.write(
          `${result.error === 'already-replayed' ? 'skipped' : 'failed'} ${result.id}: ${result.error}: ${result.message}\n`,
        );
      }
    };
    const tracing = dryRun ? undefined : await tracingOf(io);
    let results: ReplayResult[];
    try {
      results = await replayDeadLetters({
        store,
        broker,
        ids,
        by,
        dryRun,
        concurrency,
        ...(rate !== undefined ? { rate } : {}),
        ...(signer !== undefined ? { verifySignature: (body: string) => signer.verify(body) } : {}),
        onResult: report,
        ...(tracing !== undefined ? { telemetry: tracing.replay } : {}),
      });
    } finally {
      progress.finish();
      await tracing?.flush().catch((error: unknown) => {
        io.stderr.write(`harrier: could not export the replay's spans: ${messageOf(error)}\n`);
      });
    }
    const { replayed, failed, skipped } = summarizeReplay(results);
    if (ctx.json) {
      writeJson(io.stdout, { summary: { replayed, failed, skipped, total: ids.length, dryRun } });
    } else {
      io.stdout.write(
        dryRun
          ? `dry run: would replay ${replayed}, would fail ${failed}, skipped ${skipped}\n`
          : `replayed ${replayed}, failed ${failed}, skipped ${skipped}\n`,
      );
    }
    return failed > 0 ? ExitCode.someFailed : ExitCode.ok;
  });
}

/**
 * Tracing through the global OpenTelemetry SDK; `undefined` without `@opentelemetry/api` (silently)
 * or when it fails to load (with a warning: the replay goes on untraced).
 */
async function tracingOf(io: CliIo): Promise<GlobalTracing | undefined> {
  try {
    return await loadGlobalTracing();
  } catch (error) {
    io.stderr.write(`harrier: tracing is off, @opentelemetry/api did not load: ${messageOf(error)}\n`);
    return undefined;
  }
}

const messageOf = (error: unknown): string => (error instanceof Error ? error.message : String(error));

/**
 * The signer that checks replayed envelopes against `keys` (comma-separated, from `--signing-keys` or
 * `HARRIER_SIGNING_KEYS`), or undefined when none are given.
 *
 * @throws CliExit usage error (exit 2) when a key is malformed.
 */
export function signerOf(keys: string | undefined): EnvelopeSigner | undefined {
  if (keys === undefined || keys.trim() === '') return undefined;
  try {
    return createEnvelopeSigner({
      keys: keys
        .split(',')
        .map((k) => k.trim())
        .filter((k) => k !== ''),
    });
  } catch (error) {
    if (HarrierError.is(error)) throw usageError(`--signing-keys / HARRIER_SIGNING_KEYS: ${error.message}`);
    throw error;
  }
}
