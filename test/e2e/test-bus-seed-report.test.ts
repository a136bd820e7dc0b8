import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../..', import.meta.url));

interface Outcome {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs test/e2e/fixtures/seed-report in a vitest of its own, as a user's test run would. */
async function runFixture(): Promise<Outcome> {
  const args = [
    'node_modules/vitest/vitest.mjs',
    'run',
    '--config',
    'test/e2e/fixtures/seed-report/vitest.config.ts',
  ];
  try {
    const { stdout, stderr } = await run(process.execPath, args, {
      cwd: root,
      env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' },
      timeout: 60_000,
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code?: unknown; stdout?: string; stderr?: string };
    return {
      code: typeof failed.code === 'number' ? failed.code : -1,
      stdout: failed.stdout ?? '',
      stderr: failed.stderr ?? '',
    };
  }
}

describe('createTestBus', () => {
  describe('when a vitest test that made a shuffled bus fails', () => {
    let outcome: Outcome;
    beforeAll(async () => {
      outcome = await runFixture();
    }, 90_000);

    it('prints the seed of that test and how to replay it', () => {
      expect(outcome.code, outcome.stdout + outcome.stderr).toBe(1);
      expect(outcome.stderr).toContain('fails after making a shuffled bus');
      expect(outcome.stderr).toContain(
        'createTestBus delivered in shuffled order with seed 4321; replay it with createTestBus({ seed: 4321 }) or HARRIER_SEED=4321',
      );
    });

    it('prints nothing for a test that passes', () => {
      expect(outcome.stdout + outcome.stderr).not.toContain('seed 1234');
    });
  });
});
