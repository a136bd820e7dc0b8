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

/** Runs the example as a user would; a non-zero exit or a timeout becomes a non-zero code. */
async function runExample(): Promise<Outcome> {
  try {
    const { stdout, stderr } = await run('npx', ['tsx', 'examples/orders/main.ts'], {
      cwd: root,
      timeout: 20_000,
      killSignal: 'SIGKILL',
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

describe('examples/orders', () => {
  describe('when run with npx tsx examples/orders/main.ts', () => {
    let outcome: Outcome;
    beforeAll(async () => {
      outcome = await runExample();
    }, 30_000);

    it('exits with code 0', () => {
      expect(outcome.code, outcome.stdout + outcome.stderr).toBe(0);
    });

    it('prints a retry of ChargePayment and its success on the third attempt', () => {
      expect(outcome.stdout).toMatch(
        /retrying\s+ChargePayment\s+orders\.OrderPlaced\s+o-1002\s+attempt 1 failed/,
      );
      expect(outcome.stdout).toMatch(
        /retrying\s+ChargePayment\s+orders\.OrderPlaced\s+o-1002\s+attempt 2 failed/,
      );
      expect(outcome.stdout).toMatch(/handled\s+ChargePayment\s+orders\.OrderPlaced\s+o-1002\s+on attempt 3/);
    });

    it('prints a dead letter of NotifyLegacyCrm for each order, with its reason', () => {
      for (const orderId of ['o-1001', 'o-1002', 'o-1003']) {
        expect(outcome.stdout).toMatch(
          new RegExp(
            `dead-lettered\\s+NotifyLegacyCrm\\s+orders\\.OrderPlaced\\s+${orderId}\\s+handler-failed after 3 attempts`,
          ),
        );
      }
      expect(outcome.stdout).toContain('Dead letters (bus.deadLetters.list()): 3');
    });

    it('prints the summary of the 3 orders with stock reserved and payment charged', () => {
      expect(outcome.stdout).toContain('3 orders');
      for (const orderId of ['o-1001', 'o-1002', 'o-1003']) {
        expect(outcome.stdout).toMatch(
          new RegExp(`^\\s+${orderId}\\s+\\w+\\s+\\d+\\s+\\$\\d+\\.\\d\\d\\s+res-\\d{4}\\s+pay-\\d{4}$`, 'm'),
        );
      }
    });

    it('reports no error or stack trace on stderr', () => {
      expect(outcome.stderr).not.toMatch(/"level":"(warn|error)"|\n\s+at /);
    });
  });
});
