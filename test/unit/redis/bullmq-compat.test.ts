import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { Worker } from 'bullmq';
import { describe, expect, it } from 'vitest';
import { OVERRIDDEN_WORKER_METHODS, TESTED_BULLMQ_RANGE } from '../../../src/redis/bullmq-compat.js';

const require = createRequire(import.meta.url);

/** The installed BullMQ's version, from its package.json (found next to its resolved main file). */
function installedBullmqVersion(): string {
  let dir = dirname(require.resolve('bullmq'));
  for (;;) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
        name?: string;
        version: string;
      };
      if (pkg.name === 'bullmq') return pkg.version;
    } catch {
      // Not a package root yet: go up.
    }
    const parent = dirname(dir);
    if (parent === dir) throw new Error('bullmq package.json not found');
    dir = parent;
  }
}

/** `[major, minor, patch]` of a plain `x.y.z` version. */
const parse = (version: string): number[] => {
  const match = /^(\d+)\.(\d+)\.(\d+)$/.exec(version);
  if (match === null) throw new Error(`Not a plain version: ${version}`);
  return match.slice(1).map(Number);
};

const compare = (a: number[], b: number[]): number =>
  a.reduce((result, part, i) => (result !== 0 ? result : part - (b[i] ?? 0)), 0);

describe('the BullMQ Harrier runs on', () => {
  it('is the range package.json declares as its peer', () => {
    const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as {
      peerDependencies: Record<string, string>;
    };
    expect(pkg.peerDependencies.bullmq).toBe(TESTED_BULLMQ_RANGE);
  });

  it('is installed at a version inside the tested range', () => {
    const [, low, high] = /^>=(\S+) <(\S+)$/.exec(TESTED_BULLMQ_RANGE) ?? [];
    expect(low, 'the range has the form ">=x.y.z <x.y.z"').toBeDefined();
    const installed = parse(installedBullmqVersion());
    expect(
      compare(installed, parse(low ?? '')),
      `BullMQ ${installedBullmqVersion()} is older than the tested range`,
    ).toBeGreaterThanOrEqual(0);
    expect(
      compare(installed, parse(high ?? '')),
      `BullMQ ${installedBullmqVersion()} is newer than the tested range ${TESTED_BULLMQ_RANGE}: run the BullMQ tests on it, then widen TESTED_BULLMQ_RANGE and peerDependencies.bullmq`,
    ).toBeLessThan(0);
  });

  it('has the Worker internals ReceiverWorker overrides, with the same parameters', () => {
    const prototype = Worker.prototype as unknown as Record<string, unknown>;
    for (const [method, parameters] of Object.entries(OVERRIDDEN_WORKER_METHODS)) {
      const found = prototype[method];
      expect(typeof found, `Worker.prototype.${method}`).toBe('function');
      expect((found as (...args: unknown[]) => unknown).length, `Worker.prototype.${method}.length`).toBe(
        parameters,
      );
    }
  });
});
