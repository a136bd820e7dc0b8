import { spawn, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, inject, it } from 'vitest';
import type { DeadLetterReason, DeadLetterRecord } from '../../src/dead-letters/dead-letter-store.js';
import { RedisDeadLetterStore } from '../../src/redis/index.js';
import { countDeadLetter } from '../helpers/harrier-cli.js';
import { deleteKeys } from '../helpers/redis.js';

const redisUrl = inject('redisUrl');
const root = join(import.meta.dirname, '..', '..');
const bin = join(root, 'dist', 'cli', 'bin.js');

/** util-linux `script` runs a command under a fresh pseudo-terminal: stdin, stdout and stderr are all the pty. */
const hasScript = spawnSync('script', ['--version'], { encoding: 'utf8' }).stdout.includes('util-linux');

interface PtyResult {
  readonly code: number | null;
  /** Everything the pty showed: stdout and stderr interleaved, with the terminal's \r\n line ends. */
  readonly output: string;
  readonly ms: number;
  /** Each piece of output with when it arrived (`script -f` flushes as the command writes). */
  readonly chunks: readonly { readonly at: number; readonly text: string }[];
}

/** When the output first matched `pattern`, or undefined. */
function timeOf(result: PtyResult, pattern: RegExp): number | undefined {
  let seen = '';
  for (const chunk of result.chunks) {
    seen += chunk.text;
    if (pattern.test(seen)) return chunk.at;
  }
  return undefined;
}

