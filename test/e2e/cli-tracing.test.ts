import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, inject, it } from 'vitest';
import { buildDeadLetterRecord } from '../../src/dead-letters/dead-letter-record.js';
import type { DeadLetterRecord } from '../../src/dead-letters/dead-letter-store.js';
import { uuidv7 } from '../../src/messages/uuid-v7.js';
import { RedisDeadLetterStore } from '../../src/redis/index.js';
import { deleteKeys } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');
const root = join(import.meta.dirname, '..', '..');
const bin = join(root, 'dist', 'cli', 'bin.js');
const otelSetup = pathToFileURL(join(import.meta.dirname, 'fixtures', 'otel-setup.js')).href;
const run = promisify(execFile);

const TRACE_ID = '0af7651916cd43dd8448eb211c80319c';
const PRODUCER_SPAN_ID = 'b7ad6b7169203331';

/** A span as test/e2e/fixtures/otel-setup.js writes it. */
interface SpanLine {
  readonly name: string;
  readonly kind: number;
  readonly links: readonly { traceId: string; spanId: string }[];
  readonly attributes: Record<string, unknown>;
  readonly status: { code: number };
}

/** A dead letter of a `cli.Count` command whose envelope carries the producer's traceparent. */
function deadLetter(): DeadLetterRecord {
  const id = uuidv7();
  const error = { name: 'Error', message: 'gateway down' };
  const body = JSON.stringify({
    v: 1,
    id,
    kind: 'command',
    type: 'cli.Count',
    payload: { n: 1 },
    meta: {
      correlationId: id,
      occurredAt: new Date().toISOString(),
      headers: {},
      traceparent: `00-${TRACE_ID}-${PRODUCER_SPAN_ID}-01`,
    },
  });
  return buildDeadLetterRecord({
    body,
    facts: {
      messageId: id,
      kind: 'command',
      type: 'cli.Count',
      endpoint: 'counter',
      handler: 'CountHandler',
      attempt: 1,
      history: [],
      partitionKey: undefined,
    },
    handler: 'CountHandler',
    reason: 'handler-failed',
    error,
    ordered: false,
    now: Date.now(),
  });
}

describe('harrier dlq replay', () => {
  let admin: Redis;
  let prefix: string;
  let store: RedisDeadLetterStore;
  let dir: string;

  beforeAll(() => {
    // test/global-setup.ts builds dist/ before any test when it is missing or stale.
    if (!existsSync(bin)) throw new Error(`${bin} is missing: run npm run build`);
    admin = new Redis(redisUrl);
  });
  afterAll(async () => {
    await admin.quit();
  });
  beforeEach(() => {
    prefix = `{clitrace-${randomUUID().slice(0, 8)}}`;
    store = new RedisDeadLetterStore({ connection: redisUrl, prefix });
    dir = mkdtempSync(join(tmpdir(), 'harrier-cli-tracing-'));
  });
  afterEach(async () => {
    await store.close();
    await deleteKeys(admin, prefix);
    rmSync(dir, { recursive: true, force: true });
  });

  /** Replays `id` with the CLI as a child process, with `env` added; resolves to its stdout. */
  async function replay(id: string, env: Record<string, string>): Promise<string> {
    const { stdout, stderr } = await run(
      process.execPath,
      [bin, 'dlq', 'replay', id, '--json', '--by', 'ops', '--prefix', prefix],
      { cwd: root, env: { PATH: process.env.PATH ?? '', REDIS_URL: redisUrl, ...env } },
    );
    expect(stderr).toBe('');
    return stdout;
  }

  describe('when an OpenTelemetry SDK is registered with --import', () => {
    it("writes a replay span linked to the message's producer span, flushed before the CLI exits", async () => {
      const record = deadLetter();
      await store.add(record);
      const spansFile = join(dir, 'spans.jsonl');

      const stdout = await replay(record.id, {
        NODE_OPTIONS: `--import ${otelSetup}`,
        SPANS_FILE: spansFile,
      });

      expect(stdout).toContain('"replayed":1');
      const spans = readFileSync(spansFile, 'utf8')
        .split('\n')
        .filter((line) => line !== '')
        .map((line) => JSON.parse(line) as SpanLine);
      expect(spans.map((s) => s.name)).toEqual(['replay cli.Count']);
      const [span] = spans;
      expect(span?.kind).toBe(0); // INTERNAL
      expect(span?.attributes).toMatchObject({
        'messaging.destination.name': 'cli.Count',
        'messaging.message.id': record.messageId,
        'messaging.consumer.group.name': 'counter',
        'harrier.handler': 'CountHandler',
        'harrier.dead_letter.id': record.id,
        'harrier.dead_letter.reason': 'handler-failed',
        'harrier.replay.via': 'redeliver',
        'harrier.replay.by': 'ops',
      });
      expect(span?.links).toEqual([{ traceId: TRACE_ID, spanId: PRODUCER_SPAN_ID }]);
      expect(span?.status.code).not.toBe(2); // ERROR
      expect((await store.get(record.id))?.status).toBe('replayed');
    });
  });

  describe('without an SDK', () => {
    it('replays as before and writes no span', async () => {
      const record = deadLetter();
      await store.add(record);
      const spansFile = join(dir, 'spans.jsonl');

      const stdout = await replay(record.id, { SPANS_FILE: spansFile });

      expect(stdout).toContain('"replayed":1');
      expect(existsSync(spansFile)).toBe(false);
      expect((await store.get(record.id))?.status).toBe('replayed');
    });
  });
});