const quote = (arg: string): string => `'${arg.replace(/'/g, `'\\''`)}'`;

/**
 * Runs the built `harrier` bin under a pseudo-terminal (`script -qfec`), so stdin, stdout and stderr
 * are a TTY. `answer`, when given, is typed into the terminal once the output contains `answerAfter`.
 * `redirect` is appended to the command line as shell redirections (e.g. `>out.json`).
 */
function harrierOnPty(
  args: readonly string[],
  options: { answer?: string; answerAfter?: string; redirect?: string } = {},
): Promise<PtyResult> {
  const command = [process.execPath, bin, ...args].map(quote).join(' ') + (options.redirect ?? '');
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const child = spawn('script', ['-qfec', command, '/dev/null'], {
      cwd: root,
      env: {
        PATH: process.env.PATH ?? '',
        SHELL: '/bin/sh',
        TERM: 'xterm',
        USER: 'tester',
        REDIS_URL: redisUrl,
      },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let output = '';
    const chunks: { at: number; text: string }[] = [];
    let answered = options.answer === undefined;
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      output += chunk;
      chunks.push({ at: Date.now(), text: chunk });
      if (!answered && output.includes(options.answerAfter ?? '')) {
        answered = true;
        child.stdin.write(options.answer);
      }
    });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      child.stdin.destroy();
      resolve({ code, output, ms: Date.now() - started, chunks });
    });
  });
}

/** ESC, kept out of regex literals (no-control-regex). */
const ESC = String.fromCharCode(27);
const ANSI = new RegExp(`${ESC}\\[[0-9;]*[A-Za-z]`, 'g');

/** One redraw of the replay progress bar: carriage return, clear line, label, bar, then `rest`. */
const frame = (bar: string, rest: string, flags = ''): RegExp =>
  new RegExp(`\\r${ESC}\\[2Kreplaying \\[${bar}\\] ${rest}`, flags);

/**
 * The lines left on the screen: split on the pty's \r\n; of a line redrawn with \r, what follows the
 * last \r; without ANSI escape sequences.
 */
function lines(output: string): string[] {
  return output
    .split('\r\n')
    .map((line) => (line.split('\r').at(-1) ?? '').replace(ANSI, ''))
    .filter((line) => line.trim() !== '');
}

function deadLetter(n: number, reason: DeadLetterReason = 'handler-failed', ver?: number): DeadLetterRecord {
  if (ver === undefined) return countDeadLetter({ n }, { reason });
  return countDeadLetter({ n }, { reason, encode: (envelope) => JSON.stringify({ ...envelope, ver }) });
}

describe.skipIf(!hasScript)('harrier CLI on a terminal (util-linux script pty)', () => {
  let admin: Redis;
  let prefix: string;
  let store: RedisDeadLetterStore;
  let dir: string;

  beforeAll(() => {
    // test/global-setup.ts builds dist/ before any test when it is missing or stale.
    if (!existsSync(bin)) throw new Error(`${bin} is missing: run npm run build`);
    admin = new Redis(redisUrl);
  }, 200_000);

  afterAll(async () => {
    await admin.quit();
  });

  beforeEach(() => {
    prefix = `{clitty-${randomUUID().slice(0, 8)}}`;
    store = new RedisDeadLetterStore({ connection: redisUrl, prefix });
    dir = mkdtempSync(join(tmpdir(), 'harrier-cli-tty-'));
  });

  afterEach(async () => {
    await store.close();
    await deleteKeys(admin, prefix);
    rmSync(dir, { recursive: true, force: true });
  });

  async function seed(records: readonly DeadLetterRecord[]): Promise<void> {
    await Promise.all(records.map((record) => store.add(record)));
  }

  describe('dlq show', () => {
    it("shows each replay's outcome: when it was handled, or pending", async () => {
      const [handled, pending] = [deadLetter(1), deadLetter(2)];
      await seed([handled, pending]);
      const replayAt = Date.UTC(2026, 0, 2, 10, 0, 0);
      await store.markReplayed(handled.id, { at: replayAt, by: 'ops' });
      await store.markReplayHandled(handled.id, replayAt + 1500);
      await store.markReplayed(pending.id, { at: replayAt });

      const shown = lines((await harrierOnPty(['dlq', 'show', handled.id, '--prefix', prefix])).output);
      const shownPending = lines(
        (await harrierOnPty(['dlq', 'show', pending.id, '--prefix', prefix])).output,
      );

      expect(shown).toContain('  2026-01-02T10:00:00.000Z  by ops  handled 2026-01-02T10:00:01.500Z');
      expect(shownPending).toContain('  2026-01-02T10:00:00.000Z  by -  pending');
    });
  });

  describe('dlq replay --all', () => {
    it('redraws a count/total progress line with carriage returns and ends with the summary', async () => {
      await seed(Array.from({ length: 100 }, (_, n) => deadLetter(n)));

      const result = await harrierOnPty(['dlq', 'replay', '--all', '--prefix', prefix]);

      expect(result.code, result.output).toBe(0);
      // The bar redraws in place: \r, clear line, then label, bar, count/total.
      expect(result.output).toMatch(frame('#{24}', '100/100 100%'));
      const visible = lines(result.output);
      expect(visible.at(-1)?.trim()).toBe('replayed 100, failed 0, skipped 0');
      expect(await store.count({ status: 'replayed' })).toBe(100);
    });

    it('draws the bar on stderr: with stdout redirected, the terminal still shows it and stdout gets JSON', async () => {
      await seed(Array.from({ length: 100 }, (_, n) => deadLetter(n)));
      const out = join(dir, 'out.jsonl');

      const result = await harrierOnPty(['dlq', 'replay', '--all', '--prefix', prefix], {
        redirect: ` >${quote(out)}`,
      });

      expect(result.code, result.output).toBe(0);
      expect(result.output).toMatch(frame('#{24}', '100/100 100%'));
      expect(result.output).not.toContain('{');
      const json = readFileSync(out, 'utf8')
        .split('\n')
        .filter((line) => line !== '')
        .map((line) => JSON.parse(line) as Record<string, unknown>);
      expect(json).toHaveLength(101);
      expect(json.at(-1)).toEqual({
        summary: { replayed: 100, failed: 0, skipped: 0, total: 100, dryRun: false },
      });
      expect(readFileSync(out, 'utf8')).not.toContain('\r');
    });

    it('paces replays with --rate 50: 100 records take at least ~2 s, and the bar shows the count rising', async () => {
      await seed(Array.from({ length: 100 }, (_, n) => deadLetter(n)));

      const result = await harrierOnPty(['dlq', 'replay', '--all', '--rate', '50', '--prefix', prefix]);

      expect(result.code, result.output).toBe(0);
      // One token at start, then 50/s: 99 more tokens take ~1.98 s. Wide margin for the bound, and
      // measured from the first frame to the last, so process start-up and Redis connect do not count.
      expect(result.ms).toBeGreaterThanOrEqual(1500);
      const first = timeOf(result, frame('[#-]{24}', '1/100 '));
      const last = timeOf(result, frame('#{24}', '100/100 '));
      expect(first).toBeDefined();
      expect(last).toBeDefined();
      expect((last ?? 0) - (first ?? 0)).toBeGreaterThanOrEqual(1500);
      const counts = [...result.output.matchAll(frame('[#-]{24}', '(\\d+)/100 ', 'g'))].map((m) =>
        Number(m[1]),
      );
      // Redrawn at most every 100 ms over ~2 s: many intermediate frames, never going backwards.
      expect(counts.length).toBeGreaterThanOrEqual(5);
      expect(counts.at(-1)).toBe(100);
      expect(counts).toEqual([...counts].sort((a, b) => a - b));
      expect(counts.filter((n) => n > 0 && n < 100).length).toBeGreaterThanOrEqual(3);
      expect(lines(result.output).at(-1)?.trim()).toBe('replayed 100, failed 0, skipped 0');
      expect(await store.count({ status: 'replayed' })).toBe(100);
    });
  });

  describe('dlq list', () => {
    it('prints an aligned table with a header row, not JSON lines', async () => {
      const records = [deadLetter(1), deadLetter(2), deadLetter(3)];
      await seed(records);

      const result = await harrierOnPty(['dlq', 'list', '--prefix', prefix]);

      expect(result.code, result.output).toBe(0);
      const visible = lines(result.output);
      expect(visible[0]).toMatch(
        /^ID +LAST FAILED +ENDPOINT +HANDLER +TYPE +VER +REASON +TRIES +STATUS +ERROR$/,
      );
      expect(visible).toHaveLength(4);
      for (const record of records) {
        const row = visible.find((line) => line.startsWith(record.id));
        expect(row).toMatch(
          / counter +CountHandler +cli\.Count +1 +handler-failed +3 +dead +Error: gateway down$/,
        );
      }
      expect(visible.some((line) => line.trimStart().startsWith('{'))).toBe(false);
    });

    it("shows each record's message version: the envelope's ver, 1 without one, - for bytes that are not JSON", async () => {
      const v3 = deadLetter(1, 'handler-failed', 3);
      const garbled: DeadLetterRecord = { ...deadLetter(2), envelope: 'not json {' };
      await seed([v3, garbled]);

      const result = await harrierOnPty(['dlq', 'list', '--prefix', prefix]);
      const shown = lines((await harrierOnPty(['dlq', 'show', v3.id, '--prefix', prefix])).output);
      const shownGarbled = lines(
        (await harrierOnPty(['dlq', 'show', garbled.id, '--prefix', prefix])).output,
      );

      expect(result.code, result.output).toBe(0);
      const visible = lines(result.output);
      expect(visible.find((line) => line.startsWith(v3.id))).toMatch(/ cli\.Count +3 +handler-failed /);
      expect(visible.find((line) => line.startsWith(garbled.id))).toMatch(/ cli\.Count +- +handler-failed /);
      expect(shown).toContain('  version       3');
      expect(shownGarbled).toContain('  version       -');
    });

    it('prints JSON lines when stdout is piped, even from a terminal', async () => {
      await seed([deadLetter(1), deadLetter(2)]);

      const result = await harrierOnPty(['dlq', 'list', '--prefix', prefix], { redirect: ' | cat' });

      expect(result.code, result.output).toBe(0);
      const visible = lines(result.output);
      expect(visible).toHaveLength(2);
      for (const line of visible) expect(JSON.parse(line)).toMatchObject({ endpoint: 'counter' });
    });
  });

  describe('when --redis-url is malformed', () => {
    it.each([
      ['redis://:s3cret%zz@127.0.0.1:6379', 'the password has a bad percent escape'],
      ['http://127.0.0.1:6379', 'unknown scheme "http://"'],
      ['redis://127.0.0.1:63x9', 'port "63x9" is not a number from 1 to 65535'],
    ])('exits 2 with text naming --redis-url and the problem, for %s', async (url, problem) => {
      const result = await harrierOnPty(['dlq', 'list', '--redis-url', url]);
      expect(result.code).toBe(2);
      const shown = lines(result.output).join('\n');
      // An unknown scheme is refused before a backend is picked, so that message says URL, not Redis URL.
      expect(shown).toMatch(/^harrier: --redis-url "\S+" is not a valid (Redis )?URL: /);
      expect(shown).toContain(problem);
      expect(shown).not.toContain('s3cret');
    });
  });

  describe('dlq purge --reason', () => {
    async function seedMixed(): Promise<void> {
      await seed([
        ...Array.from({ length: 5 }, (_, n) => deadLetter(n, 'handler-failed')),
        ...Array.from({ length: 2 }, (_, n) => deadLetter(n, 'validation-failed')),
      ]);
    }

    it('asks for confirmation; answering n deletes nothing and exits 0', async () => {
      await seedMixed();

      const result = await harrierOnPty(['dlq', 'purge', '--reason', 'handler-failed', '--prefix', prefix], {
        answerAfter: '[y/N] ',
        answer: 'n\n',
      });

      expect(result.output).toContain('Delete 5 dead letter(s) (');
      expect(result.output).toContain('? [y/N] ');
      expect(result.output).toContain('Nothing deleted.');
      expect(result.output).not.toContain('purged');
      expect(result.code, result.output).toBe(0);
      expect(await store.count({ status: 'any' })).toBe(7);
    });

    it('answering y deletes exactly the selected dead letters', async () => {
      await seedMixed();

      const result = await harrierOnPty(['dlq', 'purge', '--reason', 'handler-failed', '--prefix', prefix], {
        answerAfter: '[y/N] ',
        answer: 'y\n',
      });

      expect(result.output).toContain('Delete 5 dead letter(s) (');
      expect(result.code, result.output).toBe(0);
      expect(lines(result.output).at(-1)?.trim()).toBe('purged 5 dead letter(s)');
      expect(await store.count({ status: 'any', reason: 'handler-failed' })).toBe(0);
      expect(await store.count({ status: 'any', reason: 'validation-failed' })).toBe(2);
    });
  });
});
